// The engine's hooks for data-parallel training: a leaf's post-accumulate-grad hook runs as
// soon as its gradient is final (before the rest of backward), queue_callback runs at the end
// of the backward that queued it, and call_between_nodes after each node that is still to run.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using cppgrad::test::values;

TEST_CASE("post-accumulate-grad hook: runs once, with the leaf's whole gradient, before earlier layers") {
  // y = sum(w2 * relu(w1 * x)) with w2 used twice (tied): w2's gradient is final once both of
  // its uses have run, which is before w1's; the hook must see the sum of both uses.
  Tensor x = tensor({1.0, 2.0}, TensorOptions(kFloat64));
  Tensor w1 = tensor({0.5, 1.5}, TensorOptions(kFloat64).requires_grad(true));
  Tensor w2 = tensor({3.0, -1.0}, TensorOptions(kFloat64).requires_grad(true));
  std::vector<std::string> order;
  std::vector<double> w2_grad_seen;
  autograd::register_post_accumulate_grad_hook(w2, [&](const Tensor& leaf) {
    order.push_back("w2");
    w2_grad_seen = values(leaf.grad());
    CHECK(leaf.is_same(w2));
  });
  autograd::register_post_accumulate_grad_hook(w1, [&](const Tensor&) { order.push_back("w1"); });
  Tensor h = (w1 * x).relu();
  Tensor y = (w2 * h + w2 * w2).sum();
  y.backward();
  CHECK(order == std::vector<std::string>{"w2", "w1"});
  // dy/dw2 = h + 2 w2 = [0.5, 3] + [6, -2]
  CHECK(w2_grad_seen == std::vector<double>{6.5, 1.0});
  CHECK(values(w2.grad()) == std::vector<double>{6.5, 1.0});
  CHECK(values(w1.grad()) == std::vector<double>{3.0, -2.0});  // w2 * x

  // A second backward accumulates, and the hook sees the accumulated .grad.
  (w2 * 2.0).sum().backward();
  CHECK(w2_grad_seen == std::vector<double>{8.5, 3.0});
  CHECK(order.size() == 3);  // w1 got no gradient: its hook did not run
}

TEST_CASE("post-accumulate-grad hook: not for autograd::grad, and only on leaves") {
  Tensor w = tensor({1.0, 2.0}, TensorOptions(kFloat64).requires_grad(true));
  int calls = 0;
  autograd::register_post_accumulate_grad_hook(w, [&](const Tensor&) { ++calls; });
  Tensor y = (w * w).sum();
  auto g = autograd::grad({y}, {w});
  CHECK(calls == 0);
  CHECK(values(g[0]) == std::vector<double>{2.0, 4.0});
  CHECK_THROWS_AS(autograd::register_post_accumulate_grad_hook(w * 2.0, [](const Tensor&) {}), Error);
}

TEST_CASE("queue_callback: runs after every .grad is updated, once per backward") {
  Tensor a = tensor({1.0}, TensorOptions(kFloat64).requires_grad(true));
  Tensor b = tensor({2.0}, TensorOptions(kFloat64).requires_grad(true));
  int callbacks = 0;
  double b_grad_at_callback = 0;
  autograd::register_post_accumulate_grad_hook(a, [&](const Tensor&) {
    autograd::queue_callback([&] {
      ++callbacks;
      b_grad_at_callback = b.grad().item<double>();
    });
  });
  (a * b * 3.0).sum().backward();
  CHECK(callbacks == 1);
  CHECK(b_grad_at_callback == 3.0);  // b has no hook: its .grad is set at the end, before callbacks
  CHECK_THROWS_AS(autograd::queue_callback([] {}), Error);  // outside a backward
}

TEST_CASE("call_between_nodes: after each node still to run in that backward, then no more") {
  // y = sum(exp(w2 * tanh(w1 * x))): backward runs sum, exp, mul (w2's), tanh, mul (w1's) in
  // that order; w2's hook runs within the third node, so the callback follows that node and
  // the two after it.
  Tensor x = tensor({1.0, 2.0}, TensorOptions(kFloat64));
  Tensor w1 = tensor({0.5, 1.5}, TensorOptions(kFloat64).requires_grad(true));
  Tensor w2 = tensor({3.0, -1.0}, TensorOptions(kFloat64).requires_grad(true));
  int calls = 0, calls_when_w1_ready = -1, calls_at_end = -1;
  autograd::register_post_accumulate_grad_hook(w2, [&](const Tensor&) {
    autograd::call_between_nodes([&] { ++calls; });
    autograd::queue_callback([&] { calls_at_end = calls; });
  });
  autograd::register_post_accumulate_grad_hook(w1, [&](const Tensor&) { calls_when_w1_ready = calls; });
  (w2 * (w1 * x).tanh()).exp().sum().backward();
  CHECK(calls_when_w1_ready == 2);  // after w2's mul and tanh: w1's hook runs within the last node
  CHECK(calls == 3);
  CHECK(calls_at_end == 3);
  // Registered for one backward only: the next one calls nothing it did not register.
  (w1 * 2.0).sum().backward();
  CHECK(calls == 3);
  CHECK_THROWS_AS(autograd::call_between_nodes([] {}), Error);  // outside a backward
}
