// The backward engine and the autograd state on a tensor: requires_grad, grad, grad_fn,
// backward (implicit and explicit gradients, retain_graph, create_graph), autograd::grad,
// no-grad mode, detach, retain_grad, zero_grad and hooks.
#include <doctest/doctest.h>

#include <cmath>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using cppgrad::test::contains;
using cppgrad::test::error_message;
using cppgrad::test::values;
using V = std::vector<double>;

namespace {
Tensor f64(std::initializer_list<double> v, bool requires_grad = true) {
  return tensor(v, TensorOptions(kFloat64).requires_grad(requires_grad));
}
}  // namespace

TEST_CASE("engine: requires_grad and is_leaf and grad_fn") {
  Tensor x = f64({1, 2, 3});
  Tensor w = f64({4, 5, 6}, /*requires_grad=*/false);
  CHECK(x.requires_grad());
  CHECK(x.is_leaf());
  CHECK(x.grad_fn() == nullptr);
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.requires_grad());

  Tensor y = x * w;
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->op == "mul");
  CHECK(y.grad_fn()->name() == "MulBackward");
  CHECK(y.grad_fn()->next.size() == 2);
  CHECK(y.grad_fn()->next[0].valid());
  CHECK_FALSE(y.grad_fn()->next[1].valid());  // w needs no gradient
  CHECK(x.log_softmax(0).grad_fn()->name() == "LogSoftmaxBackward");

  // An op on tensors that do not require grad records nothing.
  Tensor z = w * w;
  CHECK_FALSE(z.requires_grad());
  CHECK(z.is_leaf());
  CHECK(values(z) == V{16, 25, 36});
}

TEST_CASE("engine: requires_grad_ turns gradients on for a leaf") {
  Tensor x = tensor({1.0, 2.0}, kFloat64);
  CHECK_FALSE(x.requires_grad());
  x.requires_grad_();
  CHECK(x.requires_grad());
  (x * x).sum().backward();
  CHECK(values(x.grad()) == V{2, 4});

  x.requires_grad_(false);
  CHECK_FALSE((x * x).requires_grad());

  Tensor i = tensor(std::vector<int64_t>{1, 2}, {2});
  CHECK(contains(error_message([&] { i.requires_grad_(); }), "requires_grad_"));
  Tensor y = f64({1.0}) * 2.0;
  CHECK(contains(error_message([&] { y.requires_grad_(false); }), "non-leaf"));
}

TEST_CASE("engine: backward of a scalar fills the leaves' grad") {
  Tensor x = f64({1, -2, 3});
  Tensor w = f64({0.5, 2, -1});
  Tensor loss = (x * x * w).sum();  // d/dx = 2 x w,  d/dw = x²
  loss.backward();
  CHECK(values(x.grad()) == V{1, -8, -6});
  CHECK(values(w.grad()) == V{1, 4, 9});
  CHECK(x.grad().dtype() == kFloat64);
  CHECK_FALSE(x.grad().requires_grad());
}

TEST_CASE("engine: backward of a non-scalar needs an explicit gradient") {
  Tensor x = f64({1, 2, 3});
  Tensor y = x * x;
  std::string msg = error_message([&] { y.backward(); });
  CHECK(contains(msg, "backward"));
  CHECK(contains(msg, "one-element"));

  y.backward(tensor({1.0, 0.5, -1.0}, kFloat64));  // dy/dx = 2x, weighted
  CHECK(values(x.grad()) == V{2, 2, -6});

  Tensor z = x * 2.0;
  CHECK(contains(error_message([&] { z.backward(tensor({1.0, 1.0}, kFloat64)); }), "gradient of shape [2]"));
  Tensor c = f64({1, 2}, false);
  CHECK(contains(error_message([&] { c.sum().backward(); }), "does not require grad"));
}

