// The backward engine.
//
// backward(y) walks the graph below y once to count, for every node, how many edges lead
// into it; then runs nodes in an order where each runs only after every node that feeds it a
// gradient has run (a topological order, kept with a work list, not recursion, so a graph
// 100,000 ops deep is fine). Gradients arriving at the same node are summed first.
//
// grad(outputs, inputs) runs only the nodes on a path from the outputs to the inputs (as
// torch.autograd.grad does): the rest of the graph is neither run nor freed, its hooks do
// not fire, and no .grad is written, retain_grad's included.
//
// How an op joins the graph is autograd/recording.cpp. This file reads in sections: the
// engine (the walk: dependency counts, a ready queue, each node's backward, gradients sent along
// the edges), and the duties the walk calls out to (Duties: grad()'s pruning, hooks and
// retain_grad, how a node's backward is called, the leaves' gradients delivered once, callbacks
// between nodes, and the fast forms of summing, kept in autograd/fast/accumulate.h).
#include <algorithm>
#include <cmath>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "autograd/fast/accumulate.h"
#include "autograd/node.h"
#include "autograd/side_tables.h"
#include "runtime/profile.h"
#include "runtime/reference_mode.h"
#include "tensor/kernels.h"

namespace cppgrad::autograd {

// ---- hooks, anomaly checks and queued callbacks ---------------------------------------------
namespace {

// The shapes and dtypes of a node's forward inputs, for its span in a trace.
std::string node_inputs(const Node& node) {
  std::string out;
  for (size_t i = 0; i < node.input_shapes.size(); ++i)
    out += fmt::format("{}{} {}", i == 0 ? "" : ", ", shape_str(node.input_shapes[i]), dtype_name(node.input_dtypes[i]));
  return out;
}

// A hook may return a new gradient, of the gradient's own shape and dtype, as in PyTorch: one of
// another shape once reached the optimizer, which wrote past the parameter.
Tensor apply_hooks(const std::vector<Tensor::Hook>& hooks, Tensor grad) {
  for (size_t i = 0; i < hooks.size(); ++i) {
    Tensor replaced = hooks[i](grad);
    if (!replaced.defined()) continue;
    CPPGRAD_CHECK(replaced.shape() == grad.shape() && replaced.dtype() == grad.dtype(),
                  "backward: hook {} returned a gradient {} {} for one of {} {}; a hook may change its values, not its "
                  "shape or dtype", i, shape_str(replaced.shape()), dtype_name(replaced.dtype()),
                  shape_str(grad.shape()), dtype_name(grad.dtype()));
    grad = replaced;
  }
  return grad;
}

bool all_finite(const Tensor& t) {
  if (!t.is_floating_point()) return true;
  NoGradGuard no_grad;
  Tensor bad = kernels::compare(kernels::Compare::Ne, t, t);  // NaN
  Tensor inf = kernels::compare(kernels::Compare::Eq, kernels::unary(kernels::Unary::Abs, t),
                                full({}, INFINITY, t.dtype()));
  return kernels::sum(bad, {}, false).item<int64_t>() == 0 && kernels::sum(inf, {}, false).item<int64_t>() == 0;
}

// Under detect_anomaly: a backward that produced NaN or Inf is named, with its inputs' shapes.
void check_finite(const Node& node, const Grads& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined() && !all_finite(grads[i])) {
      std::vector<std::string> shapes;
      for (const Shape& s : node.input_shapes) shapes.push_back(shape_str(s));
      throw Error(fmt::format("anomaly: the backward of '{}' (inputs {}) produced NaN or Inf in the gradient of input {}",
                              node.op, fmt::join(shapes, ", "), i));
    }
  }
}

// The callbacks queued by the backward running on this thread (queue_callback), and those it
// calls between its nodes (call_between_nodes).
struct BackwardCallbacks {
  std::vector<std::function<void()>> at_end, between_nodes;
};
thread_local BackwardCallbacks* t_queued_callbacks = nullptr;

