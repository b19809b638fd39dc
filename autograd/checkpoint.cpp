// Activation checkpointing: see checkpoint.h.
//
// The forward runs fn once with the graph on, to learn what it depends on: the inputs, and the
// parameters (leaves that require grad) it reads. Then it keeps only fn's output, detached, and
// records one node, "checkpoint", with an edge to each input and each parameter. That graph of
// fn's intermediates is freed right there, which is the point.
//
// The node's backward replays fn on the saved inputs with the default generator's state of the
// first run, and asks the engine for the gradients of that fresh output with respect to the
// inputs and parameters. The outer engine then delivers them along the node's edges as it does
// for any op: into the inputs' history and into the parameters' .grad.
#include "autograd/checkpoint.h"

#include <unordered_set>

#include "tensor/generator.h"
#include "tensor/keyed_dropout.h"

namespace cppgrad::autograd {

namespace {

// The parameters fn read: each leaf that requires grad, reached from fn's output without
// passing through an input, with the shape and dtype its gradient takes.
struct Parameters {
  std::vector<std::shared_ptr<AutogradMeta>> metas;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
};

// Walks the graph fn built (every node made after `first`), without recursion.
Parameters parameters_read(const Tensor& out, const std::vector<Tensor>& detached_inputs, uint64_t first) {
  std::unordered_set<const AutogradMeta*> inputs;
  for (const Tensor& in : detached_inputs)
    if (in.defined() && in.requires_grad()) inputs.insert(in.impl()->autograd.get());

  Parameters found;
  std::unordered_set<const AutogradMeta*> seen_leaves;
  std::unordered_set<const Node*> seen_nodes{out.grad_fn().get()};
  std::vector<const Node*> work{out.grad_fn().get()};
  while (!work.empty()) {
    const Node* node = work.back();
    work.pop_back();
    for (size_t k = 0; k < node->next.size(); ++k) {
      const Edge& edge = node->next[k];
      if (edge.node) {
        CPPGRAD_CHECK(edge.node->sequence_nr >= first,
                      "checkpoint: the function reads a tensor of shape {} made by '{}' before it was called; a "
                      "tensor with a history must be passed in the inputs, so that its gradient can flow back",
                      shape_str(node->input_shapes[k]), edge.node->op);
        if (seen_nodes.insert(edge.node.get()).second) work.push_back(edge.node.get());
      } else if (edge.leaf && !inputs.count(edge.leaf.get()) && seen_leaves.insert(edge.leaf.get()).second) {
        found.metas.push_back(edge.leaf);
        found.shapes.push_back(node->input_shapes[k]);
        found.dtypes.push_back(node->input_dtypes[k]);
      }
    }
  }
  return found;
}

// Inputs cut from their history, requiring grad where the originals do: fn's graph starts here.
std::vector<Tensor> detach_all(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out;
  out.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    Tensor d = in.defined() ? in.detach() : in;
    if (in.defined() && in.requires_grad()) d.requires_grad_(true);
    out.push_back(d);
  }
  return out;
}

// A tensor that stands for a parameter on the checkpoint node's edge: it shares the parameter's
// autograd state (so the engine sends the gradient to that parameter's .grad) and no memory
// (a 0-d zero expanded to the parameter's shape).
Tensor stand_in(const std::shared_ptr<AutogradMeta>& meta, const Shape& shape, DType dtype) {
  Tensor t = zeros({}, TensorOptions(dtype)).expand(shape);
  t.impl()->autograd = meta;
  return t;
}

}  // namespace

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  CPPGRAD_CHECK(static_cast<bool>(fn), "checkpoint: no function given");
  if (!GradMode::is_enabled()) return fn(inputs);  // no graph is recorded: nothing to save

  const Generator::State rng = default_generator().state();
  // Inside a KeyedDropout scope, dropout's masks follow the scope's call count instead.
  const KeyedDropout* scope = KeyedDropout::current();
  const bool keyed = scope != nullptr;
  const int64_t keyed_calls = keyed ? scope->calls() : 0;
  const uint64_t first = Node().sequence_nr;  // every node fn makes comes after this one
  Tensor out;
  Parameters params;
  {
    std::vector<Tensor> detached = detach_all(inputs);
    Tensor traced = fn(detached);
    CPPGRAD_CHECK(traced.defined(), "checkpoint: the function returned an undefined tensor");
    // Returned one of its inputs or a parameter as is: there is nothing in between to free.
    if (!traced.grad_fn()) return fn(inputs);
    params = parameters_read(traced, detached, first);
    out = traced.detach();
  }  // fn's graph, and every intermediate it saved, is freed here

  std::vector<Tensor> edges = inputs;
  std::vector<Tensor> stand_ins;
  for (size_t j = 0; j < params.metas.size(); ++j) {
    NoGradGuard no_grad;
    stand_ins.push_back(stand_in(params.metas[j], params.shapes[j], params.dtypes[j]));
  }
  edges.insert(edges.end(), stand_ins.begin(), stand_ins.end());
  const size_t n = inputs.size();

  // Gradients: dinput_i, dparam_j = the gradients of fn(inputs) · grad_out, recomputed.
  BackwardFn backward = [fn, rng, keyed, keyed_calls, stand_ins, n](const Tensor& grad_out, const Saved& saved) -> Grads {
    CPPGRAD_CHECK(!GradMode::is_enabled(),
                  "checkpoint: double backward (create_graph=true) through a checkpointed function is not supported; "
                  "call the function without checkpoint to differentiate twice");
    std::vector<Tensor> originals;
    for (size_t i = 0; i < n; ++i) originals.push_back(saved[i]);
    std::vector<Tensor> replay_inputs = detach_all(originals);

    KeyedDropout* scope = KeyedDropout::current();
    CPPGRAD_CHECK((scope != nullptr) == keyed, "checkpoint: the forward ran {} a KeyedDropout scope and the backward {}: "
                  "its dropout masks cannot be replayed; run the backward in the forward's scope",
                  keyed ? "inside" : "outside", keyed ? "outside" : "inside");
    Generator& gen = default_generator();
    const Generator::State now = gen.state();
    const int64_t calls_now = keyed ? scope->calls() : 0;
    auto put_back = [&] {  // the streams go on as if nothing had been replayed
      gen.set_state(now);
      if (keyed) scope->set_calls(calls_now);
    };
    gen.set_state(rng);  // the same dropout masks as the first run
    if (keyed) scope->set_calls(keyed_calls);
    Tensor replayed;
    try {
      GradModeGuard grad_on(true);
      replayed = fn(replay_inputs);
    } catch (...) {
      put_back();
      throw;
    }
    put_back();

    std::vector<Tensor> wrt;
    std::vector<size_t> slot;
    for (size_t i = 0; i < n; ++i)
      if (saved.needs_grad(i) && replay_inputs[i].defined() && replay_inputs[i].requires_grad()) {
        wrt.push_back(replay_inputs[i]);
        slot.push_back(i);
      }
    for (size_t j = 0; j < stand_ins.size(); ++j)
      if (saved.needs_grad(n + j)) {
        wrt.push_back(stand_ins[j]);
        slot.push_back(n + j);
      }
    Grads grads(n + stand_ins.size());
    if (wrt.empty() || !replayed.requires_grad()) return grads;
    std::vector<Tensor> found = grad({replayed}, wrt, {grad_out}, /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
    for (size_t k = 0; k < found.size(); ++k) grads[slot[k]] = found[k];
    return grads;
  };
  // Only the inputs are saved; the stand-ins live in the closure and hold no memory.
  return record("checkpoint", out, edges, inputs, std::move(backward));
}

}  // namespace cppgrad::autograd
