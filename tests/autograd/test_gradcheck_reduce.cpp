// gradcheck of the reductions (sum, mean, var, max, min, sum_to) over every dim list, with and
// without keepdim, and of softmax and log_softmax along every dim; on contiguous and
// non-contiguous inputs. Random float64 inputs have no ties, so max and min are differentiable.
#include <doctest/doctest.h>

#include <string>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using test::check1;
using test::leaf;
using test::transposed;
using V = std::vector<double>;

using Dims = std::vector<int64_t>;
using test::kDimLists;

TEST_CASE("gradcheck reduce: sum over every dim list with and without keepdim") {
  for (const Tensor& x : test::reduction_inputs(1000)) {
    CHECK(check1([](const Tensor& a) { return a.sum(); }, x));
    CHECK(check1([](const Tensor& a) { return (a * a).sum(); }, x));
    for (const Dims& dims : kDimLists) {
      for (bool keepdim : {false, true}) {
        CAPTURE(shape_str(dims));
        CAPTURE(keepdim);
        CHECK(check1([&](const Tensor& a) { return a.sum(dims, keepdim).tanh(); }, x));
      }
    }
  }
}

TEST_CASE("gradcheck reduce: mean over every dim list with and without keepdim") {
  for (const Tensor& x : test::reduction_inputs(1100)) {
    CHECK(check1([](const Tensor& a) { return a.mean().exp(); }, x));
    for (const Dims& dims : kDimLists) {
      for (bool keepdim : {false, true}) {
        CAPTURE(shape_str(dims));
        CAPTURE(keepdim);
        CHECK(check1([&](const Tensor& a) { return a.mean(dims, keepdim).exp(); }, x));
      }
    }
  }
}

TEST_CASE("gradcheck reduce: var over every dim list and correction") {
  for (const Tensor& x : test::reduction_inputs(1200)) {
    CHECK(check1([](const Tensor& a) { return a.var(); }, x));
    for (const Dims& dims : kDimLists) {
      for (int64_t correction : {0, 1}) {
        for (bool keepdim : {false, true}) {
          CAPTURE(shape_str(dims));
          CAPTURE(correction);
          CAPTURE(keepdim);
          CHECK(check1([&](const Tensor& a) { return a.var(dims, correction, keepdim); }, x));
        }
      }
    }
  }
}

TEST_CASE("gradcheck reduce: max and min over all elements and along a dim") {
  for (const Tensor& x : test::reduction_inputs(1300)) {
    CHECK(check1([](const Tensor& a) { return a.max(); }, x));
    CHECK(check1([](const Tensor& a) { return a.min() * a.max(); }, x));
    for (int64_t dim : {0, 1, 2, -1}) {
      for (bool keepdim : {false, true}) {
        CAPTURE(dim);
        CAPTURE(keepdim);
        CHECK(check1([&](const Tensor& a) { return a.max(dim, keepdim).values.exp(); }, x));
        CHECK(check1([&](const Tensor& a) { return a.min(dim, keepdim).values.tanh(); }, x));
      }
    }
  }
  Tensor v = leaf({5}, 1310);
  CHECK(check1([](const Tensor& a) { return a.max(0).values; }, v));
  CHECK(check1([](const Tensor& a) { return a.min(0, true).values; }, v));
  Tensor s = leaf({}, 1311);
  CHECK(check1([](const Tensor& a) { return a.max() + a.min(); }, s));
}

