// ONNX export: a model's inference graph (opset 17) in an .onnx file that ONNX Runtime, onnx's
// checker and Netron read, as torch.onnx.export writes one:
//
//   model->eval();
//   onnx::export_model(*model, {tokens}, "model.onnx",
//                      {.input_names = {"tokens"}, .output_names = {"logits"}});
//
// The graph is written by the module's Module::export_onnx (nn/onnx/modules.h has nn/'s layers';
// a model of one's own composes them), not traced from a forward, so the sizes of the example
// inputs fix nothing but the inputs' element types and ranks: the dynamic axes (by default every
// axis but a float input's last) are symbols in the file, and the graph runs at any batch size
// and sequence length. Parameters become initializers under their state_dict names.
//
// A module with no exporter is refused, naming it (and where it sits in the model); so is any
// graph that ONNX's own checker or its strict shape inference refuses. The file is written whole
// or not at all (runtime/files.h's write_file_atomically).
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
};

// The graph of `module`: what module.export_onnx(graph, inputs) writes, from the inputs declared
// by `example_inputs` (their dtypes, ranks and fixed sizes).
void export_model(const nn::Module& module, const std::vector<Tensor>& example_inputs, const std::string& path,
                  const ExportOptions& options = {});

// The same with the graph written by `build` instead of module.export_onnx: for a call with
// arguments other than tensors (masks, is_causal), as a lambda around the exporters.
using GraphFunction = std::function<std::vector<Value>(Graph&, const std::vector<Value>&)>;
void export_model(const nn::Module& module, const GraphFunction& build, const std::vector<Tensor>& example_inputs,
                  const std::string& path, const ExportOptions& options = {});

}  // namespace cppgrad::onnx