// For the length of one backward, queue_callback and call_between_nodes append here; run()
// calls the one kind after each node and the other at its end.
class CallbackQueue {
 public:
  CallbackQueue() : outer_(std::exchange(t_queued_callbacks, &callbacks_)) {}
  ~CallbackQueue() { t_queued_callbacks = outer_; }
  CallbackQueue(const CallbackQueue&) = delete;
  CallbackQueue& operator=(const CallbackQueue&) = delete;
  void after_node() {
    auto& between = callbacks_.between_nodes;
    for (size_t i = 0; i < between.size(); ++i) between[i]();  // (one may add another)
  }
  void run_all() {
    callbacks_.between_nodes.clear();  // backward's nodes are over
    auto& at_end = callbacks_.at_end;
    for (size_t i = 0; i < at_end.size(); ++i) at_end[i]();  // a callback may queue more
  }

 private:
  BackwardCallbacks callbacks_;
  BackwardCallbacks* outer_;
};


// ---- the engine's duties besides the walk -------------------------------------------------
// Everything one backward (or grad()) does besides walking the graph: which edges it follows
// (grad()'s pruning), what happens to a gradient arriving at a node (hooks, grad()'s capture,
// retain_grad), how a node's backward is called (its saved tensors, a trace span, the forward's
// autocast state, the anomaly check, freeing what it saved), the fast forms of summing, the
// leaves (gradients summed over the pass and delivered once) and the callbacks between nodes.
// The walk (Engine, below) calls these and knows none of their details.
class Duties {
 public:
  Duties(bool retain_graph, bool create_graph, const std::vector<Tensor>* inputs)
      : retain_graph_(retain_graph || create_graph), create_graph_(create_graph) {
    if (inputs) capture(*inputs);
  }

  // ---- grad(): only the nodes on a path to an input run -----------------------------------
  // Whether the walk follows this edge: always for backward; for grad, only towards an input.
  bool follows(const Edge& e) const {
    if (!capturing_) return e.valid();
    if (e.node) return needed_.count(e.node.get()) > 0;
    return e.leaf && capture_leaf_.count(e.leaf.get()) > 0;
  }

  // For grad(), drops the starts from which no input can be reached.
  void prune(std::vector<Node*>& starts) {
    if (!capturing_) return;
    mark_needed(starts);
    std::erase_if(starts, [&](Node* n) { return !needed_.count(n); });
  }

  // ---- a node's gradient and its backward ----------------------------------------------------
  // The gradients that reached a node's outputs, through their hooks, captured by grad() or
  // kept by retain_grad(). Returns false when the walk stops at this node: an input of grad()
  // with nothing else to reach below it (its graph is kept).
  bool arriving(Node& node, Grads& grads) {
    for (auto& [k, hook] : node.pre_hooks)
      if (grads[k].defined())
        if (Tensor replaced = hook(grads[k]); replaced.defined()) grads[k] = replaced;
    if (auto it = capture_node_.find(&node); it != capture_node_.end())
      for (auto [k, i] : it->second) captured_[i] = grads[k];
    if (!capturing_) retain(node, grads);
    if (std::none_of(node.next.begin(), node.next.end(), [&](const Edge& e) { return follows(e); })) return false;
    if (node.released)
      throw Error(fmt::format(
          "backward: trying to backward through the graph a second time ('{}' already freed its saved "
          "tensors); pass retain_graph=true to the first backward if you need to run backward twice",
          node.op));
    return true;
  }