TEST_CASE("reduce backward: hand-computed values") {
  Tensor x = tensor({{1.0, 5.0, 3.0}, {4.0, 2.0, 6.0}}, TensorOptions(kFloat64).requires_grad());
  x.max().backward();  // 6 at [1,2]
  CHECK(test::values(x.grad()) == V{0, 0, 0, 0, 0, 1});
  x.zero_grad();
  // Tied extremes share dC evenly, as in PyTorch: torch.tensor([3., 1, 3]).max().backward() gives
  // grad [0.5, 0, 0.5] (and the NaNs share it when the result is NaN: test_nan_inf.cpp).
  Tensor tied = tensor({3.0, 1.0, 3.0}, TensorOptions(kFloat64).requires_grad());
  tied.max().backward();
  CHECK(test::values(tied.grad()) == V{0.5, 0, 0.5});
  tied.zero_grad();
  (tied * 1.0).min().backward();
  CHECK(test::values(tied.grad()) == V{0, 1, 0});
  auto [values, indices] = x.max(1);
  CHECK(test::values(values) == V{5, 6});
  CHECK_FALSE(indices.requires_grad());
  (values * tensor({10.0, 100.0}, kFloat64)).sum().backward();
  CHECK(test::values(x.grad()) == V{0, 10, 0, 0, 0, 100});
  x.zero_grad();
  x.min(0, true).values.sum().backward();  // picks 1, 2, 3
  CHECK(test::values(x.grad()) == V{1, 0, 1, 0, 1, 0});
  x.zero_grad();
  x.mean({1}).sum().backward();
  CHECK(test::allclose(x.grad(), full({2, 3}, 1.0 / 3, kFloat64)));
  x.zero_grad();
  // var of (1,5,3) with correction 1: mean 3, d/dx_i = 2 (x_i - 3) / 2 = x_i - 3
  x.var({1}).select(0, 0).backward();
  CHECK(test::values(x.grad()) == V{-2, 2, 0, 0, 0, 0});
}

TEST_CASE("gradcheck reduce: softmax and log_softmax along every dim") {
  for (const Tensor& x : test::reduction_inputs(1400)) {
    for (int64_t dim : {0, 1, 2, -1}) {
      CAPTURE(dim);
      // A weighted sum makes the output's gradient not constant along dim (else it would vanish).
      Tensor w = leaf({2, 3, 4}, 1401).detach();
      CHECK(check1([&](const Tensor& a) { return a.softmax(dim); }, x));
      CHECK(check1([&](const Tensor& a) { return (softmax(a, dim) * w).sum(); }, x));
      CHECK(check1([&](const Tensor& a) { return a.log_softmax(dim); }, x));
      CHECK(check1([&](const Tensor& a) { return (log_softmax(a, dim) * w).sum(); }, x));
    }
  }
  Tensor v = leaf({6}, 1402);
  CHECK(check1([](const Tensor& a) { return (a * 3.0).softmax(0); }, v));
  CHECK(check1([](const Tensor& a) { return a.log_softmax(-1); }, v));
}

TEST_CASE("gradcheck reduce: sum_to every shape that broadcasts up") {
  const std::vector<Shape> targets = {{2, 3, 4}, {3, 4}, {4}, {3, 1}, {1, 3, 1}, {2, 1, 4}, {1}, {}};
  for (const Tensor& x : test::reduction_inputs(1500)) {
    for (const Shape& target : targets) {
      CAPTURE(shape_str(target));
      CHECK(check1([&](const Tensor& a) { return sum_to(a, target).exp(); }, x));
    }
  }
}

TEST_CASE("reductions of a 0-d tensor over dim 0 or -1 return it, and its gradient, as in PyTorch") {
  // torch.tensor(3.).sum(0) is tensor(3.): a 0-d tensor takes dims 0 and -1 and has none to reduce.
  // Once a write through an empty plan (a crash).
  const Tensor x = tensor({3.0}, kFloat64).reshape({}).detach().requires_grad_();
  for (int64_t dim : {0, -1}) {
    CAPTURE(dim);
    for (bool keepdim : {false, true}) {
      CHECK(x.sum(dim, keepdim).item<double>() == 3.0);
      CHECK(x.sum(dim, keepdim).dim() == 0);
      CHECK(x.mean(std::vector<int64_t>{dim}, keepdim).item<double>() == 3.0);
      CHECK(x.max(dim, keepdim).values.item<double>() == 3.0);
      CHECK(x.logsumexp(std::vector<int64_t>{dim}, keepdim).item<double>() == 3.0);
    }
    CHECK(check1([&](const Tensor& a) { return a.sum(dim).tanh(); }, x));
    CHECK(check1([&](const Tensor& a) { return a.mean(std::vector<int64_t>{dim}).exp(); }, x));
    CHECK(check1([&](const Tensor& a) { return a.max(dim).values.tanh(); }, x));
    CHECK(check1([&](const Tensor& a) { return a.logsumexp(std::vector<int64_t>{dim}).tanh(); }, x));
    CHECK(check1([&](const Tensor& a) { return a.softmax(dim) * a; }, x));
  }
  CHECK_THROWS_WITH_AS(x.sum(1), "sum: dim 1 out of range for a tensor of 0 dims (expected -1 to 0)", Error);
}
