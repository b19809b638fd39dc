// In-place ops: their values, the version counter they bump, the graph they extend when a
// tensor in the graph is modified, and the errors that protect backward from stale values.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <utility>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using test::contains;
using test::error_message;
using test::leaf;
using test::values;
using V = std::vector<double>;

namespace {
Tensor f64(std::initializer_list<double> v, bool requires_grad = false) {
  return tensor(v, TensorOptions(kFloat64).requires_grad(requires_grad));
}
}  // namespace

TEST_CASE("inplace: values and version bumps without a graph") {
  Tensor t = f64({1, 2, 3});
  uint64_t v0 = t.version();
  t.add_(f64({1, 1, 1}));
  CHECK(values(t) == V{2, 3, 4});
  CHECK(t.version() == v0 + 1);
  t.add_(f64({1, 2, 3}), 2.0);
  CHECK(values(t) == V{4, 7, 10});
  t.add_(0.5);
  CHECK(values(t) == V{4.5, 7.5, 10.5});
  t.sub_(f64({0.5}));
  CHECK(values(t) == V{4, 7, 10});
  t.mul_(f64({2, 1, 0.5}));
  CHECK(values(t) == V{8, 7, 5});
  t.mul_(2.0);
  CHECK(values(t) == V{16, 14, 10});
  t.div_(f64({4, 7, 5}));
  CHECK(values(t) == V{4, 2, 2});
  t.div_(2.0);
  CHECK(values(t) == V{2, 1, 1});
  t.masked_fill_(f64({1, 0, 1}).ne(zeros({}, kFloat64)), -1.0);
  CHECK(values(t) == V{-1, 1, -1});
  t.copy_(f64({7, 8, 9}));
  CHECK(values(t) == V{7, 8, 9});
  t.fill_(3.0);
  CHECK(values(t) == V{3, 3, 3});
  t.zero_();
  CHECK(values(t) == V{0, 0, 0});
  CHECK(t.version() == v0 + 12);

  // A write through a view bumps the version of every tensor on the storage.
  Tensor base = zeros({2, 3}, kFloat64);
  Tensor row = base.select(0, 1);
  uint64_t b0 = base.version();
  row.fill_(5.0);
  CHECK(base.version() == b0 + 1);
  CHECK(values(base) == V{0, 0, 0, 5, 5, 5});
  // copy_ converts dtype and broadcasts.
  Tensor f = zeros({2, 2});
  f.copy_(tensor({1.0, 2.0}, kFloat64));
  CHECK(f.to_vector<float>() == std::vector<float>{1, 2, 1, 2});
}

TEST_CASE("inplace: on a leaf that requires grad throws outside no-grad") {
  Tensor w = f64({1, 2}, true);
  for (auto [name, op] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"add_", [&] { w.add_(1.0); }},
           {"mul_", [&] { w.mul_(2.0); }},
           {"sub_", [&] { w.sub_(f64({1, 1})); }},
           {"div_", [&] { w.div_(2.0); }},
           {"fill_", [&] { w.fill_(0.0); }},
           {"copy_", [&] { w.copy_(f64({3, 4})); }},
           {"masked_fill_", [&] { w.masked_fill_(f64({1, 0}).ne(zeros({}, kFloat64)), 0.0); }},
       }) {
    CAPTURE(name);
    std::string msg = error_message(op);
    CHECK(contains(msg, name));
    CHECK(contains(msg, "leaf"));
  }
  CHECK(contains(error_message([&] { w.zero_(); }), "leaf"));
  CHECK(values(w) == V{1, 2});  // untouched
}

