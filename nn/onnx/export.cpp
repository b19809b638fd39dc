// export_module: the graph of a forward, traced twice (autograd/trace.h) and each op written in
// its ONNX form (nn/onnx/emitters.cpp).
#include "nn/onnx/export.h"

#include "autograd/trace.h"
#include "nn/onnx/emit.h"
#include "runtime/files.h"

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
                    "export_module: dynamic_axes['{}']: axis {} ('{}') is not an axis of the {}-d example input {}", name,
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

// The example's input at the other sizes of the trace: each dynamic axis one shorter (or,
// under 3, one longer, by repeating its first entry), so a size of 3 and one of 2 stay apart.
Tensor resized(const std::string& name, const Tensor& example, const std::vector<std::variant<int64_t, std::string>>& dims) {
  Tensor t = example;
  std::map<int64_t, int64_t> seen;  // a dynamic size -> its axis
  for (int64_t axis = 0; axis < example.dim(); ++axis) {
    const auto* symbol = std::get_if<std::string>(&dims[static_cast<size_t>(axis)]);
    if (symbol == nullptr) continue;
    const int64_t n = example.size(axis);
    auto [it, fresh] = seen.emplace(n, axis);
    CPPGRAD_CHECK(fresh || std::get<std::string>(dims[static_cast<size_t>(it->second)]) == *symbol,
                  "export_module: input '{}' {}: dynamic axes {} and {} have the same size {} in the example, so the "
                  "trace cannot tell them apart: give them different sizes, or one symbol in dynamic_axes", name,
                  shape_str(example.shape()), it->second, axis, n);
    CPPGRAD_CHECK(n >= 1, "export_module: input '{}' {}: dynamic axis {} is empty in the example", name,
                  shape_str(example.shape()), axis);
    t = n >= 3 ? t.narrow(axis, 0, n - 1) : cat({t, t.narrow(axis, 0, 1)}, axis);
  }
  return t.contiguous();
}

// The ops a forward runs, written down (in eval mode, without a graph for backward).
std::vector<autograd::TracedOp> trace(const Forward& forward, const std::vector<Tensor>& inputs,
                                      std::vector<Tensor>& outputs) {
  NoGradGuard no_grad;
  autograd::Trace trace;
  outputs = forward(inputs);
  return trace.ops();
}

// The module that holds the parameter the op at `index` or an op before it last read: where an
// error points the user.
std::string module_near(const std::vector<autograd::TracedOp>& ops, size_t index,
                        const std::map<const TensorImpl*, std::string>& names) {
  for (size_t i = index + 1; i-- > 0;)
    for (const Tensor& t : ops[i].inputs) {
      auto it = t.defined() ? names.find(t.impl()) : names.end();
      if (it == names.end()) continue;
      const size_t dot = it->second.rfind('.');
      return dot == std::string::npos ? "the exported module itself" : fmt::format("'{}'", it->second.substr(0, dot));
    }
  return "the exported module itself";
}

}  // namespace