  // node.backward(grads, saved) in a trace span, in the autocast state its forward ran in,
  // checked under detect_anomaly; then, without retain_graph, the node frees what it saved.
  Grads call_backward(Node& node, const Grads& grads) {
    if (adds_where_taken(node)) {  // added_where_taken adds the gradient in where it was taken
      for (size_t i = 0; i < node.saved.size(); ++i) unpack(node, i);  // refuses an index changed in place
      release(node);
      return {grads[0]};
    }
    profile::Span span("backward", node.op, " backward");  // in a trace; its kernels are "backward" ones
    if (span.traced()) span.describe(node_inputs(node));
    std::vector<Tensor> saved;
    for (size_t i = 0; i < node.saved.size(); ++i) saved.push_back(unpack(node, i));
    std::vector<bool> needs;
    for (const Edge& e : node.next) needs.push_back(follows(e));
    // An autocast forward's backward products are bfloat16 too, wherever backward() is called.
    const autocast::Guard as_in_forward(forward_autocast(node));
    Saved s(std::move(saved), std::move(needs));
    Grads input_grads = node.backward_outputs ? node.backward_outputs(grads, s) : node.backward(grads[0], s);
    CPPGRAD_CHECK(input_grads.size() == node.next.size(), "backward: '{}' returned {} gradients for {} inputs", node.op,
          input_grads.size(), node.next.size());
    if (AnomalyMode::is_enabled()) check_finite(node, input_grads);
    release(node);
    return input_grads;
  }

  // ---- sums: the fast forms ------------------------------------------------------------------
  // A slice's gradient added straight into its input's at the sliced positions, and selected
  // rows' into the rows they came from (autograd/fast/accumulate.h), unless it must be
  // differentiable again or checked for NaN as the backward's own result. Returns whether it did.
  bool added_where_taken(const Node& node, size_t i, Tensor& slot, const Tensor& g) const {
    if (!adds_where_taken(node)) return false;
    if (std::optional<SliceOf> at = slice_of(node))
      fast::add_slice(slot, g, node.input_shapes[i], *at);
    else
      fast::add_rows(slot, g, node.input_shapes[i], *rows_of(node));
    return true;
  }

  // slot += g in place, where nothing needs slot's old value. Returns whether it did.
  bool added_in_place(Tensor& slot, const Tensor& g) const {
    return !create_graph_ && !reference_mode() && fast::add_in_place(slot, g);
  }

  // ---- leaves: gradients summed over the pass, then handed over once ------------------------
  // Gradients reaching a leaf are summed over the whole backward and handed over once at the
  // end, so the leaf's hooks see its total gradient, as a non-leaf's hooks do.
  Tensor& leaf_slot(const std::shared_ptr<AutogradMeta>& leaf) {
    auto [it, inserted] = leaf_index_.try_emplace(leaf.get(), leaf_grads_.size());
    if (inserted) leaf_grads_.emplace_back(leaf, Tensor());
    return leaf_grads_[it->second].second;
  }

  void count_leaf_edge(AutogradMeta* leaf) { ++leaf_edges_left_[leaf]; }

  // The last edge into a leaf has run: its gradient is final. A leaf with post-accumulate hooks
  // gets it now, so that the hooks run while backward goes on (data-parallel training sends
  // the gradient from there); the others get theirs at the end.
  void leaf_edge_done(AutogradMeta* leaf) {
    if (--leaf_edges_left_[leaf] != 0 || leaf->post_accumulate_grad_hooks.empty()) return;
    auto it = leaf_index_.find(leaf);
    if (it == leaf_index_.end()) return;  // no gradient reached it
    Tensor& g = leaf_grads_[it->second].second;
    if (g.defined()) deliver_to_leaf(*leaf, std::move(g));
    g = Tensor();
  }

  // ---- between nodes, and at the end -----------------------------------------------------------
  void after_node() { callbacks_.after_node(); }

  // The leaves' gradients delivered, the callbacks queued for the end run; grad()'s results.
  std::vector<Tensor> finish() {
    for (auto& [leaf, g] : leaf_grads_)
      if (g.defined()) deliver_to_leaf(*leaf, std::move(g));  // (undefined: delivered early)
    callbacks_.run_all();
    return std::move(captured_);
  }