TEST_CASE("inplace: on a leaf under NoGradGuard works as an optimizer step") {
  Tensor w = f64({1, 2}, true);
  (w * w).sum().backward();  // grad 2w = (2, 4)
  uint64_t v0 = w.version();
  {
    NoGradGuard no_grad;
    w.add_(w.grad(), -0.25);  // w -= 0.25 grad
    w.grad().zero_();
  }
  CHECK(values(w) == V{0.5, 1});
  CHECK(w.version() == v0 + 1);
  CHECK(w.is_leaf());
  CHECK(w.requires_grad());
  CHECK(values(w.grad()) == V{0, 0});
  (w * w).sum().backward();  // the graph after the step sees the new values
  CHECK(values(w.grad()) == V{1, 2});
}

TEST_CASE("inplace: on a non-leaf extends the graph") {
  Tensor x = f64({1, 2, 3}, true);
  Tensor y = x * 2.0;
  y.add_(1.0);
  CHECK(y.grad_fn()->op == "add");
  y.mul_(x);  // y = (2x + 1) x;  dy/dx = 4x + 1
  CHECK(y.grad_fn()->op == "mul");
  CHECK(values(y) == V{3, 10, 21});
  y.sum().backward();
  CHECK(values(x.grad()) == V{5, 9, 13});

  // A tensor that did not require grad starts to when a value that does is written into it.
  Tensor z = zeros({3}, kFloat64);
  z.add_(x, 3.0);
  CHECK(z.requires_grad());
  z.mul_(x);  // 3x²
  x.zero_grad();
  z.sum().backward();
  CHECK(values(x.grad()) == V{6, 12, 18});

  // The tensor itself as the operand: y.mul_(y) squares y.
  Tensor q = x * 2.0;
  q.mul_(q);
  CHECK(values(q) == V{4, 16, 36});
  x.zero_grad();
  q.sum().backward();  // d/dx (2x)² = 8x
  CHECK(values(x.grad()) == V{8, 16, 24});

  // copy_ replaces the history: only the source's graph remains.
  Tensor w = x * 5.0;
  w.copy_(x * x);
  x.zero_grad();
  w.sum().backward();
  CHECK(values(x.grad()) == V{2, 4, 6});
}

TEST_CASE("gradcheck inplace: every in-place op inside a graph") {
  Tensor a = leaf({3, 4}, 5000);
  Tensor b = test::positive_leaf({4}, 5001);
  Tensor m = test::mask({{1, 0, 0, 1}, {0, 1, 0, 0}, {0, 0, 1, 1}});
  auto check_op = [&](const std::function<void(Tensor&, const Tensor&, const Tensor&)>& op) {
    return test::check2(
        [&](const Tensor& x, const Tensor& y) {
          Tensor t = x * 1.5;  // a non-leaf to modify (mul saves its inputs, not its output)
          op(t, x, y);
          return t;
        },
        a, b);
  };
  CHECK(check_op([](Tensor& t, const Tensor&, const Tensor& y) { t.add_(y); }));
  CHECK(check_op([](Tensor& t, const Tensor& x, const Tensor&) { t.add_(x, -2.5); }));
  CHECK(check_op([](Tensor& t, const Tensor&, const Tensor&) { t.add_(2.0); }));
  CHECK(check_op([](Tensor& t, const Tensor&, const Tensor& y) { t.sub_(y * y); }));
  CHECK(check_op([](Tensor& t, const Tensor& x, const Tensor& y) { t.mul_(x + y); }));
  CHECK(check_op([](Tensor& t, const Tensor&, const Tensor&) { t.mul_(-3.0); }));
  CHECK(check_op([](Tensor& t, const Tensor&, const Tensor& y) { t.div_(y); }));
  CHECK(check_op([](Tensor& t, const Tensor&, const Tensor&) { t.div_(4.0); }));
  CHECK(check_op([&](Tensor& t, const Tensor&, const Tensor&) { t.masked_fill_(m, 0.5); }));
  CHECK(check_op([](Tensor& t, const Tensor& x, const Tensor& y) { t.copy_(x * y); }));
  CHECK(check_op([](Tensor& t, const Tensor& x, const Tensor& y) {
    t.zero_();
    t.add_(x.tanh() * y);
  }));
  CHECK(check_op([](Tensor& t, const Tensor& x, const Tensor&) {
    t.fill_(1.0);
    t.mul_(x);
  }));
  // The tensor itself as the operand stands for its old values.
  CHECK(check_op([](Tensor& t, const Tensor&, const Tensor&) { t.mul_(t); }));
  CHECK(check_op([](Tensor& t, const Tensor&, const Tensor&) { t.add_(t, 0.5); }));
  CHECK(check_op([](Tensor& t, const Tensor&, const Tensor& y) {
    t.add_(y);
    t.div_(t);  // 1 everywhere: a zero gradient
  }));
}