TEST_CASE("engine: retain_graph allows a second backward") {
  Tensor x = f64({0.0, 1.0});
  Tensor y = x.exp().sum();
  y.backward({}, /*retain_graph=*/true);
  CHECK(values(x.grad()) == V{1, std::exp(1.0)});
  y.backward();  // the graph was kept: gradients accumulate
  CHECK(values(x.grad()) == V{2, 2 * std::exp(1.0)});
  std::string msg = error_message([&] { y.backward(); });  // now it was freed
  CHECK(contains(msg, "retain_graph"));
  CHECK(contains(msg, "second time"));
}

TEST_CASE("engine: create_graph gives a Hessian-vector product") {
  // f(x) = Σ x_i³ + x0 x1;  ∇f = 3x² + (x1, x0, 0);  H = diag(6x) + [[0,1,0],[1,0,0],[0,0,0]]
  // At x = (1, 2, 3), v = (1, -1, 2):  H v = (6 - 1, 1 - 12, 36) = (5, -11, 36).
  Tensor x = f64({1, 2, 3});
  Tensor v = f64({1, -1, 2}, false);
  auto f = [&] { return x.pow(3).sum() + x.select(0, 0) * x.select(0, 1); };

  SUBCASE("with autograd::grad") {
    Tensor g = autograd::grad({f()}, {x}, {}, false, /*create_graph=*/true)[0];
    CHECK(values(g) == V{5, 13, 27});
    CHECK(g.requires_grad());
    Tensor hv = autograd::grad({(g * v).sum()}, {x})[0];
    CHECK(values(hv) == V{5, -11, 36});
  }
  SUBCASE("with backward and x.grad") {
    f().backward({}, false, /*create_graph=*/true);
    Tensor g = x.grad();
    CHECK(g.requires_grad());
    CHECK(values(g) == V{5, 13, 27});
    x.zero_grad();
    (g * v).sum().backward();
    CHECK(values(x.grad()) == V{5, -11, 36});
  }
  SUBCASE("without create_graph the gradient is a constant") {
    Tensor g = autograd::grad({f()}, {x})[0];
    CHECK_FALSE(g.requires_grad());
  }
}

TEST_CASE("engine: autograd::grad returns gradients without touching .grad") {
  Tensor a = f64({1, 2});
  Tensor b = f64({3, 4});
  Tensor unused = f64({5});
  Tensor h = a * b;  // a non-leaf input works too
  Tensor y = (h * a).sum();
  std::vector<Tensor> g = autograd::grad({y}, {a, b, h}, {}, /*retain_graph=*/true);
  REQUIRE(g.size() == 3);
  CHECK(values(g[0]) == V{6, 16});  // y = Σ a² b: 2ab
  CHECK(values(g[1]) == V{1, 4});   // a²
  CHECK(values(g[2]) == V{1, 2});   // a
  CHECK_FALSE(a.grad().defined());
  CHECK_FALSE(b.grad().defined());

  std::string msg = error_message([&] { autograd::grad({y}, {a, unused}, {}, true); });
  CHECK(contains(msg, "allow_unused"));
  CHECK(contains(msg, "input 1"));
  std::vector<Tensor> g2 = autograd::grad({y}, {a, unused}, {}, true, false, /*allow_unused=*/true);
  CHECK(values(g2[0]) == V{6, 16});
  CHECK_FALSE(g2[1].defined());
  CHECK_FALSE(unused.grad().defined());

  Tensor c = f64({1}, false);
  CHECK(contains(error_message([&] { autograd::grad({y}, {c}, {}, true); }), "does not require grad"));
}