 private:
  void capture(const std::vector<Tensor>& inputs) {
    captured_.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& in = inputs[i];
      CPPGRAD_CHECK(in.requires_grad(), "grad: input {} of shape {} does not require grad", i, shape_str(in.shape()));
      if (in.grad_fn())
        capture_node_[in.grad_fn().get()].emplace_back(in.impl()->autograd->output_nr, i);
      else
        capture_leaf_[in.impl()->autograd.get()].push_back(i);
    }
    capturing_ = true;
  }

  // needed_ = the nodes below `starts` from which an input of grad() can be reached: an input's
  // own grad_fn, a node with an edge to an input leaf, or a node with an edge to a needed node.
  // Depth-first without recursion: a node is decided once all its children are.
  void mark_needed(const std::vector<Node*>& starts) {
    std::unordered_set<Node*> visited;
    std::vector<std::pair<Node*, bool>> stack;  // (node, its children already pushed)
    for (Node* s : starts) stack.emplace_back(s, false);
    while (!stack.empty()) {
      auto [n, expanded] = stack.back();
      if (!expanded) {
        if (!visited.insert(n).second) {
          stack.pop_back();
          continue;
        }
        stack.back().second = true;
        for (const Edge& e : n->next)
          if (e.node && !visited.count(e.node.get())) stack.emplace_back(e.node.get(), false);
        continue;
      }
      stack.pop_back();
      bool needed = capture_node_.count(n) > 0;
      for (const Edge& e : n->next) needed = needed || follows(e);
      if (needed) needed_.insert(n);
    }
  }

  bool adds_where_taken(const Node& node) const {
    return !create_graph_ && !AnomalyMode::is_enabled() && !reference_mode() && (slice_of(node) || rows_of(node));
  }

  // Without retain_graph, a node frees what it saved once its backward has run.
  void release(Node& node) {
    if (retain_graph_) return;
    node.saved.clear();
    node.backward = nullptr;
    node.backward_outputs = nullptr;
    node.released = true;
  }

  void deliver_to_leaf(AutogradMeta& leaf, Tensor g) {
    if (capturing_) {  // only an input of grad() is reached (or a root that is a leaf)
      auto it = capture_leaf_.find(&leaf);
      if (it == capture_leaf_.end()) return;
      g = apply_hooks(leaf.hooks, std::move(g));
      for (size_t i : it->second) captured_[i] = g;
      return;
    }
    accumulate(leaf.grad, apply_hooks(leaf.hooks, std::move(g)));
    for (const auto& hook : leaf.post_accumulate_grad_hooks) hook();
  }

  // A non-leaf's retain_grad(): .grad gets a copy of the gradient (the gradient itself flows on
  // to other nodes), later ones added out of place, as PyTorch's retains_grad hook does.
  void retain(const Node& node, const Grads& grads) {
    for (const auto& [k, retained] : node.retained) {
      auto meta = retained.lock();
      if (!meta || !grads[k].defined()) continue;
      NoGradGuard no_grad;  // .grad is data, not part of a graph
      meta->grad = meta->grad.defined() ? meta->grad + grads[k] : grads[k].clone();
    }
  }

  // PyTorch's rule for a leaf's .grad (AccumulateGrad):
  //  - the first gradient is taken as it is when nothing else holds it, else copied: one
  //    gradient tensor (or a broadcast view of one) may reach several leaves, and .grad is
  //    changed in place (zero_grad, optimizers, the accumulation below);
  //  - later ones are added in place, so a handle on .grad the user kept sees the sum and
  //    micro-batches allocate no new .grad; except with create_graph, where .grad is part of
  //    a graph and the sum is a new tensor recorded on it.
  void accumulate(Tensor& slot, const Tensor& g) {
    if (!slot.defined()) {
      const bool owned = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous();
      slot = owned ? g : g.clone();
    } else if (!create_graph_ && !slot.requires_grad() && slot.dtype() == g.dtype() && slot.is_contiguous()) {
      kernels::binary_(kernels::Binary::Add, slot, g);
    } else {
      slot = slot + g;
    }
    if (!create_graph_ && slot.requires_grad()) slot = slot.detach();
  }

  bool retain_graph_, create_graph_;
  CallbackQueue callbacks_;
  // grad(): which inputs are captured where, and the nodes that lead to one
  bool capturing_ = false;
  std::unordered_map<Node*, std::vector<std::pair<uint32_t, size_t>>> capture_node_;  // (output, input)
  std::unordered_map<AutogradMeta*, std::vector<size_t>> capture_leaf_;
  std::vector<Tensor> captured_;
  std::unordered_set<Node*> needed_;
  // leaves: the gradient summed so far at each, and the edges into each not yet run
  std::vector<std::pair<std::shared_ptr<AutogradMeta>, Tensor>> leaf_grads_;  // in order of first arrival
  std::unordered_map<AutogradMeta*, size_t> leaf_index_;
  std::unordered_map<AutogradMeta*, int64_t> leaf_edges_left_;
};