TEST_CASE("inplace: modifying a tensor saved for backward makes backward throw") {
  SUBCASE("an input saved by mul") {
    Tensor x = f64({1, 2}, true);
    Tensor h = x * 1.0;
    Tensor y = (h * x).sum();  // mul saves h
    h.add_(1.0);
    std::string msg = error_message([&] { y.backward(); });
    CHECK(contains(msg, "'mul'"));
    CHECK(contains(msg, "in-place"));
    CHECK(contains(msg, "[2]"));
  }
  SUBCASE("an output saved by exp") {
    Tensor x = f64({1, 2}, true);
    Tensor e = x.exp();  // exp saves its output
    Tensor y = e.sum();
    {
      NoGradGuard no_grad;
      e.mul_(2.0);
    }
    std::string msg = error_message([&] { y.backward(); });
    CHECK(contains(msg, "'exp'"));
    CHECK(contains(msg, "in-place"));
  }
  SUBCASE("an output saved by exp, changed inside the graph") {
    Tensor x = f64({1, 2}, true);
    Tensor e = x.exp();
    e.add_(1.0);
    Tensor y = e.sum();
    CHECK(contains(error_message([&] { y.backward(); }), "'exp'"));
  }
  SUBCASE("a leaf saved by matmul, changed under no-grad") {
    Tensor w = tensor({{1.0, 2.0}, {3.0, 4.0}}, TensorOptions(kFloat64).requires_grad());
    Tensor x = f64({1, 1}, true);
    Tensor y = w.matmul(x).sum();
    {
      NoGradGuard no_grad;
      w.sub_(f64({1}));
    }
    CHECK(contains(error_message([&] { y.backward(); }), "'matmul'"));
  }
  SUBCASE("a change through a view of the saved tensor") {
    Tensor x = f64({1, 2, 3}, true);
    Tensor h = x.exp();
    Tensor y = h.sum();
    {
      NoGradGuard no_grad;
      h.narrow(0, 1, 1).zero_();
    }
    CHECK(contains(error_message([&] { y.backward(); }), "'exp'"));
  }
  SUBCASE("an op that saves nothing does not care") {
    Tensor x = f64({1, 2}, true);
    Tensor h = x * 1.0;
    Tensor y = (h + x).sum();  // add saves nothing
    h.mul_(5.0);
    y.backward();
    CHECK(values(x.grad()) == V{2, 2});
  }
}

TEST_CASE("inplace: on a view inside the graph throws") {
  Tensor x = f64({1, 2, 3, 4}, true);
  Tensor h = x * 2.0;
  Tensor v = h.narrow(0, 1, 2);
  std::string msg = error_message([&] { v.mul_(3.0); });
  CHECK(contains(msg, "mul_"));
  CHECK(contains(msg, "view"));
}

