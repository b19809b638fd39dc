// ONNX export: a model's inference graph (opset 17) in an .onnx file that ONNX Runtime, onnx's
// checker and Netron read, as torch.onnx.export writes one:
//
//   model->eval();
//   onnx::export_module(*model, {tokens}, "model.onnx",
//                       {.input_names = {"tokens"}, .output_names = {"logits"}});
//
// The graph is what the forward runs (below): a module made of existing ops, one's own included,
// needs no ONNX code. The dynamic axes (by default every axis but a float input's last) are
// symbols in the file, and the graph runs at any batch size and sequence length. Parameters
// become initializers under their state_dict names.
//
// An op with no ONNX form is refused, naming it (and the module near it); so is any graph that
// ONNX's own checker or its strict shape inference refuses. The file is written whole or not at
// all (runtime/files.h's write_file_atomically). This is the component cppgrad::onnx
// (find_package(cppgrad COMPONENTS onnx)), which links libonnx and protobuf.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "../module.h"
#include "graph.h"

namespace cppgrad::onnx {

struct ExportOptions {
  // Names of the graph's inputs and outputs; by default input_0, input_1, ... and output_0, ...
  std::vector<std::string> input_names{};
  std::vector<std::string> output_names{};
  // Input name -> {axis -> symbol}: the axes whose size the file leaves open, as torch.onnx's
  // dynamic_axes. An input not listed gets the default: every axis of an integer or bool input
  // (token ids, masks) and every axis but the last of a floating one (its features), axis 0
  // named "batch" and axis i of input X "X_dim{i}". An input listed with no axes is fully fixed.
  std::map<std::string, std::map<int64_t, std::string>> dynamic_axes{};
  int64_t opset_version = Graph::kOpset;  // 17, the only one written
  // The example inputs at other sizes of their dynamic axes, to trace the forward a second time.
  // By default each dynamic axis is one shorter (one longer under 3);
  // give them when sizes are tied by more than equality (a (B·H, T, S) mask's first axis).
  std::vector<Tensor> other_inputs{};
};

// The graph of what `forward` computes from `example_inputs`: the forward runs twice (at the
// example's sizes and at other sizes of the dynamic axes), every op it runs is written down
// (autograd/trace.h), and each op becomes its ONNX form (nn/onnx/emitters.cpp); the sizes that
// differ between the two runs are read from the graph's inputs, so the file works at any batch
// size and sequence length. A module made of existing ops needs no ONNX code.
//
// The example's dynamic axes tell sizes apart by their values: give two symbols that can differ
// (batch, length) different sizes in the example (batch 2, length 3).
//
// As torch.onnx.export, the forward runs in eval mode (dropout off, batch norm's running
// statistics, which it leaves as they were), and every submodule's mode is given back after.
using Forward = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
void export_module(nn::Module& module, const Forward& forward, const std::vector<Tensor>& example_inputs,
                   const std::string& path, const ExportOptions& options = {});

// The same for a module whose forward takes the example inputs as tensors and returns one.
template <class M>
void export_module(M& module, const std::vector<Tensor>& example_inputs, const std::string& path,
                   const ExportOptions& options = {}) {
  const Forward forward = [&module](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    if constexpr (requires(const Tensor& a) { module.forward(a); })
      if (in.size() == 1) return {module.forward(in[0])};
    if constexpr (requires(const Tensor& a, const Tensor& b) { module.forward(a, b); })
      if (in.size() == 2) return {module.forward(in[0], in[1])};
    throw Error(fmt::format("export_module: {} takes no forward of {} tensors: give a Forward", module.type_name(),
                            in.size()));
  };
  export_module(module, forward, example_inputs, path, options);
}

}  // namespace cppgrad::onnx