// ---- the engine: backward as a topological walk -----------------------------------------------

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

class Engine {
 public:
  // create_graph keeps the graph, as PyTorch's default does: the graph of the gradients runs
  // through the forward's nodes, so differentiating the gradients backs through them again.
  // With `inputs` (grad()), gradients reaching them are captured and returned, only the nodes
  // that lead to them run, and no .grad changes.
  Engine(bool retain_graph, bool create_graph, const std::vector<Tensor>* inputs)
      : create_graph_(create_graph), duties_(retain_graph, create_graph, inputs) {}

  std::vector<Tensor> run(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads) {
    GradModeGuard mode(create_graph_);
    std::vector<Node*> starts;
    for (size_t i = 0; i < roots.size(); ++i) {
      if (Node* root = roots[i].grad_fn().get()) {
        add_to(pending_at(*root)[roots[i].impl()->autograd->output_nr], root_grads[i]);
        starts.push_back(root);
      } else {
        add_to(duties_.leaf_slot(roots[i].impl()->autograd), root_grads[i]);
      }
    }
    duties_.prune(starts);
    count_dependencies(starts);
    // The ready nodes, latest recorded first: a node runs once every node that feeds it has.
    std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
    std::unordered_set<Node*> queued;
    for (Node* n : starts)
      if (dependencies_[n] == 0 && queued.insert(n).second) ready.push(n);
    while (!ready.empty()) {
      Node* node = ready.top();
      ready.pop();
      run_node(*node, ready);
      duties_.after_node();
    }
    return duties_.finish();
  }

 private:
  // Counts, for every node below `starts`, the edges that lead into it.
  void count_dependencies(const std::vector<Node*>& starts) {
    std::vector<Node*> stack(starts.begin(), starts.end());
    std::unordered_set<Node*> seen(starts.begin(), starts.end());
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next) {
        if (e.leaf) duties_.count_leaf_edge(e.leaf.get());
        if (!e.node || !duties_.follows(e)) continue;
        ++dependencies_[e.node.get()];
        if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
      }
    }
  }

  // Runs one node: the sums of the gradients that reached its outputs go through its backward,
  // and each input's gradient is sent along that input's edge; a node whose last incoming
  // edge has run becomes ready.
  template <class Ready>
  void run_node(Node& node, Ready& ready) {
    Grads grads, input_grads;  // one per output (none: no gradient reached it), one per input
    if (auto it = pending_.find(&node); it != pending_.end()) {
      grads = std::move(it->second);
      pending_.erase(it);
    }
    if (!grads.empty() && duties_.arriving(node, grads)) input_grads = duties_.call_backward(node, grads);
    for (size_t i = 0; i < node.next.size(); ++i) {
      const Edge& edge = node.next[i];
      if (!duties_.follows(edge)) continue;
      if (i < input_grads.size() && input_grads[i].defined()) send(node, i, input_grads[i]);
      if (edge.node && --dependencies_[edge.node.get()] == 0) ready.push(edge.node.get());
      if (edge.leaf) duties_.leaf_edge_done(edge.leaf.get());
    }
  }

  // Adds input i's gradient g to what has reached that input so far.
  void send(const Node& node, size_t i, Tensor g) {
    const Edge& edge = node.next[i];
    Tensor& slot = edge.node ? pending_at(*edge.node)[edge.output] : duties_.leaf_slot(edge.leaf);
    if (duties_.added_where_taken(node, i, slot, g)) return;
    // Broadcasting and dtype promotion in the forward are undone here, once for every op.
    if (g.shape() != node.input_shapes[i]) g = sum_to(g, node.input_shapes[i]);
    if (g.dtype() != node.input_dtypes[i]) g = g.to(node.input_dtypes[i]);
    add_to(slot, g);
  }

  // The gradients summed so far at a node's outputs, one slot per output.
  Grads& pending_at(Node& node) { return pending_.try_emplace(&node, node.num_outputs).first->second; }

  // The sum of the gradients arriving at one place.
  void add_to(Tensor& slot, const Tensor& g) {
    if (!slot.defined())
      slot = g;
    else if (!duties_.added_in_place(slot, g))
      slot = slot + g;
  }

  bool create_graph_;
  Duties duties_;
  std::unordered_map<Node*, Grads> pending_;         // the gradients summed so far at each node's outputs
  std::unordered_map<Node*, int64_t> dependencies_;  // edges into each node not yet run
};

