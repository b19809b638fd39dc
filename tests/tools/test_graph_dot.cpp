// plot::to_dot: the DOT text has one box per op, one ellipse per leaf (named from
// named_parameters()), the output, and a dashed edge per saved tensor; counts checked against a
// walk of the graph done here, independently. That `dot` parses it is a CTest test of its own
// (examples/graph_dot_parses).
#include <doctest/doctest.h>

#include <regex>
#include <set>
#include <sstream>

#include "cppgrad.h"
#include "../common/check.h"
#include "tools/graph_dot.h"

using namespace cppgrad;
using check::contains;
using check::error_message;

namespace {

// The DOT statements: node definitions ("id [label=...]") and edges ("a -> b"), counted.
struct DotCounts {
  int nodes = 0, edges = 0, dashed = 0, ops = 0, leaves = 0, notes = 0;
};

DotCounts count(const std::string& dot) {
  DotCounts c;
  std::regex node_re(R"(^  (\w+) \[label=)"), edge_re(R"(^  (\w+) -> (\w+))");
  std::istringstream lines(dot);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_search(line, m, edge_re)) {
      ++c.edges;
      if (contains(line, "dashed")) ++c.dashed;
    } else if (std::regex_search(line, m, node_re)) {
      ++c.nodes;
      const std::string id = m[1];
      if (id[0] == 'n') ++c.ops;
      if (id[0] == 'p') ++c.leaves;
      if (id[0] == 's') ++c.notes;
    }
  }
  return c;
}

// The same graph walked here: distinct op nodes, distinct leaves, edges between them, saved tensors.
struct GraphCounts {
  int ops = 0, leaves = 0, edges = 0, saved = 0;
};

GraphCounts walk(const Tensor& output) {
  GraphCounts g;
  std::set<const autograd::Node*> seen{output.grad_fn().get()};
  std::set<const autograd::AutogradMeta*> leaves;
  std::vector<const autograd::Node*> stack{output.grad_fn().get()};
  while (!stack.empty()) {
    const autograd::Node* n = stack.back();
    stack.pop_back();
    ++g.ops;
    for (const autograd::SavedTensor& s : n->saved) g.saved += s.tensor.defined() ? 1 : 0;
    for (const autograd::Edge& e : n->next) {
      if (e.node) {
        ++g.edges;
        if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
      } else if (e.leaf) {
        ++g.edges;
        leaves.insert(e.leaf.get());
      }
    }
  }
  g.leaves = static_cast<int>(leaves.size());
  return g;
}

}  // namespace

TEST_CASE("to_dot of a small graph: by hand") {
  // loss = sum(tanh(x W) * b): ops matmul, tanh, mul, sum; leaves W and b; x is a constant.
  Tensor x = tensor({{1.0, 2.0}}, kFloat64);
  Tensor W = tensor(std::vector<double>{0.5, -1.0}, {2, 1}).requires_grad_();
  Tensor b = tensor({2.0}, TensorOptions(kFloat64).requires_grad());
  Tensor loss = (x.matmul(W).tanh() * b).sum();
  std::string dot = plot::to_dot(loss, {{"layer.weight", W}, {"layer.bias", b}});
  CHECK(dot.starts_with("digraph backward {"));
  CHECK(contains(dot, "MatmulBackward\\n[1,1] float64"));
  CHECK(contains(dot, "TanhBackward"));
  CHECK(contains(dot, "SumBackward\\n[] float64"));
  CHECK(contains(dot, "layer.weight\\n[2,1] float64"));
  CHECK(contains(dot, "layer.bias\\n[1] float64"));
  CHECK(contains(dot, "output\\n[] float64"));
  DotCounts c = count(dot);
  CHECK(c.ops == 4);
  CHECK(c.leaves == 2);
  // Saved: matmul keeps x (a constant: a note) and W (the leaf); tanh its output (a self-loop);
  // mul keeps its two inputs (tanh's output, drawn, and b).
  CHECK(c.notes == 1);
  CHECK(c.dashed == 5);
  CHECK(c.nodes == 4 + 2 + 1 + 1);  // ops, leaves, the note, the output
  // 5 data edges (matmul←W, tanh←matmul, mul←tanh, mul←b, sum←mul), the output's edge, 5 saved.
  CHECK(c.edges == 5 + 1 + 5);
}

TEST_CASE("to_dot of an MLP matches a walk of the graph and shows shared parameters once") {
  manual_seed(3);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 8), std::make_shared<nn::Tanh>(),
                                                std::make_shared<nn::Linear>(8, 1));
  Tensor x = randn({5, 3});
  Tensor y = model->forward(x);
  Tensor loss = (y * y).mean() + model->forward(x * 2.0).sum();  // the parameters used twice
  std::string dot = plot::to_dot(loss, model->named_parameters());
  GraphCounts g = walk(loss);
  DotCounts c = count(dot);
  CHECK(c.ops == g.ops);
  CHECK(c.leaves == g.leaves);
  CHECK(g.leaves == 4);  // each parameter once, though used by two forwards
  CHECK(c.edges == g.edges + 1 + g.saved);
  CHECK(c.dashed == g.saved);
  CHECK(c.nodes == g.ops + g.leaves + c.notes + 1);
  for (const char* name : {"0.weight", "0.bias", "2.weight", "2.bias"}) CHECK(contains(dot, name));

  SUBCASE("without saved tensors: only the data edges") {
    DotCounts plain = count(plot::to_dot(loss, model->named_parameters(), plot::DotOptions().show_saved(false)));
    CHECK(plain.edges == g.edges + 1);
    CHECK(plain.dashed == 0);
  }
}

TEST_CASE("to_dot of a deep graph stops at max_nodes and says how many ops it left out") {
  Tensor w = tensor({0.5}, TensorOptions(kFloat64).requires_grad());
  Tensor h = w;
  for (int i = 0; i < 3000; ++i) h = (h * 0.999).tanh();  // 6000 ops, then the sum
  Tensor out = h.sum();
  std::string dot = plot::to_dot(out, {{"w", w}}, plot::DotOptions().max_nodes(50));
  DotCounts c = count(dot);
  CHECK(c.ops == 50);
  CHECK(contains(dot, "5951 more ops not drawn"));  // 6001 in all
  CHECK(contains(dot, "max_nodes(50)"));
  CHECK(dot.size() < 20000);  // readable: a few kilobytes, not a megabyte
}

TEST_CASE("to_dot of a leaf and of a tensor without a graph") {
  Tensor w = tensor({1.0, 2.0}, TensorOptions(kFloat64).requires_grad());
  CHECK(count(plot::to_dot(w, {{"w", w}})).nodes == 2);  // the leaf and the output
  CHECK(count(plot::to_dot(tensor({1.0}))).nodes == 1);
  CHECK(contains(error_message([] { plot::to_dot(Tensor()); }), "to_dot: the output tensor is undefined"));
}