TEST_CASE("engine: autograd::grad with grad_outputs and several outputs") {
  Tensor x = f64({1, 2, 3});
  Tensor y1 = x * x;        // dy1/dx = 2x
  Tensor y2 = (x * 3.0).sum();  // dy2/dx = 3
  std::vector<Tensor> g = autograd::grad({y1, y2}, {x}, {tensor({1.0, 1.0, 0.5}, kFloat64), Tensor()});
  CHECK(values(g[0]) == V{2 + 3, 4 + 3, 3 + 3});

  Tensor z1 = x.exp().sum();
  Tensor z2 = (x * x).sum();
  autograd::backward({z1, z2});
  CHECK(test::allclose(x.grad(), tensor({std::exp(1.0) + 2, std::exp(2.0) + 4, std::exp(3.0) + 6}, kFloat64)));
}

TEST_CASE("engine: NoGradGuard records nothing and restores the mode") {
  Tensor x = f64({1, 2});
  CHECK(autograd::GradMode::is_enabled());
  {
    NoGradGuard no_grad;
    CHECK_FALSE(autograd::GradMode::is_enabled());
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    CHECK(values(y) == V{2, 4});
    {
      NoGradGuard nested;
      CHECK_FALSE(autograd::GradMode::is_enabled());
    }
    CHECK_FALSE(autograd::GradMode::is_enabled());
    {
      autograd::GradModeGuard enable(true);
      CHECK((x * 2.0).requires_grad());
    }
  }
  CHECK(autograd::GradMode::is_enabled());
  CHECK((x * 2.0).requires_grad());
}

TEST_CASE("engine: detach shares storage and stops gradients") {
  Tensor x = f64({1, 2, 3});
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.storage() == x.storage());
  d.at<double>({0}) = 10;  // same memory
  CHECK(x.at<double>({0}) == 10);

  Tensor y = (x.detach() * x).sum();  // only the second factor is differentiated
  y.backward();
  CHECK(values(x.grad()) == V{10, 2, 3});
}

// torch.autograd.grad runs only the nodes between the outputs and the inputs: the rest of the
// graph keeps its saved tensors, its hooks stay silent, and no .grad is written, retain_grad's
// included.
TEST_CASE("engine: autograd::grad runs only what reaches its inputs") {
  Tensor a = f64({1, 2});
  Tensor b = f64({3, 4});
  Tensor h = a.exp();   // on the way to a
  Tensor u = b.tanh();  // reaches only b
  h.retain_grad();
  u.retain_grad();
  int h_hooks = 0, u_hooks = 0, b_hooks = 0;
  h.register_hook([&](const Tensor&) { ++h_hooks; return Tensor(); });
  u.register_hook([&](const Tensor&) { ++u_hooks; return Tensor(); });
  b.register_hook([&](const Tensor&) { ++b_hooks; return Tensor(); });
  Tensor loss = (h * 2.0).sum() + (u * 3.0).sum();
  std::vector<Tensor> g = autograd::grad({loss}, {a});
  CHECK(test::max_abs_diff(values(g[0]), V{2 * std::exp(1.0), 2 * std::exp(2.0)}) < 1e-15);
  CHECK(h_hooks == 1);  // on the path: fires, as in PyTorch
  CHECK(u_hooks == 0);  // off the path: not run
  CHECK(b_hooks == 0);
  for (const Tensor& t : {a, b, h, u}) CHECK_FALSE(t.grad().defined());  // retain_grad writes nothing
  // u's part of the graph was neither run nor freed: a backward through it still works.
  (u * 1.0).sum().backward();
  CHECK(u_hooks == 1);
  CHECK(values(u.grad()) == V{1, 1});
  CHECK(test::max_abs_diff(values(b.grad()), V{1 - std::pow(std::tanh(3.0), 2), 1 - std::pow(std::tanh(4.0), 2)}) <
        1e-15);
  // The nodes grad did run were freed (no retain_graph): a second pass through them refuses.
  CHECK(contains(error_message([&] { autograd::grad({loss}, {a}); }), "second time"));

  // With a non-leaf input the graph below it is not run either: exp's node keeps its tensors.
  Tensor x = f64({0.5});
  Tensor e = x.exp();
  int x_hooks = 0;
  x.register_hook([&](const Tensor&) { ++x_hooks; return Tensor(); });
  Tensor y = (e * e).sum();
  CHECK(values(autograd::grad({y}, {e})[0]) == values(e * 2.0));
  CHECK(x_hooks == 0);
  e.sum().backward();  // exp's saved output is still there
  CHECK(values(x.grad()) == values(e));
}

