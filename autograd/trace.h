// Tracing: while a Trace lives on a thread, the ops run there are written down, each with the
// tensors it read, the tensor it made and the arguments that are not tensors (a transpose's
// dims, a softmax's axis). The ONNX exporter (nn/onnx/) reads a model's forward this way and
// writes each op in ONNX: a module made of existing ops needs no exporter of its own.
//
// record() writes down every op it sees, whether or not a graph is recorded (no_grad included),
// with its differentiable inputs. An op whose arguments matter, or that reads tensors record()
// does not see (a mask, an index), or that is written in ONNX as one piece (layer_norm,
// attention) says so itself:
//
//   autograd::TraceScope trace;                        // the ops it runs inside are not written down
//   Tensor out = ...;
//   return trace.note(out, [&] { return TracedOp{"transpose", {*this}, {{"dims", {d0, d1}}}}; });
//
// Nothing is allocated when no trace runs: the description is built only inside a trace.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "../tensor/tensor.h"

namespace cppgrad::autograd {

// An argument of a traced op: an int, a number, a list of ints, or a tensor that is not an input
// of the computation (ALiBi's slopes).
struct TraceArg {
  std::string name;
  std::variant<int64_t, double, std::vector<int64_t>, Tensor> value;
};

struct TracedOp {
  TracedOp(std::string op_name, std::vector<Tensor> op_inputs, std::vector<TraceArg> op_args = {})
      : op(std::move(op_name)), inputs(std::move(op_inputs)), args(std::move(op_args)) {}

  std::string op;
  std::vector<Tensor> inputs;  // undefined where an optional input is absent
  std::vector<TraceArg> args;
  Tensor output;               // set when written down

  // The argument `name` (cppgrad::Error naming the op when it is missing or of another kind).
  int64_t integer(const std::string& name) const;
  double number(const std::string& name) const;
  const std::vector<int64_t>& ints(const std::string& name) const;
  Tensor tensor(const std::string& name) const;  // undefined when not given
  bool has(const std::string& name) const;
};

// Writes down the ops of this thread while it lives (traces do not nest).
class Trace {
 public:
  Trace();
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;
  const std::vector<TracedOp>& ops() const { return ops_; }

 private:
  friend class TraceScope;
  friend void trace_record(const char*, const Tensor&, const std::vector<Tensor>&);
  std::vector<TracedOp> ops_;
  int depth_ = 0;  // inside how many TraceScopes
  void add(TracedOp op, const Tensor& out);
};

// An op that writes itself down: the ops it runs between construction and note() are not
// written down (they are its implementation), the op itself is, as note()'s description says.
class TraceScope {
 public:
  TraceScope();
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

  template <class Describe>
  Tensor note(Tensor out, Describe&& describe) {
    if (trace_ != nullptr && !noted_) {
      noted_ = true;
      --trace_->depth_;
      if (trace_->depth_ == 0) trace_->add(describe(), out);
    }
    return out;
  }

 private:
  Trace* trace_;
  bool noted_ = false;
};

// Whether a trace runs on this thread.
bool trace_running();
// record()'s note of the op it records.
void trace_record(const char* op, const Tensor& out, const std::vector<Tensor>& inputs);

}  // namespace cppgrad::autograd