void export_module(nn::Module& module, const Forward& forward, const std::vector<Tensor>& example_inputs,
                   const std::string& path, const ExportOptions& options) {
  nn::EvalModeGuard eval_mode(module);  // as torch.onnx.export
  CPPGRAD_CHECK(options.opset_version == Graph::kOpset, "export_module: opset_version {}: only opset {} is written",
                options.opset_version, Graph::kOpset);
  CPPGRAD_CHECK(!example_inputs.empty(), "export_module: no example inputs");
  CPPGRAD_CHECK(options.input_names.empty() || options.input_names.size() == example_inputs.size(),
                "export_module: {} input_names for {} example inputs", options.input_names.size(), example_inputs.size());
  Graph graph(module);
  std::vector<TracedInput> inputs;
  std::vector<Tensor> other_inputs;
  for (size_t i = 0; i < example_inputs.size(); ++i) {
    const std::string name = options.input_names.empty() ? fmt::format("input_{}", i) : options.input_names[i];
    CPPGRAD_CHECK(example_inputs[i].defined(), "export_module: example input {} ('{}') is undefined", i, name);
    const auto dims = input_dims(name, example_inputs[i], options);
    if (options.other_inputs.empty()) {
      other_inputs.push_back(resized(name, example_inputs[i], dims));
    } else {
      CPPGRAD_CHECK(options.other_inputs.size() == example_inputs.size() && options.other_inputs[i].defined() &&
                        options.other_inputs[i].dim() == example_inputs[i].dim() &&
                        options.other_inputs[i].dtype() == example_inputs[i].dtype(),
                    "export_module: other_inputs must match the {} example inputs in number, rank and dtype",
                    example_inputs.size());
      other_inputs.push_back(options.other_inputs[i]);
    }
    // A dynamic axis of one size in both runs would be written as that constant, as a fixed dim is.
    for (int64_t axis = 0; axis < example_inputs[i].dim(); ++axis) {
      const auto* symbol = std::get_if<std::string>(&dims[static_cast<size_t>(axis)]);
      const int64_t a = example_inputs[i].size(axis), b = other_inputs.back().size(axis);
      CPPGRAD_CHECK(symbol == nullptr || a != b, "export_module: input '{}': dynamic axis {} ('{}') has size {} in both "
                    "traces (other_inputs), as a fixed dim would: give it another size in other_inputs", name, axis,
                    *symbol, a);
      CPPGRAD_CHECK(symbol != nullptr || a == b, "export_module: input '{}': fixed axis {} is {} in the example, {} in "
                    "other_inputs", name, axis, a, b);
    }
    inputs.push_back({graph.add_input(name, example_inputs[i].dtype(), dims), example_inputs[i].shape(),
                      other_inputs.back().shape()});
  }
  for (const auto& named_axes : options.dynamic_axes) {
    const std::string& name = named_axes.first;  // not a structured binding: clang 14 cannot capture one
    CPPGRAD_CHECK(std::any_of(inputs.begin(), inputs.end(), [&](const TracedInput& v) { return v.value.name == name; }),
                  "export_module: dynamic_axes names '{}', which is no input", name);
  }
  std::vector<Tensor> outputs, other_outputs;
  const std::vector<autograd::TracedOp> ops = trace(forward, example_inputs, outputs);
  const std::vector<autograd::TracedOp> other = trace(forward, other_inputs, other_outputs);
  CPPGRAD_CHECK(!outputs.empty(), "export_module: the forward of {} returns no tensor", module.type_name());
  CPPGRAD_CHECK(options.output_names.empty() || options.output_names.size() == outputs.size(),
                "export_module: {} output_names for the {} outputs of {}", options.output_names.size(), outputs.size(),
                module.type_name());

  std::map<const TensorImpl*, std::string> parameter_names;
  for (const auto& [name, t] : module.named_parameters()) parameter_names.emplace(t.impl(), name);
  for (const auto& [name, t] : module.named_buffers()) parameter_names.emplace(t.impl(), name);
  for (size_t i = 0; i < std::min(ops.size(), other.size()); ++i)
    CPPGRAD_CHECK(ops[i].op == other[i].op && ops[i].inputs.size() == other[i].inputs.size(),
                  "export_module: the forward of {} runs other ops at other sizes (op {} is {} at the example's sizes, "
                  "{} at others, near {}): its graph depends on the sizes", module.type_name(), i, ops[i].op,
                  other[i].op, module_near(ops, i, parameter_names));
  CPPGRAD_CHECK(ops.size() == other.size(), "export_module: the forward of {} runs {} ops at the example's sizes, {} at "
                "others: its graph depends on the sizes", module.type_name(), ops.size(), other.size());

  // Which ops the outputs need: a result the forward computes and drops (attention weights) is not written.
  std::map<const TensorImpl*, std::vector<size_t>> made_by;  // a tensor -> the ops that returned it, in order
  for (size_t i = 0; i < ops.size(); ++i) made_by[ops[i].output.impl()].push_back(i);
  auto producer = [&](const Tensor& t, size_t before) -> std::optional<size_t> {
    auto it = t.defined() ? made_by.find(t.impl()) : made_by.end();
    if (it == made_by.end()) return std::nullopt;
    std::optional<size_t> last;
    for (size_t i : it->second)
      if (i < before) last = i;
    return last;
  };
  std::vector<bool> needed(ops.size(), false);
  std::vector<size_t> stack;
  for (const Tensor& out : outputs)
    if (auto p = producer(out, ops.size())) stack.push_back(*p);
  while (!stack.empty()) {
    const size_t i = stack.back();
    stack.pop_back();
    if (needed[i]) continue;
    needed[i] = true;
    for (const Tensor& t : ops[i].inputs)
      if (auto p = producer(t, i)) stack.push_back(*p);
  }

  std::vector<Value> values(ops.size());
  auto value_of = [&](const autograd::TracedOp& op, const autograd::TracedOp& op_other, size_t index, size_t i) {
    const Tensor& t = op.inputs[index];
    if (!t.defined()) return Value();
    if (auto p = producer(t, i)) return values[*p];
    for (size_t k = 0; k < example_inputs.size(); ++k)
      if (example_inputs[k].is_same(t)) return inputs[k].value;
    if (parameter_names.count(t.impl()) != 0) return graph.parameter(t);
    // A tensor the forward made by no traced op (a constant): its shape must not follow the inputs'.
    const Tensor& t_other = op_other.inputs[index];
    CPPGRAD_CHECK(t_other.shape() == t.shape(),
                  "onnx export: {} (op {}, near {}) reads a {} tensor made by an op with no ONNX form, whose shape "
                  "follows the inputs' ({} at other sizes)", op.op, i, module_near(ops, i, parameter_names),
                  shape_str(t.shape()), shape_str(t_other.shape()));
    const bool same_values = t.to(kFloat64).to_vector<double>() == t_other.to(kFloat64).to_vector<double>();
    CPPGRAD_CHECK(same_values,
                  "onnx export: {} (op {}, near {}) reads a {} tensor made from the inputs by an op with no ONNX form "
                  "(its values differ at other sizes)", op.op, i, module_near(ops, i, parameter_names),
                  shape_str(t.shape()));
    return graph.constant(t.contiguous());
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!needed[i]) continue;
    const Emitter* emitter = find_emitter(ops[i].op);
    if (emitter == nullptr)
      throw Error(fmt::format("onnx export: op '{}' (near {} of {}) has no ONNX form: give it an emitter in "
                              "nn/onnx/emitters.cpp", ops[i].op, module_near(ops, i, parameter_names),
                              module.type_name()));
    CPPGRAD_CHECK(!ops[i].args.empty() || !reads_arguments(ops[i].op),
                  "onnx export: op '{}' (near {} of {}) was recorded without its arguments, which its ONNX form "
                  "needs: the op must note them (autograd::TraceScope::note)", ops[i].op,
                  module_near(ops, i, parameter_names), module.type_name());
    std::vector<Value> in;
    for (size_t k = 0; k < ops[i].inputs.size(); ++k) in.push_back(value_of(ops[i], other[i], k, i));
    Emit emit(graph, ops[i], other[i], std::move(in), inputs);
    Value v = (*emitter)(emit);
    v.dtype = ops[i].output.dtype();
    v.rank = ops[i].output.dim();
    values[i] = v;
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    CPPGRAD_CHECK(outputs[i].defined(), "export_module: output {} of {} is undefined", i, module.type_name());
    Value v;
    if (auto p = producer(outputs[i], ops.size())) {
      v = values[*p];
    } else {
      for (size_t k = 0; k < example_inputs.size(); ++k)
        if (example_inputs[k].is_same(outputs[i])) v = inputs[k].value;
      CPPGRAD_CHECK(v.defined(), "export_module: output {} of {} was made by no traced op", i, module.type_name());
    }
    graph.add_output(options.output_names.empty() ? fmt::format("output_{}", i) : options.output_names[i], v);
  }
  const std::string bytes = graph.serialize_checked(CPPGRAD_VERSION_STRING);
  files::write_file_atomically(path, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "export_module");
}

}  // namespace cppgrad::onnx
