// The ONNX graph builder: a model's inference graph written down symbolically, op by op. Nothing
// is run: a Value is the name of a tensor the graph will compute, not numbers, so a shape that
// export does not know (the batch, the sequence length) stays a symbol in the file and the graph
// works at any size.
//
//   Value h = g.matmul(x, g.transpose(g.parameter(linear.weight), {1, 0}));   // (B, T, in) -> (B, T, out)
//
// The exporter (nn/onnx/export.h) writes each op the forward ran through this builder, by the op's
// emitter (nn/onnx/emitters.cpp). Parameters become the graph's initializers under their
// state_dict names ("blocks.layers.0.linear1.weight"), each once however often it is used (tied
// weights).
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "../../tensor/state_dict.h"
#include "../../tensor/tensor.h"

namespace cppgrad::nn {
class Module;
}

namespace cppgrad::onnx {

// A tensor of the graph: its name there, its element type, and its rank (-1: not known). A
// default-constructed Value is "none", as an undefined Tensor is: an absent optional input.
struct Value {
  std::string name;
  DType dtype = kFloat32;
  int64_t rank = -1;
  bool defined() const { return !name.empty(); }
};

// A node's attribute: an int, a float, a list of ints, a string or a tensor (ONNX's INT, FLOAT,
// INTS, STRING, TENSOR).
struct Attribute {
  std::string name;
  std::variant<int64_t, double, std::vector<int64_t>, std::string, Tensor> value;
};

class Graph {
 public:
  // `root` is the module being exported: its state_dict names name the initializers.
  explicit Graph(const nn::Module& root);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // ---- tensors that enter the graph ------------------------------------------------------------
  // A parameter or buffer of the root module, as the initializer named by its state_dict name
  // (added on first use). A tensor the module does not own is refused: export it with constant().
  Value parameter(const Tensor& tensor);
  // An anonymous initializer holding `tensor`'s values.
  Value constant(const Tensor& tensor);
  Value scalar(double value, DType dtype);                // a 0-d constant
  Value ints(const std::vector<int64_t>& values);         // an int64 vector constant: shapes, axes

  // ---- nodes -------------------------------------------------------------------------------------
  // One ONNX node of type `op` (opset 17, the default domain): its outputs have `dtype` (the first
  // input's when omitted) and rank `rank` (-1: unknown).
  Value op(const std::string& op, const std::vector<Value>& inputs, const std::vector<Attribute>& attributes = {},
           std::optional<DType> dtype = std::nullopt, int64_t rank = -1);
  std::vector<Value> op_outputs(const std::string& op, const std::vector<Value>& inputs, size_t outputs,
                                const std::vector<Attribute>& attributes = {}, int64_t rank = -1);

  // The ops the exporters use most, named as ONNX names them.
  Value add(const Value& a, const Value& b) { return op("Add", {a, b}, {}, std::nullopt, std::max(a.rank, b.rank)); }
  Value sub(const Value& a, const Value& b) { return op("Sub", {a, b}, {}, std::nullopt, std::max(a.rank, b.rank)); }
  Value mul(const Value& a, const Value& b) { return op("Mul", {a, b}, {}, std::nullopt, std::max(a.rank, b.rank)); }
  Value div(const Value& a, const Value& b) { return op("Div", {a, b}, {}, std::nullopt, std::max(a.rank, b.rank)); }
  Value matmul(const Value& a, const Value& b) { return op("MatMul", {a, b}, {}, std::nullopt, std::max(a.rank, b.rank)); }
  Value unary(const std::string& name, const Value& x) { return op(name, {x}, {}, std::nullopt, x.rank); }
  Value transpose(const Value& x, const std::vector<int64_t>& perm);
  // ONNX Reshape: 0 keeps that dim of x, -1 is inferred; so (B, T, E) -> (B, T, H, d) is {0, 0, H, d}
  // for any B and T.
  Value reshape(const Value& x, const std::vector<int64_t>& shape);
  Value unsqueeze(const Value& x, const std::vector<int64_t>& axes);
  Value concat(const std::vector<Value>& values, int64_t axis);
  Value softmax(const Value& x, int64_t axis);
  Value cast(const Value& x, DType dtype);
  // x.size(axis) as a 1-element int64 vector (a dynamic size).
  Value size(const Value& x, int64_t axis);
  Value where(const Value& condition, const Value& a, const Value& b);

  // The graph's inputs and outputs (export_module declares them).
  Value add_input(const std::string& name, DType dtype, const std::vector<std::variant<int64_t, std::string>>& dims);
  void add_output(const std::string& name, const Value& value);

  // The serialized ModelProto (export_module writes it), after ONNX's checker has accepted it.
  std::string serialize_checked(const std::string& producer_version) const;

  static constexpr int64_t kOpset = 17;

 private:
  struct Proto;  // the GraphProto being built: ONNX's generated classes stay out of this header
  std::unique_ptr<Proto> proto_;
  NamedTensors named_tensors_;  // the root's parameters and buffers, by state_dict name
  std::set<std::string> added_;  // the state_dict names already in the graph as initializers
  int64_t counter_ = 0;
  std::string fresh_name(const std::string& op);
  Value add_initializer(const std::string& name, const Tensor& tensor);
};

}  // namespace cppgrad::onnx