// PyTorch's AccumulateGrad: later gradients are added into .grad in place (without
// create_graph), so a handle on it stays current and a loop of micro-batches reuses one buffer.
TEST_CASE("engine: .grad accumulates in place, a kept handle stays valid") {
  Tensor w = f64({1, 2, 3});
  (w * 2.0).sum().backward();
  Tensor kept = w.grad();
  const void* buffer = kept.raw_data();
  for (int micro_batch = 0; micro_batch < 3; ++micro_batch) (w * 3.0).sum().backward();
  CHECK(values(kept) == V{11, 11, 11});  // 2 + 3·3, seen through the old handle
  CHECK(w.grad().raw_data() == buffer);  // no new .grad was made
  CHECK(w.grad().is_same(kept));
  w.zero_grad(/*set_to_none=*/false);
  (w * w).sum().backward();
  CHECK(values(kept) == V{2, 4, 6});
  CHECK(w.grad().raw_data() == buffer);

  // A gradient handed to two leaves (add's backward) is copied for the second, so in-place
  // accumulation into one never reaches the other.
  Tensor a = f64({1, 2}), b = f64({3, 4});
  (a + b).sum().backward();
  (a + b * 2.0).sum().backward();
  CHECK(values(a.grad()) == V{2, 2});
  CHECK(values(b.grad()) == V{3, 3});

  // A .grad the user set is accumulated into as well (torch: p.grad = t; backward adds to t).
  Tensor c = f64({1});
  Tensor mine = tensor({10.0}, kFloat64);
  c.set_grad(mine);
  (c * 5.0).sum().backward();
  CHECK(values(mine) == V{15});

  // With create_graph the sum is a new tensor recorded on the graph; the old handle keeps its values.
  Tensor z = f64({2});
  (z * z).sum().backward();
  Tensor before = z.grad();
  (z * z).sum().backward({}, false, /*create_graph=*/true);
  CHECK(values(before) == V{4});
  CHECK(values(z.grad()) == V{8});
  CHECK(z.grad().requires_grad());
  // That .grad's graph saved z, and z holds the .grad: a reference cycle, as in PyTorch.
  // Setting the gradient to none breaks it (LeakSanitizer checks that nothing is left).
  z.zero_grad();
}

TEST_CASE("engine: retain_grad follows a tensor through an in-place op") {
  Tensor x = f64({1, 2});
  Tensor y = x * 2.0;
  y.retain_grad();
  y.mul_(3.0);  // y is now x·6, and y.grad is the gradient of this new value
  CHECK(y.retains_grad());
  Tensor c = tensor({5.0, 7.0}, kFloat64);
  (y * c).sum().backward({}, /*retain_graph=*/true);
  CHECK(values(y.grad()) == V{5, 7});
  CHECK(values(x.grad()) == V{30, 42});
  (y * c).sum().backward();
  CHECK(values(y.grad()) == V{10, 14});  // accumulates like a leaf's
  CHECK_FALSE(y.grad().requires_grad());
  // Retained, then changed in place twice, then used: still the latest value's gradient.
  Tensor p = f64({1});
  Tensor q = p * 1.0;
  q.retain_grad();
  q.add_(1.0);
  q.mul_(4.0);
  (q * q).sum().backward();  // q = 8, d(q²)/dq = 16
  CHECK(values(q.grad()) == V{16});
}

