// export_model, and the default Module::export_onnx: nn/'s layers that take one tensor (or, for
// MultiheadAttention, query, key and value) exported by their exporters, any other module refused.
#include "nn/onnx/export.h"

#include <typeinfo>

#include "nn/onnx/modules.h"
#include "runtime/files.h"

namespace cppgrad::nn {

std::vector<onnx::Value> Module::export_onnx(onnx::Graph& g, const std::vector<onnx::Value>& in) const {
  // Exact types only: a subclass of Linear with a forward of its own must not pass for a Linear.
  const std::type_info& type = typeid(*this);
  auto one_input = [&]() -> const onnx::Value& {
    CPPGRAD_CHECK(in.size() == 1, "onnx export: {} '{}' takes 1 input, got {}", type_name(), g.module_name(*this), in.size());
    return in[0];
  };
  if (type == typeid(Linear)) return {onnx::linear(g, static_cast<const Linear&>(*this), one_input())};
  if (type == typeid(Embedding)) return {onnx::embedding(g, static_cast<const Embedding&>(*this), one_input())};
  if (type == typeid(LayerNorm)) return {onnx::layer_norm(g, static_cast<const LayerNorm&>(*this), one_input())};
  if (type == typeid(RMSNorm)) return {onnx::rms_norm(g, static_cast<const RMSNorm&>(*this), one_input())};
  if (type == typeid(Dropout)) return {one_input()};  // the identity in eval mode
  if (type == typeid(ReLU)) return {onnx::relu(g, one_input())};
  if (type == typeid(GELU)) return {onnx::gelu(g, one_input(), static_cast<const GELU&>(*this).approximate)};
  if (type == typeid(Tanh)) return {onnx::tanh(g, one_input())};
  if (type == typeid(Sigmoid)) return {onnx::sigmoid(g, one_input())};
  if (type == typeid(SiLU)) return {onnx::silu(g, one_input())};
  if (type == typeid(SwiGLU)) return {onnx::swiglu(g, static_cast<const SwiGLU&>(*this), one_input())};
  if (type == typeid(Sequential)) return {onnx::sequential(g, static_cast<const Sequential&>(*this), one_input())};
  if (type == typeid(PositionalEncoding))
    return {onnx::positional_encoding(g, static_cast<const PositionalEncoding&>(*this), one_input())};
  if (type == typeid(TransformerEncoderLayer))
    return {onnx::encoder_layer(g, static_cast<const TransformerEncoderLayer&>(*this), one_input())};
  if (type == typeid(TransformerEncoder))
    return {onnx::transformer_encoder(g, static_cast<const TransformerEncoder&>(*this), one_input())};
  if (type == typeid(DecoderBlock)) return {onnx::decoder_block(g, static_cast<const DecoderBlock&>(*this), one_input())};
  if (type == typeid(Decoder)) return {onnx::decoder(g, static_cast<const Decoder&>(*this), one_input())};
  auto two_inputs = [&]() {
    CPPGRAD_CHECK(in.size() == 2, "onnx export: {} '{}' takes 2 inputs, got {}", type_name(), g.module_name(*this), in.size());
  };
  if (type == typeid(TransformerDecoderLayer)) {
    two_inputs();
    return {onnx::decoder_layer(g, static_cast<const TransformerDecoderLayer&>(*this), in[0], in[1])};
  }
  if (type == typeid(TransformerDecoder)) {
    two_inputs();
    return {onnx::transformer_decoder(g, static_cast<const TransformerDecoder&>(*this), in[0], in[1])};
  }
  if (type == typeid(Transformer)) {
    two_inputs();
    return {onnx::transformer(g, static_cast<const Transformer&>(*this), in[0], in[1])};
  }
  if (type == typeid(MultiheadAttention)) {
    CPPGRAD_CHECK(in.size() == 3, "onnx export: MultiheadAttention '{}' takes query, key and value, got {} inputs "
                  "(masks: export through onnx::multihead_attention)", g.module_name(*this), in.size());
    return {onnx::multihead_attention(g, static_cast<const MultiheadAttention&>(*this), in[0], in[1], in[2])};
  }
  const std::string where = g.module_name(*this);
  throw Error(fmt::format("onnx export: {}{} has no ONNX exporter: override {}::export_onnx to write its graph with "
                          "the exporters of nn/onnx/modules.h, as its forward composes the layers (a custom "
                          "autograd::Function inside it has no ONNX form: write its ops with Graph::op)",
                          type_name(), where.empty() ? "" : fmt::format(" (at '{}')", where), type_name()));
}

}  // namespace cppgrad::nn

