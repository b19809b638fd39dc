// What an op's ONNX emitter sees (nn/onnx/emitters.cpp): the op as the trace wrote it down at the
// example's sizes and at the other sizes the exporter ran, its inputs as graph values, and the
// means to write a size that changed between the two runs as a size read from the graph.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "../../autograd/trace.h"
#include "graph.h"

namespace cppgrad::onnx {

// A graph input at both sizes: where the exporter looks up a size that is not fixed.
struct TracedInput {
  Value value;
  Shape example, other;
};

class Emit {
 public:
  Emit(Graph& graph, const autograd::TracedOp& op, const autograd::TracedOp& other, std::vector<Value> in,
       const std::vector<TracedInput>& graph_inputs)
      : g(graph), op(op), other(other), in(std::move(in)), graph_inputs_(graph_inputs) {}

  Graph& g;
  const autograd::TracedOp& op;     // at the example's sizes
  const autograd::TracedOp& other;  // the same op at the other sizes
  std::vector<Value> in;            // op.inputs as graph values (undefined where absent)

  DType dtype() const { return op.output.dtype(); }
  int64_t rank() const { return op.output.dim(); }
  const Shape& out_shape() const { return op.output.shape(); }
  // A size that is `a` at the example's sizes and `b` at the other ones, as a 1-element int64
  // value: a constant when they agree, else an axis of a graph input of those sizes (none: nullopt).
  std::optional<Value> size(int64_t a, int64_t b);
  // The output's shape as an int64 vector value, for Reshape (`copy`: a dim that changed and is
  // the same dim of input 0 may be 0, Reshape's "as the input"; one may be -1, "the rest").
  Value reshape_target();
  // The same for Expand (1 where input 0's dim broadcasts as it is).
  Value expand_target();
  // A scalar of the output's dtype.
  Value scalar(double value) { return g.scalar(value, dtype()); }
  // The op's input i cast to `dtype` (ONNX's ops take one element type; cppgrad promotes).
  Value as(size_t i, DType dtype) { return g.cast(in.at(i), dtype); }

 private:
  const std::vector<TracedInput>& graph_inputs_;
};

// The ONNX form of a traced op: its output value, or nullopt when the op has none.
using Emitter = std::function<Value(Emit&)>;
const Emitter* find_emitter(const std::string& op);
// Whether the op's ONNX form reads arguments the op notes (a transpose's dims, a clamp's bounds):
// one recorded without them (by record(), not noted) is refused rather than written wrong.
bool reads_arguments(const std::string& op);
// The rows of tensor/op_tables.h that have no emitter (none: a test checks it).
std::vector<std::string> ops_without_onnx_form();

}  // namespace cppgrad::onnx