TEST_CASE("engine: retain_grad keeps the gradient of a non-leaf") {
  Tensor x = f64({1, 2});
  Tensor h = x * 3.0;
  Tensor k = h + 1.0;
  CHECK_FALSE(h.retains_grad());
  h.retain_grad();
  h.retain_grad();  // twice is the same as once
  CHECK(h.retains_grad());
  Tensor y = (h * k).sum();  // dy/dh = k + h = 2h + 1;  dy/dx = 3 (2h + 1)
  y.backward();
  CHECK(values(h.grad()) == V{7, 13});
  CHECK_FALSE(h.grad().requires_grad());
  CHECK_FALSE(k.grad().defined());  // not retained
  CHECK(values(x.grad()) == V{21, 39});
  x.retain_grad();  // a leaf keeps its grad anyway
  CHECK(values(x.grad()) == V{21, 39});
}

TEST_CASE("engine: zero_grad resets or zeroes the accumulated gradient") {
  Tensor x = f64({1, 2});
  (x * x).sum().backward();
  (x * x).sum().backward();
  CHECK(values(x.grad()) == V{4, 8});  // accumulated over two backwards
  x.zero_grad(/*set_to_none=*/false);
  REQUIRE(x.grad().defined());
  CHECK(values(x.grad()) == V{0, 0});
  (x * 3.0).sum().backward();
  CHECK(values(x.grad()) == V{3, 3});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  x.set_grad(tensor({7.0, 8.0}, kFloat64));
  CHECK(values(x.grad()) == V{7, 8});
  CHECK(contains(error_message([&] { x.set_grad(tensor({1.0}, kFloat64)); }), "set_grad"));
}

TEST_CASE("engine: each leaf's grad owns its memory") {
  // add's backward hands the same (broadcast) gradient to both inputs: their .grad must not
  // share it, or zeroing one in place would zero the other.
  Tensor a = f64({1, 2});
  Tensor b = f64({3, 4});
  (a + b).sum().backward();
  CHECK(a.grad().storage() != b.grad().storage());
  CHECK(a.grad().is_contiguous());
  a.zero_grad(/*set_to_none=*/false);
  CHECK(values(a.grad()) == V{0, 0});
  CHECK(values(b.grad()) == V{1, 1});
  {
    NoGradGuard no_grad;
    b.grad().mul_(3.0);  // as an optimizer or a gradient clipper would
  }
  CHECK(values(b.grad()) == V{3, 3});
}

TEST_CASE("engine: hooks read and replace gradients of leaves and non-leaves") {
  Tensor x = f64({1, 2});
  Tensor seen_leaf, seen_mid;
  int calls = 0;
  SUBCASE("a hook that reads") {
    x.register_hook([&](const Tensor& g) {
      ++calls;
      seen_leaf = g;
      return Tensor();
    });
    Tensor h = x * x;
    h.register_hook([&](const Tensor& g) {
      seen_mid = g;
      return Tensor();
    });
    (h * 5.0).sum().backward();
    CHECK(values(seen_mid) == V{5, 5});
    CHECK(calls == 1);  // once, with the total of both of mul's contributions
    CHECK(values(seen_leaf) == V{10, 20});
    CHECK(values(x.grad()) == V{10, 20});
  }
  SUBCASE("a hook on a leaf that replaces") {
    x.register_hook([](const Tensor& g) { return g * 2.0; });
    (x * 3.0).sum().backward();
    CHECK(values(x.grad()) == V{6, 6});
  }
  SUBCASE("a hook on a non-leaf that replaces: the change flows on") {
    Tensor h = x * x;
    h.register_hook([](const Tensor& g) { return g * 0.0 + 1.0; });
    h.retain_grad();  // registered after the hook: sees the replaced gradient
    (h * 5.0).sum().backward();
    CHECK(values(h.grad()) == V{1, 1});
    CHECK(values(x.grad()) == V{2, 4});  // 2x · 1, not 2x · 5
  }
  SUBCASE("hooks run in order of registration") {
    x.register_hook([](const Tensor& g) { return g + 1.0; });
    x.register_hook([](const Tensor& g) { return g * 10.0; });
    (x * 1.0).sum().backward();
    CHECK(values(x.grad()) == V{20, 20});
  }
  Tensor c = f64({1}, false);
  CHECK(contains(error_message([&] { c.register_hook([](const Tensor& g) { return g; }); }), "register_hook"));
}

