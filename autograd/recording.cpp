// Recording: how an op joins the graph. record() makes a Node for the op, with an edge to each
// input (to the output of the node that made it, or to a leaf's .grad), keeps what its backward
// saves, and makes the node the output's grad_fn. Also the grad and anomaly modes, a node's
// lifetime (let go as a loop, not recursion, so a graph 100,000 ops deep is fine), a saved
// tensor unpacked for the backward, and an op with several outputs. The engine that runs the
// recorded graph backwards is autograd/engine.cpp.
#include <algorithm>
#include <atomic>
#include <cctype>

#include "autograd/node.h"
#include "autograd/side_tables.h"
#include "autograd/trace.h"
#include "tensor/kernels.h"

namespace cppgrad::autograd {

// ---- modes and node bookkeeping -------------------------------------------------------------
namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_anomaly_enabled = false;
std::atomic<int64_t> g_live_nodes{0};
std::atomic<uint64_t> g_next_sequence{0};
}  // namespace

bool GradMode::is_enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool enabled) { t_grad_enabled = enabled; }
bool AnomalyMode::is_enabled() { return t_anomaly_enabled; }
void AnomalyMode::set_enabled(bool enabled) { t_anomaly_enabled = enabled; }

Node::Node() : sequence_nr(g_next_sequence++) { ++g_live_nodes; }

// Letting go of a deep graph would destroy node after node recursively (each owns the next
// through its edges and its saved tensors) and overflow the stack 100,000 ops down. Instead a
// dying node moves what it owns to a work list, and each entry that is the last handle on its
// node gives up that node's parts the same way before it is released: a loop, not recursion.
Node::~Node() {
  --g_live_nodes;
  forget_side_tables(this);
  std::vector<std::shared_ptr<Node>> nodes;
  std::vector<Tensor> tensors;
  auto take_parts = [&](Node& n) {
    for (Edge& e : n.next)
      if (e.node) nodes.push_back(std::move(e.node));
    for (SavedTensor& s : n.saved)
      if (s.tensor.defined()) tensors.push_back(std::move(s.tensor));
  };
  take_parts(*this);
  while (!nodes.empty() || !tensors.empty()) {
    if (!tensors.empty()) {
      Tensor t = std::move(tensors.back());
      tensors.pop_back();
      // The last handle on a non-leaf: take its grad_fn before the tensor goes.
      const auto& meta = t.impl()->autograd;
      if (t.impl_ptr().use_count() == 1 && meta && meta.use_count() == 1 && meta->grad_fn)
        nodes.push_back(std::move(meta->grad_fn));
      continue;
    }
    std::shared_ptr<Node> n = std::move(nodes.back());
    nodes.pop_back();
    if (n.use_count() == 1) take_parts(*n);
  }
}

int64_t live_node_count() { return g_live_nodes.load(); }