TEST_CASE("inplace: an integer tensor refuses a floating result, as PyTorch") {
  Tensor counter = ones({3}, kInt64);
  counter.add_(1);  // a whole number stays an integer's
  counter.mul_(3);
  counter.add_(ones({3}, kInt64), 2);
  CHECK(counter.to_vector<int64_t>() == std::vector<int64_t>{8, 8, 8});
  // Each of these truncated silently: add_(2.5) gave 3, mul_(2.5) 2, div_(2.0) 0, add_(1.5s) 1.
  CHECK(contains(error_message([&] { counter.add_(2.5); }),
                 "add_: result type float32 (of the value 2.5) can't be cast to the desired output type int64"));
  CHECK(contains(error_message([&] { counter.mul_(2.5); }), "mul_: result type float32 (of the value 2.5)"));
  CHECK(contains(error_message([&] { counter.add_(INFINITY); }), "add_: result type float32 (of the value inf)"));
  CHECK(contains(error_message([&] { counter.add_(full({3}, 1.5)); }),
                 "add_: result type float32 can't be cast to the desired output type int64"));
  CHECK(contains(error_message([&] { counter.sub_(full({3}, 1.0, kFloat64)); }),
                 "sub_: result type float64 can't be cast to the desired output type int64"));
  CHECK(contains(error_message([&] { counter.mul_(full({3}, 2.0)); }), "mul_: result type float32 can't be cast"));
  CHECK(contains(error_message([&] { counter.add_(ones({3}, kInt64), 0.5); }),
                 "add_: alpha 0.5 must be a whole number, as the result keeps the dtype int64"));
  CHECK(contains(error_message([&] { counter.div_(2.0); }),
                 "div_: result type float32 can't be cast to the desired output type int64"));
  CHECK(contains(error_message([&] { counter.div_(ones({3}, kInt64)); }), "div_: result type float32 can't be cast"));
  CHECK(counter.to_vector<int64_t>() == std::vector<int64_t>{8, 8, 8});
  // A floating tensor takes an integer operand, and a fractional alpha scales it as a fraction.
  Tensor f = zeros({2}, kFloat64);
  f.add_(tensor(std::vector<int64_t>{1, 2}, {2}), 2.5);
  CHECK(values(f) == V{2.5, 5});
}

TEST_CASE("inplace: a written-to tensor whose elements share memory is refused, as PyTorch") {
  Tensor row = zeros({1, 3});
  Tensor rows = row.expand({2, 3});
  const std::string message = "more than one element of the written-to tensor (shape [2,3], strides [0,1]) refers to a "
                              "single memory location. Please clone() the tensor before performing the operation.";
  CHECK(contains(error_message([&] { rows.copy_(tensor({{1, 2, 3}, {4, 5, 6}})); }), "copy_: unsupported operation: " + message));
  CHECK(contains(error_message([&] { rows.add_(ones({2, 3})); }), "add_: unsupported operation: " + message));
  CHECK(contains(error_message([&] { rows.mul_(2.0); }), "mul_: unsupported operation"));
  CHECK(row.to_vector<float>() == std::vector<float>{0, 0, 0});
  // One value written to every element is well defined, and PyTorch takes it.
  rows.fill_(4.0);
  rows.masked_fill_(tensor({1, 0, 0}, kBool), 5.0);
  CHECK(row.to_vector<float>() == std::vector<float>{5, 4, 4});
}

TEST_CASE("inplace: an operand in the memory written reads the values from before the op") {
  // The elementwise result from the old values, as the op gives inside a graph (PyTorch refuses).
  Tensor a = arange(4, kFloat64);
  a.slice(0, 1, 4).copy_(a.slice(0, 0, 3));  // left [0, 0, 0, 0], each read after its write
  CHECK(values(a) == V{0, 0, 1, 2});
  Tensor b = arange(4, kFloat64);
  b.slice(0, 0, 3).add_(b.slice(0, 1, 4));
  CHECK(values(b) == V{1, 3, 5, 3});
  Tensor c = arange(4, kFloat64).reshape({2, 2});
  c.add_(c.select(0, 1));  // row 1 broadcast over both rows, row 1 itself among them
  CHECK(values(c) == V{2, 4, 4, 6});
  Tensor d = arange(4, kFloat64).reshape({2, 2});
  d.copy_(d.t());  // a transpose in place
  CHECK(values(d) == V{0, 2, 1, 3});
  Tensor e = arange(3, kFloat64);
  e.mul_(e);  // the same elements in the same order need no copy
  CHECK(values(e) == V{0, 1, 4});
}