TEST_CASE("engine: a graph 100000 ops deep runs without recursion") {
  Tensor x0 = f64({1.0});
  Tensor x = x0;
  const int depth = 100000;
  for (int i = 0; i < depth; ++i) x = x * 1.0001;
  x.sum().backward();
  double expected = std::pow(1.0001, depth);  // ≈ 22015
  CHECK(x0.grad().item() == doctest::Approx(expected).epsilon(1e-9));
  CHECK(x.item() == doctest::Approx(expected).epsilon(1e-9));
}

TEST_CASE("engine: gradients of a tensor used several times accumulate") {
  Tensor a = f64({1, 2});
  Tensor b = a + a;
  Tensor c = b + b;
  c.sum().backward();
  CHECK(values(a.grad()) == V{4, 4});

  // A diamond: y = e + e², e = exp(x), both branches meet at e.
  Tensor x = f64({0.0, 1.0});
  Tensor e = x.exp();
  (e + e * e).sum().backward();
  CHECK(test::allclose(x.grad(), tensor({1.0 + 2.0, std::exp(1.0) + 2 * std::exp(2.0)}, kFloat64)));
}

TEST_CASE("engine: a broadcast input's gradient is reduced to its shape") {
  Tensor a = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}, TensorOptions(kFloat64).requires_grad());  // [2,3]
  Tensor row = f64({1, 10, 100});                                                                  // [3]
  Tensor col = tensor(std::vector<double>{1.0, -1.0}, {2, 1}).requires_grad_();                       // [2,1]
  Tensor s = tensor(std::vector<double>{2.0}, Shape{}).requires_grad_();                           // 0-d
  (a * row * col * s).sum().backward();
  CHECK(row.grad().shape() == Shape{3});
  CHECK(values(row.grad()) == V{2 * (1 - 4), 2 * (2 - 5), 2 * (3 - 6)});
  CHECK(col.grad().shape() == Shape{2, 1});
  CHECK(values(col.grad()) == V{2 * (1 + 20 + 300), 2 * (4 + 50 + 600)});
  CHECK(s.grad().shape() == Shape{});
  CHECK(s.grad().item() == (1 + 20 + 300) - (4 + 50 + 600));
  CHECK(values(a.grad()) == V{2, 20, 200, -2, -20, -200});
}

TEST_CASE("engine: a gradient comes back in its input's dtype") {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();  // float32
  (x.to(kFloat64) * 3.0).sum().backward();
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 3});
}

TEST_CASE("engine: ops with no derivative give outputs that do not require grad") {
  Tensor x = f64({3, 1, 2});
  Tensor y = f64({2, 2, 2});
  for (const Tensor& t : {x.argmax(), x.argmax(0), x.argmin(0), x.max(0).indices, x.eq(y), x.ne(y), x.lt(y),
                          x.le(y), x.gt(y), x.ge(y), x > y, x.gt(y).logical_not(), x.to(kInt64), x.to(kBool),
                          (x * 2.0).to(kInt64).sum()})
    CHECK_FALSE(t.requires_grad());
  CHECK(x.argmax().item<int64_t>() == 0);
  CHECK(x.argmin(0).item<int64_t>() == 1);
  CHECK(values(x.gt(y).to(kFloat64)) == V{1, 0, 0});
  // sign has a zero derivative everywhere it has one.
  Tensor s = x.sign();
  s.sum().backward();
  CHECK(values(x.grad()) == V{0, 0, 0});
}

