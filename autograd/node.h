// The graph: each differentiable op's output points at a Node that knows how to send the
// output's gradient back to the op's inputs.
//
//   y = a * b      y.grad_fn = Node{op "mul", next = [a's edge, b's edge], saved = [a, b]}
//
// Nodes hold their inputs (edges, saved tensors), never their outputs, so the graph has no
// reference cycles and is freed when its last output handle goes.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../runtime/scoped_flag.h"
#include "../tensor/tensor.h"

namespace cppgrad::autograd {

struct Node;

// What autograd keeps on a tensor (TensorImpl::autograd).
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                       // accumulated by backward, for leaves (and retain_grad)
  std::shared_ptr<Node> grad_fn;     // null for a leaf
  uint32_t output_nr = 0;            // which of grad_fn's outputs this tensor is
  bool retains_grad = false;
  std::vector<Tensor::Hook> hooks;   // a leaf's hooks; a non-leaf's live on its grad_fn
  // Run once the leaf's .grad holds this backward's whole gradient (see
  // register_post_accumulate_grad_hook below, which wraps the user's hook).
  std::vector<std::function<void()>> post_accumulate_grad_hooks;
};

// Where one input's gradient goes: into the node that produced the input (at the output the
// input is), or, for a leaf that requires grad, into its .grad.
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<AutogradMeta> leaf;
  uint32_t output = 0;
  bool valid() const { return node != nullptr || leaf != nullptr; }
};

// A tensor a node keeps for its backward, with the version it had when saved.
struct SavedTensor {
  Tensor tensor;           // the input itself, or a graph-free alias of the op's output
  bool is_output = false;  // the output is rebuilt with this node as grad_fn when unpacked
  uint64_t version = 0;
  uint32_t output = 0;     // which output, when it is one
};

// What a backward function reads: its saved tensors (checked against in-place changes), and
// which inputs need a gradient at all (so it can skip computing the others).
class Saved {
 public:
  Saved(std::vector<Tensor> tensors, std::vector<bool> needs) : tensors_(std::move(tensors)), needs_(std::move(needs)) {}
  const Tensor& operator[](size_t i) const { return tensors_.at(i); }
  bool needs_grad(size_t input) const { return needs_.at(input); }

 private:
  std::vector<Tensor> tensors_;
  std::vector<bool> needs_;
};

// One gradient per input, in the forward's order; an undefined tensor means "none".
using Grads = std::vector<Tensor>;
using BackwardFn = std::function<Grads(const Tensor& grad, const Saved& saved)>;
using OutputsBackwardFn = std::function<Grads(const Grads& grads, const Saved& saved)>;

struct Node : std::enable_shared_from_this<Node> {
  Node();
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  std::string op;                   // the forward op, e.g. "matmul"
  std::vector<Edge> next;           // one per input
  std::vector<Shape> input_shapes;  // a gradient is summed back to its input's shape
  std::vector<DType> input_dtypes;  // and converted to its input's dtype
  std::vector<SavedTensor> saved;
  BackwardFn backward;
  OutputsBackwardFn backward_outputs;  // instead, with several outputs: a gradient each (or undefined)
  uint32_t num_outputs = 1;
  std::vector<std::pair<uint32_t, Tensor::Hook>> pre_hooks;  // the outputs' hooks, with their index
  // The outputs whose .grad retain_grad() fills (backward only: autograd::grad writes no .grad).
  std::vector<std::pair<uint32_t, std::weak_ptr<AutogradMeta>>> retained;
  uint64_t sequence_nr;                 // creation order: later nodes run first
  bool released = false;                // saved tensors freed by a backward without retain_graph
  Shape output_shape;                   // what the op produced, its first output (for to_dot)
  DType output_dtype = kFloat32;

  // "MatmulBackward", as PyTorch names grad_fn.
  std::string name() const;
};

int64_t live_node_count();

// ---- modes --------------------------------------------------------------------------------
class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Within its scope no graph is recorded (inference, optimizer updates, initialisation).
struct NoGradGuard : ScopedFlag<GradMode::is_enabled, GradMode::set_enabled> {
  NoGradGuard() : ScopedFlag(false) {}
};
// Sets grad mode to a given value for its scope (the engine enables it for create_graph).
using GradModeGuard = ScopedFlag<GradMode::is_enabled, GradMode::set_enabled>;

class AnomalyMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Within its scope, a backward step that produces NaN or Inf throws, naming the forward op.
struct AnomalyModeGuard : ScopedFlag<AnomalyMode::is_enabled, AnomalyMode::set_enabled> {
  AnomalyModeGuard() : ScopedFlag(true) {}
};

// ---- recording an op -------------------------------------------------------------------------
// Called by every differentiable op after its kernel has computed `out`. When grad mode is on,
// some input requires grad and `out` is floating point, makes a Node for `op` with an edge to
// each input, saves `to_save` (which may include `out` itself), and sets out's grad_fn.
// Otherwise returns out.
Tensor record(std::string op, Tensor out, const std::vector<Tensor>& inputs, const std::vector<Tensor>& to_save,
              BackwardFn backward);

// Whether any of `tensors` requires grad (record asks it of an op's inputs; an op with a list of
// inputs, as cat, asks it too).
bool any_requires_grad(const std::vector<Tensor>& tensors);

// ---- running backward (autograd/engine.cpp) --------------------------------------------------
// create_graph=true records the backward itself (for second derivatives) and implies
// retain_graph=true, as in PyTorch.
// The gradients of `outputs` with respect to `inputs`, without touching any .grad.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

// Backward from several roots at once, accumulating into the leaves' .grad.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

// ---- hooks for data-parallel training (distributed/ddp.cpp) --------------------------------
// `hook(leaf)` runs during backward() as soon as every op that sends `leaf` a gradient has run
// and its .grad has been updated, not at the end of the pass, so the gradient can be sent
// while backward goes on (PyTorch's register_post_accumulate_grad_hook). It does not run for
// grad(), which leaves .grad alone, nor when the leaf got no gradient.
void register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(const Tensor&)> hook);

// Called from inside a backward (from a hook): `callback` runs once that backward has finished
// updating every .grad, before backward() returns (PyTorch's engine queue_callback).
void queue_callback(std::function<void()> callback);

// Called from inside a backward (from a hook): `callback` runs after every node that backward
// runs from then on, on the thread that runs it, until its nodes are done. Work started during
// backward that only moves forward when called (an MPI collective: DDP's all-reduces) moves
// on while backward computes instead of waiting for the end. Keep it short: it runs hundreds
// of times a backward.
void call_between_nodes(std::function<void()> callback);

// ---- an op with several outputs (autograd::Function's, autograd/function.h) -----------------
// As record, for one node whose output k is outs[k] (those marked in `differentiable` get it as
// grad_fn; the others, integers or masks, stay as they are). Its backward gets one gradient per
// output; a saved output is rebuilt as that output when unpacked.
std::vector<Tensor> record_outputs(std::string op, std::vector<Tensor> outs, const std::vector<bool>& differentiable,
                                   const std::vector<Tensor>& inputs, const std::vector<Tensor>& to_save,
                                   OutputsBackwardFn backward);

// ---- for the engine (autograd/engine.cpp) ----------------------------------------------------
// Saved tensor i of `node` as its backward sees it: refused if modified in place since it was
// saved; a saved output, under create_graph, again an output of `node` (its grad_fn).
Tensor unpack(Node& node, size_t i);

}  // namespace cppgrad::autograd

namespace cppgrad {
using autograd::NoGradGuard;
using autograd::AnomalyModeGuard;
}  // namespace cppgrad