std::string Node::name() const {
  std::string n;
  bool upper = true;
  for (char c : op) {
    if (c == '_') {
      upper = true;
      continue;
    }
    n += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return n + "Backward";
}

// ---- recording ------------------------------------------------------------------------------
bool any_requires_grad(const std::vector<Tensor>& tensors) {
  return std::any_of(tensors.begin(), tensors.end(), [](const Tensor& t) { return t.defined() && t.requires_grad(); });
}

namespace {
std::shared_ptr<AutogradMeta> meta_of(const Tensor& t) { return t.defined() ? t.impl()->autograd : nullptr; }

// A node for `op` with an edge to each input: to the output of the node that made it, or to a
// leaf's .grad.
std::shared_ptr<Node> new_node(std::string op, const std::vector<Tensor>& inputs) {
  auto node = std::make_shared<Node>();
  node->op = std::move(op);
  note_forward_state(*node);  // what its backward needs of the forward's state (side_tables.h)
  for (const Tensor& in : inputs) {
    Edge edge;
    if (in.defined() && in.requires_grad()) {
      if (in.grad_fn())
        edge = {in.grad_fn(), nullptr, meta_of(in)->output_nr};
      else
        edge.leaf = meta_of(in);
    }
    node->next.push_back(edge);
    node->input_shapes.push_back(in.defined() ? in.shape() : Shape{});
    node->input_dtypes.push_back(in.defined() ? in.dtype() : kFloat32);
  }
  return node;
}

// `out` becomes output `k` of `node`: its gradient goes there.
void attach(Tensor& out, std::shared_ptr<Node> node, uint32_t k) {
  auto meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = true;
  meta->grad_fn = std::move(node);
  meta->output_nr = k;
  out.impl()->autograd = std::move(meta);
}

Tensor record_node(std::string op, Tensor out, const std::vector<Tensor>& inputs, const std::vector<Tensor>& to_save,
                   BackwardFn backward) {
  if (!GradMode::is_enabled() || !any_requires_grad(inputs)) return out;
  if (!out.is_floating_point()) return out;  // integers and bools have no gradient (x.to(kInt64))
  // A kernel may hand back its input unchanged (contiguous() of a contiguous tensor): the
  // output needs its own handle, or recording would rewrite the input's history.
  for (const Tensor& in : inputs)
    if (in.defined() && in.is_same(out)) out = kernels::alias(out);

  std::shared_ptr<Node> node = new_node(std::move(op), inputs);
  node->output_shape = out.shape();
  node->output_dtype = out.dtype();
  for (const Tensor& t : to_save) {
    if (t.is_same(out))
      node->saved.push_back({kernels::alias(out), true, out.version(), 0});
    else
      node->saved.push_back({t, false, t.defined() ? t.version() : 0, 0});
  }
  node->backward = std::move(backward);
  attach(out, std::move(node), 0);
  return out;
}
}  // namespace

Tensor record(std::string op, Tensor out, const std::vector<Tensor>& inputs, const std::vector<Tensor>& to_save,
              BackwardFn backward) {
  if (!trace_running()) return record_node(std::move(op), std::move(out), inputs, to_save, std::move(backward));
  Tensor result = record_node(op, std::move(out), inputs, to_save, std::move(backward));
  trace_record(op.c_str(), result, inputs);  // the forward as the ONNX exporter reads it (autograd/trace.h)
  return result;
}

// ---- a saved tensor unpacked for the backward --------------------------------------------
// A saved tensor as the backward function sees it, refusing one changed in place since.
Tensor unpack(Node& node, size_t i) {
  const SavedTensor& s = node.saved[i];
  if (!s.tensor.defined()) return s.tensor;
  if (s.tensor.version() != s.version)
    throw Error(fmt::format(
        "backward: a tensor of shape {} that '{}' saved for its gradient was modified by an in-place operation "
        "(it is at version {}, expected {}); compute on a clone() instead of modifying it in place",
        shape_str(s.tensor.shape()), node.op, s.tensor.version(), s.version));
  if (!s.is_output || !GradMode::is_enabled()) return s.tensor;
  // For a second derivative, the output must again point at this node as its grad_fn.
  Tensor out = kernels::alias(s.tensor);
  attach(out, node.shared_from_this(), s.output);
  return out;
}

// ---- an op with several outputs -------------------------------------------------------------
std::vector<Tensor> record_outputs(std::string op, std::vector<Tensor> outs, const std::vector<bool>& differentiable,
                                   const std::vector<Tensor>& inputs, const std::vector<Tensor>& to_save,
                                   OutputsBackwardFn backward) {
  CPPGRAD_CHECK(differentiable.size() == outs.size(), "{}: {} outputs but {} differentiable flags", op, outs.size(),
                differentiable.size());
  if (!GradMode::is_enabled() || !any_requires_grad(inputs)) return outs;
  if (std::none_of(differentiable.begin(), differentiable.end(), [](bool d) { return d; })) return outs;
  // An output that is an input, or an earlier output, needs its own handle (as in record).
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!differentiable[k]) continue;
    bool seen = false;
    for (const Tensor& in : inputs) seen = seen || (in.defined() && in.is_same(outs[k]));
    for (size_t j = 0; j < k; ++j) seen = seen || outs[j].is_same(outs[k]);
    if (seen) outs[k] = kernels::alias(outs[k]);
  }

  std::shared_ptr<Node> node = new_node(std::move(op), inputs);
  node->num_outputs = static_cast<uint32_t>(outs.size());
  node->output_shape = outs[0].shape();
  node->output_dtype = outs[0].dtype();
  for (const Tensor& t : to_save) {
    SavedTensor saved{t, false, t.defined() ? t.version() : 0, 0};
    for (uint32_t k = 0; k < outs.size() && t.defined(); ++k)
      if (differentiable[k] && t.is_same(outs[k])) saved = {kernels::alias(t), true, t.version(), k};
    node->saved.push_back(std::move(saved));
  }
  node->backward_outputs = std::move(backward);
  for (uint32_t k = 0; k < outs.size(); ++k)
    if (differentiable[k]) attach(outs[k], node, k);
  return outs;
}

}  // namespace cppgrad::autograd