TEST_CASE("engine: slices' gradients are added into their input's gradient where they were cut") {
  // The engine writes a slice's gradient straight into its input's (autograd::slice_of, autograd/side_tables.h) rather than
  // calling the slice's backward, which pads it with zeros; with create_graph it calls the
  // backward. Both must agree, for slices of a non-leaf and of a leaf, with steps, for a
  // gradient that other uses of the input add to, and for one that is shared (the two inputs
  // of an add receive the same gradient tensor).
  auto run = [](bool create_graph) {
    Tensor x = arange(24.0).to(kFloat64).reshape({4, 6}).requires_grad_();
    Tensor w = arange(12.0).to(kFloat64).reshape({6, 2}).requires_grad_();
    Tensor y = x * 2.0;
    std::vector<Tensor> qkv = y.chunk(3, 1);                     // three (4, 2) slices of y
    Tensor every_other = y.slice(0, 1, 4, 2);                    // rows 1 and 3
    Tensor shared = qkv[0] + qkv[0];                             // both inputs get one gradient
    Tensor w_rows = w.narrow(0, 2, 3);                           // a leaf's slice
    Tensor loss = (shared * qkv[1]).sum() + (qkv[2] * 3.0).sum() + (every_other * every_other).sum() +
                  (y * y).sum() + (w_rows * w_rows).sum() + (w.slice(0, 0, 6, 3) * 5.0).sum();
    if (create_graph)
      loss.backward({}, false, true);
    else
      loss.backward();
    auto grads = std::pair{values(x.grad()), values(w.grad())};
    // With create_graph a leaf's .grad has a graph that holds the leaf: a cycle (as in PyTorch),
    // broken here so that LeakSanitizer sees everything freed.
    x.zero_grad();
    w.zero_grad();
    return grads;
  };
  auto [x_grad, w_grad] = run(false);
  auto [x_ref, w_ref] = run(true);
  CHECK(x_grad == x_ref);
  CHECK(w_grad == w_ref);
  // Two entries worked by hand. x[1][0] = 6, y[1][0] = 12, lies in q, in every_other and in y:
  // d(2q·k)/dq = 2k = 2·y[1][2] = 32, d(every_other²) = 2·12 = 24, d(y²) = 24; times dy/dx = 2.
  CHECK(x_grad[6] == 2.0 * (32.0 + 24.0 + 24.0));
  // w[3][1] = 7 lies in w_rows (rows 2-4: 2·7) and in the step-3 slice (rows 0 and 3: 5).
  CHECK(w_grad[7] == 14.0 + 5.0);
}

TEST_CASE("a hook may change a gradient's values, not its shape or dtype, and set_grad checks both") {
  // A hook's [1] gradient for a [1000] leaf once reached SGD, which wrote past the parameter.
  Tensor x = zeros({1000}, TensorOptions(kFloat32).requires_grad());
  x.register_hook([](const Tensor&) { return ones({1}); });
  std::string e = error_message([&] { (x * 2.0).sum().backward(); });
  CHECK(contains(e, "backward: hook 0 returned a gradient [1] float32 for one of [1000] float32"));
  CHECK_FALSE(x.grad().defined());
  Tensor y = zeros({3}, TensorOptions(kFloat32).requires_grad());
  y.register_hook([](const Tensor& g) { return g.to(kFloat64); });
  CHECK(contains(error_message([&] { y.sum().backward(); }), "returned a gradient [3] float64 for one of [3] float32"));
  // A hook returning the same shape and dtype still replaces the gradient.
  Tensor z = zeros({2}, TensorOptions(kFloat64).requires_grad());
  z.register_hook([](const Tensor& g) { return g * 3.0; });
  (z * 2.0).sum().backward();
  CHECK(values(z.grad()) == V{6.0, 6.0});
  CHECK(contains(error_message([&] { z.set_grad(ones({2}, kFloat32)); }),
                 "set_grad: gradient of dtype float32 for a tensor of dtype float64"));
  CHECK(contains(error_message([&] { z.set_grad(ones({3}, kFloat64)); }), "set_grad: gradient of shape [3]"));
}