// ---- the entry points: backward() and grad() ------------------------------------------------

std::vector<Tensor> root_gradients(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                                   std::string_view op) {
  CPPGRAD_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "{}: {} outputs but {} gradients", op,
        outputs.size(), grad_outputs.size());
  std::vector<Tensor> grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    CPPGRAD_CHECK(out.requires_grad(), "{}: output {} of shape {} does not require grad and has no grad_fn", op, i,
          shape_str(out.shape()));
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      CPPGRAD_CHECK(out.numel() == 1, "{}: a gradient can be implied only for a one-element output; output {} has shape {}",
            op, i, shape_str(out.shape()));
      g = ones_like(out);
    }
    CPPGRAD_CHECK(g.shape() == out.shape(), "{}: gradient of shape {} for output {} of shape {}", op, shape_str(g.shape()), i,
          shape_str(out.shape()));
    grads.push_back(g);
  }
  return grads;
}

}  // namespace

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool create_graph,
                         bool allow_unused) {
  std::vector<Tensor> roots = root_gradients(outputs, grad_outputs, "grad");
  std::vector<Tensor> result = Engine(retain_graph, create_graph, &inputs).run(outputs, roots);
  for (size_t i = 0; i < result.size(); ++i)
    CPPGRAD_CHECK(allow_unused || result[i].defined(),
          "grad: input {} of shape {} was not used to compute the outputs; pass allow_unused=true to get an "
          "undefined gradient for it",
          i, shape_str(inputs[i].shape()));
  return result;
}

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph,
              bool create_graph) {
  std::vector<Tensor> roots = root_gradients(outputs, grad_outputs, "backward");
  Engine(retain_graph, create_graph, nullptr).run(outputs, roots);
}

void register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(const Tensor&)> hook) {
  CPPGRAD_CHECK(leaf.defined() && leaf.requires_grad() && !leaf.grad_fn(),
                "register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad");
  // The leaf's meta keeps the hook: a weak handle, or the tensor would keep itself alive.
  std::weak_ptr<TensorImpl> weak = leaf.impl_ptr();
  leaf.impl()->autograd->post_accumulate_grad_hooks.push_back([weak, hook = std::move(hook)] {
    if (auto impl = weak.lock()) hook(Tensor(std::move(impl)));
  });
}

void queue_callback(std::function<void()> callback) {
  CPPGRAD_CHECK(t_queued_callbacks != nullptr, "queue_callback: called outside a backward pass");
  t_queued_callbacks->at_end.push_back(std::move(callback));
}

void call_between_nodes(std::function<void()> callback) {
  CPPGRAD_CHECK(t_queued_callbacks != nullptr, "call_between_nodes: called outside a backward pass");
  t_queued_callbacks->between_nodes.push_back(std::move(callback));
}

}  // namespace cppgrad::autograd
