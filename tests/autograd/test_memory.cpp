// Memory: graphs are freed when their last handle goes, saved tensors are freed by backward,
// and thousands of training iterations (with retain_grad, hooks, retain_graph and create_graph)
// leave the live tensor and node counts where they started: no leaks and no reference cycles.
#include <doctest/doctest.h>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using test::leaf;

namespace {

struct Counts {
  int64_t tensors = live_tensor_count();
  int64_t nodes = autograd::live_node_count();
};

// A small MLP and its parameters, float64.
struct Mlp {
  Tensor w1 = leaf({3, 8}, 6000);
  Tensor b1 = leaf({8}, 6001);
  Tensor w2 = leaf({8, 1}, 6002);
  std::vector<Tensor> params() const { return {w1, b1, w2}; }
  Tensor hidden(const Tensor& x) const { return (x.matmul(w1) + b1).tanh(); }
  Tensor loss(const Tensor& x, const Tensor& h) const { return (h.matmul(w2).squeeze(-1) - x.sum({1})).pow(2).mean(); }
  void step(double lr) {
    NoGradGuard no_grad;
    for (Tensor& p : std::vector<Tensor>{w1, b1, w2}) {
      p.add_(p.grad(), -lr);
      p.zero_grad();
    }
  }
};

}  // namespace

TEST_CASE("memory: a graph is freed with its last handle") {
  Tensor x = leaf({4, 4}, 6100);
  Counts before;
  {
    Tensor y = (x.exp() * x).softmax(1).matmul(x.t()).sum();
    CHECK(autograd::live_node_count() == before.nodes + 6);  // exp, mul, softmax, transpose, matmul, sum
    CHECK(live_tensor_count() > before.tensors);
  }
  CHECK(autograd::live_node_count() == before.nodes);
  CHECK(live_tensor_count() == before.tensors);
}

TEST_CASE("memory: backward frees the saved tensors") {
  Tensor x = leaf({16}, 6200);
  Counts before;
  Tensor y;
  {
    Tensor h = x.exp();  // saves its output
    y = (h * h).sum();   // saves h twice
  }
  Counts forward;  // y, h (held by mul), exp's saved output
  CHECK(forward.tensors == before.tensors + 3);
  CHECK(forward.nodes == before.nodes + 3);
  y.backward();
  Counts after;  // h and exp's saved output are gone; x.grad came
  CHECK(after.tensors == before.tensors + 2);
  CHECK(after.nodes == before.nodes + 3);  // the nodes live as long as y
  x.zero_grad();
  y = Tensor();
  CHECK(live_tensor_count() == before.tensors);
  CHECK(autograd::live_node_count() == before.nodes);
}

TEST_CASE("memory: thousands of training iterations leave the counts at their baseline") {
  Mlp mlp;
  Generator gen(6300);
  Tensor x = randn({16, 3}, kFloat64, gen);
  Counts baseline;
  double first_loss = 0, last_loss = 0;
  for (int it = 0; it < 2000; ++it) {
    Tensor loss = mlp.loss(x, mlp.hidden(x));
    loss.backward();
    mlp.step(0.05);
    if (it == 0) first_loss = loss.item();
    last_loss = loss.item();
  }
  CHECK(last_loss < first_loss);  // the iterations did train
  CHECK(live_tensor_count() == baseline.tensors);
  CHECK(autograd::live_node_count() == baseline.nodes);
}

TEST_CASE("memory: retain_grad and hooks create no reference cycles") {
  Mlp mlp;
  Generator gen(6400);
  Tensor x = randn({8, 3}, kFloat64, gen);
  int64_t hook_calls = 0;
  Counts baseline;
  for (int it = 0; it < 1000; ++it) {
    Tensor h = mlp.hidden(x);
    h.retain_grad();
    h.register_hook([&](const Tensor& g) { ++hook_calls; return g * 1.0; });
    Tensor loss = mlp.loss(x, h);
    loss.backward();
    CHECK(h.grad().shape() == Shape{8, 8});
    mlp.step(0.01);
  }
  CHECK(hook_calls == 1000);
  CHECK(live_tensor_count() == baseline.tensors);
  CHECK(autograd::live_node_count() == baseline.nodes);

  // A graph dropped without any backward, with retain_grad and hooks on it, is freed too.
  for (int it = 0; it < 1000; ++it) {
    Tensor h = mlp.hidden(x);
    h.retain_grad();
    h.register_hook([](const Tensor& g) { return g; });
    Tensor loss = mlp.loss(x, h);
  }
  CHECK(live_tensor_count() == baseline.tensors);
  CHECK(autograd::live_node_count() == baseline.nodes);
}

TEST_CASE("memory: retain_graph and create_graph iterations leave the counts at their baseline") {
  Mlp mlp;
  Generator gen(6500);
  Tensor x = randn({4, 3}, kFloat64, gen);
  Counts baseline;
  for (int it = 0; it < 500; ++it) {
    Tensor loss = mlp.loss(x, mlp.hidden(x));
    loss.backward({}, /*retain_graph=*/true);
    loss.backward();  // into the same graph again
    // A gradient penalty: differentiate the gradient's norm (second derivatives).
    Tensor loss2 = mlp.loss(x, mlp.hidden(x));
    std::vector<Tensor> g = autograd::grad({loss2}, mlp.params(), {}, false, /*create_graph=*/true);
    Tensor penalty = (g[0] * g[0]).sum() + (g[2] * g[2]).sum();
    penalty.backward();
    mlp.step(0.001);
  }
  CHECK(live_tensor_count() == baseline.tensors);
  CHECK(autograd::live_node_count() == baseline.nodes);

  // backward(create_graph) leaves a graph in .grad: zeroing the grads frees it.
  {
    Tensor loss = mlp.loss(x, mlp.hidden(x));
    loss.backward({}, false, /*create_graph=*/true);
    CHECK(mlp.w1.grad().requires_grad());
  }
  CHECK(autograd::live_node_count() > baseline.nodes);
  for (const Tensor& p : mlp.params()) p.zero_grad();
  CHECK(live_tensor_count() == baseline.tensors);
  CHECK(autograd::live_node_count() == baseline.nodes);
}

TEST_CASE("memory: in-place ops inside a graph leave no cycles") {
  Tensor x = leaf({5}, 6600);
  Counts baseline;
  for (int it = 0; it < 1000; ++it) {
    Tensor y = x * 2.0;
    y.add_(1.0);
    y.mul_(x);
    y.div_(3.0);
    y.sum().backward();
  }
  x.zero_grad();
  CHECK(live_tensor_count() == baseline.tensors);
  CHECK(autograd::live_node_count() == baseline.nodes);
}

TEST_CASE("memory: a graph 100000 ops deep is freed without deep recursion") {
  Tensor x0 = leaf({1}, 6700);
  Counts baseline;
  {
    Tensor x = x0;
    for (int i = 0; i < 100000; ++i) x = x.tanh() * 1.0;  // never backpropagated: saved tensors chain too
    CHECK(autograd::live_node_count() == baseline.nodes + 200000);
  }
  CHECK(autograd::live_node_count() == baseline.nodes);
  CHECK(live_tensor_count() == baseline.tensors);
}