namespace cppgrad::onnx {

namespace {

// The symbols of each axis of `example` under `name`: the options' dynamic_axes, or the default.
std::vector<std::variant<int64_t, std::string>> input_dims(const std::string& name, const Tensor& example,
                                                           const ExportOptions& options) {
  std::vector<std::variant<int64_t, std::string>> dims(example.shape().begin(), example.shape().end());
  auto listed = options.dynamic_axes.find(name);
  if (listed != options.dynamic_axes.end()) {
    for (const auto& [axis, symbol] : listed->second) {
      CPPGRAD_CHECK(axis >= 0 && axis < example.dim() && !symbol.empty(),
                    "export_model: dynamic_axes['{}']: axis {} ('{}') is not an axis of the {}-d example input {}", name,
                    axis, symbol, example.dim(), shape_str(example.shape()));
      dims[static_cast<size_t>(axis)] = symbol;
    }
    return dims;
  }
  const int64_t open = example.is_floating_point() ? example.dim() - 1 : example.dim();
  for (int64_t axis = 0; axis < open; ++axis)
    dims[static_cast<size_t>(axis)] = axis == 0 ? std::string("batch") : fmt::format("{}_dim{}", name, axis);
  return dims;
}

}  // namespace

void export_model(const nn::Module& module, const GraphFunction& build, const std::vector<Tensor>& example_inputs,
                  const std::string& path, const ExportOptions& options) {
  CPPGRAD_CHECK(options.opset_version == Graph::kOpset, "export_model: opset_version {}: only opset {} is written",
                options.opset_version, Graph::kOpset);
  CPPGRAD_CHECK(!example_inputs.empty(), "export_model: no example inputs");
  CPPGRAD_CHECK(options.input_names.empty() || options.input_names.size() == example_inputs.size(),
                "export_model: {} input_names for {} example inputs", options.input_names.size(), example_inputs.size());
  Graph graph(module);
  std::vector<Value> inputs;
  for (size_t i = 0; i < example_inputs.size(); ++i) {
    const std::string name = options.input_names.empty() ? fmt::format("input_{}", i) : options.input_names[i];
    CPPGRAD_CHECK(example_inputs[i].defined(), "export_model: example input {} ('{}') is undefined", i, name);
    inputs.push_back(graph.add_input(name, example_inputs[i].dtype(), input_dims(name, example_inputs[i], options)));
  }
  for (const auto& named_axes : options.dynamic_axes) {
    const std::string& name = named_axes.first;  // not a structured binding: clang 14 cannot capture one
    CPPGRAD_CHECK(std::any_of(inputs.begin(), inputs.end(), [&](const Value& v) { return v.name == name; }),
                  "export_model: dynamic_axes names '{}', which is no input", name);
  }
  const std::vector<Value> outputs = build(graph, inputs);
  CPPGRAD_CHECK(!outputs.empty(), "export_model: the graph of {} has no outputs", module.type_name());
  CPPGRAD_CHECK(options.output_names.empty() || options.output_names.size() == outputs.size(),
                "export_model: {} output_names for the {} outputs of {}", options.output_names.size(), outputs.size(),
                module.type_name());
  for (size_t i = 0; i < outputs.size(); ++i) {
    CPPGRAD_CHECK(outputs[i].defined(), "export_model: output {} of {} is undefined", i, module.type_name());
    graph.add_output(options.output_names.empty() ? fmt::format("output_{}", i) : options.output_names[i], outputs[i]);
  }
  const std::string bytes = graph.serialize_checked(CPPGRAD_VERSION_STRING);
  files::write_file_atomically(path, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "export_model");
}

void export_model(const nn::Module& module, const std::vector<Tensor>& example_inputs, const std::string& path,
                  const ExportOptions& options) {
  export_model(
      module, [&module](Graph& g, const std::vector<Value>& in) { return module.export_onnx(g, in); }, example_inputs,
      path, options);
}

}  // namespace cppgrad::onnx
