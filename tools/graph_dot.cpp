// plot::to_dot: the backward graph in Graphviz's DOT language (see tools/graph_dot.h).
#include "tools/graph_dot.h"

#include <deque>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace cppgrad::plot {

using autograd::AutogradMeta;
using autograd::Edge;
using autograd::Node;
using autograd::SavedTensor;

namespace {

// A DOT string literal's contents: quotes and backslashes escaped.
std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string describe(const Shape& shape, DType dtype) { return fmt::format("{} {}", shape_str(shape), dtype_name(dtype)); }

class DotWriter {
 public:
  DotWriter(const std::vector<std::pair<std::string, Tensor>>& names, const DotOptions& options) : options_(options) {
    for (const auto& [name, t] : names)
      if (t.defined() && t.impl()->autograd) param_names_.try_emplace(t.impl()->autograd.get(), name);
  }

  std::string write(const Tensor& output) {
    out_ += "digraph backward {\n";
    out_ += "  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [arrowsize=0.6, fontname=\"Helvetica\"];\n";
    add_node("output", fmt::format("output\\n{}", escape(describe(output.shape(), output.dtype()))),
             "shape=box, style=\"filled,bold\", fillcolor=\"#f4d58d\"");
    if (const auto& fn = output.grad_fn()) {
      edge(id_of(fn.get()), "output", "");
      walk();
    } else if (output.requires_grad() && output.impl()->autograd) {
      edge(leaf_id(output.impl()->autograd.get(), output.shape(), output.dtype()), "output", "");
    }
    if (omitted_ > 0) {
      add_node("omitted", fmt::format("{} more ops not drawn\\n(DotOptions().max_nodes({}) draws more)", omitted_,
                                      options_.max_nodes()),
               "shape=note, style=filled, fillcolor=\"#eeeeee\"");
      for (const std::string& from : cut_edges_) edge("omitted", from, "style=dotted");
    }
    out_ += "}\n";
    return std::move(out_);
  }

 private:
  void walk() {
    while (!queue_.empty()) {
      const Node* node = queue_.front();
      queue_.pop_front();
      const std::string id = node_ids_.at(node);
      add_node(id, fmt::format("{}\\n{}", escape(node->name()), escape(describe(node->output_shape, node->output_dtype))),
               "shape=box, style=\"rounded,filled\", fillcolor=\"#dde8f6\"");
      for (size_t i = 0; i < node->next.size(); ++i) {
        const Edge& e = node->next[i];
        if (e.node) {
          if (const std::string* child = id_or_cut(e.node.get()))
            edge(*child, id, "");
          else
            cut_edges_.insert(id);
        } else if (e.leaf) {
          edge(leaf_id(e.leaf.get(), node->input_shapes[i], node->input_dtypes[i]), id, "");
        }
      }
      if (options_.show_saved() && !node->released) draw_saved(*node, id);
    }
    count_omitted();
  }

  // A saved tensor: a dashed edge from what produced it, when that is drawn; from a note otherwise.
  void draw_saved(const Node& node, const std::string& id) {
    for (const SavedTensor& s : node.saved) {
      if (!s.tensor.defined()) continue;
      const std::string style = "style=dashed, color=\"#888888\"";
      if (s.is_output) {
        edge(id, id, style + ", label=\"saves its output\", fontsize=8");
        continue;
      }
      const auto& meta = s.tensor.impl()->autograd;
      if (meta && meta->grad_fn && node_ids_.count(meta->grad_fn.get())) {
        edge(node_ids_.at(meta->grad_fn.get()), id, style);
      } else if (meta && !meta->grad_fn && meta->requires_grad) {
        edge(leaf_id(meta.get(), s.tensor.shape(), s.tensor.dtype()), id, style);
      } else {
        const std::string note = fmt::format("s{}", saved_count_++);
        add_node(note, fmt::format("saved\\n{}", escape(describe(s.tensor.shape(), s.tensor.dtype()))),
                 "shape=note, fontsize=8, color=\"#888888\"");
        edge(note, id, style);
      }
    }
  }

  // The id of an op node, queued to be drawn, or null once max_nodes ops are drawn.
  const std::string* id_or_cut(const Node* node) {
    if (auto it = node_ids_.find(node); it != node_ids_.end()) return &it->second;
    if (static_cast<int64_t>(node_ids_.size()) >= options_.max_nodes()) {
      frontier_.push_back(node);
      return nullptr;
    }
    return &id_of(node);
  }

  const std::string& id_of(const Node* node) {
    auto [it, inserted] = node_ids_.try_emplace(node, fmt::format("n{}", node_ids_.size()));
    if (inserted) queue_.push_back(node);
    return it->second;
  }

  std::string leaf_id(const AutogradMeta* leaf, const Shape& shape, DType dtype) {
    if (auto it = leaf_ids_.find(leaf); it != leaf_ids_.end()) return it->second;
    std::string id = fmt::format("p{}", leaf_ids_.size());
    leaf_ids_.emplace(leaf, id);
    auto name = param_names_.find(leaf);
    add_node(id, fmt::format("{}\\n{}", name != param_names_.end() ? escape(name->second) : "leaf",
                             escape(describe(shape, dtype))),
             "shape=ellipse, style=filled, fillcolor=\"#cfe8cf\"");
    return id;
  }

  // How many distinct ops lie beyond the cut (walked, not drawn).
  void count_omitted() {
    std::unordered_set<const Node*> seen;
    std::vector<const Node*> stack;
    for (const Node* n : frontier_)
      if (!node_ids_.count(n) && seen.insert(n).second) stack.push_back(n);
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next)
        if (e.node && !node_ids_.count(e.node.get()) && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
    omitted_ = static_cast<int64_t>(seen.size());
  }

  void add_node(const std::string& id, const std::string& label, const std::string& attributes) {
    out_ += fmt::format("  {} [label=\"{}\", {}];\n", id, label, attributes);
  }
  void edge(const std::string& from, const std::string& to, const std::string& attributes) {
    out_ += attributes.empty() ? fmt::format("  {} -> {};\n", from, to) : fmt::format("  {} -> {} [{}];\n", from, to, attributes);
  }

  DotOptions options_;
  std::unordered_map<const AutogradMeta*, std::string> param_names_;
  std::unordered_map<const Node*, std::string> node_ids_;
  std::unordered_map<const AutogradMeta*, std::string> leaf_ids_;
  std::deque<const Node*> queue_;
  std::vector<const Node*> frontier_;
  std::set<std::string> cut_edges_;         // drawn ops with an input beyond the cut
  int64_t omitted_ = 0;
  int64_t saved_count_ = 0;
  std::string out_;
};

}  // namespace

std::string to_dot(const Tensor& output, const std::vector<std::pair<std::string, Tensor>>& names,
                   const DotOptions& options) {
  CPPGRAD_CHECK(output.defined(), "to_dot: the output tensor is undefined");
  CPPGRAD_CHECK(options.max_nodes() >= 1, "to_dot: max_nodes must be at least 1, got {}", options.max_nodes());
  return DotWriter(names, options).write(output);
}

}  // namespace cppgrad::plot
