// gradcheck and gradgradcheck of logsumexp (every dim list, with and without keepdim), and of
// the values of sort and topk along every dim, on contiguous and non-contiguous float64 inputs.
// Random normal inputs have no ties (almost surely), so a small finite-difference step keeps
// every element in its place and sort and topk are differentiable there.
#include <doctest/doctest.h>

#include <limits>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using test::check1;
using test::gradgrad1;
using test::leaf;
using V = std::vector<double>;

using Dims = std::vector<int64_t>;
using test::kDimLists;

TEST_CASE("gradcheck logsumexp: every dim list, with and without keepdim, and its second derivative") {
  for (const Tensor& x : test::reduction_inputs(2700)) {
    for (const Dims& dims : kDimLists) {
      for (bool keepdim : {false, true}) {
        CAPTURE(shape_str(dims));
        CAPTURE(keepdim);
        CHECK(check1([&](const Tensor& a) { return a.logsumexp(dims, keepdim); }, x));
        CHECK(gradgrad1([&](const Tensor& a) { return logsumexp(a * a, dims, keepdim); }, x));
      }
    }
  }
  // Far from 0: exp(±500) alone would overflow or vanish; the max-shifted form does not.
  Tensor far = leaf({3, 5}, 2710);
  CHECK(check1([](const Tensor& a) { return (a + 500.0).logsumexp(1) - (500.0 - a).logsumexp(0).sum(); }, far));
  Tensor s = leaf({}, 2711);
  CHECK(check1([](const Tensor& a) { return a.logsumexp(0) * a; }, s));
}

TEST_CASE("logsumexp backward: softmax along the dim, a row that is -inf throughout gets 0") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = tensor({{0.0, std::log(3.0)}, {-inf, -inf}}, TensorOptions(kFloat64).requires_grad());
  Tensor y = x.logsumexp(1);
  CHECK(test::values(y) == V{std::log(4.0), -inf});
  (y * tensor({2.0, 5.0}, kFloat64)).sum().backward();
  // row 0: 2 · softmax(0, log 3) = 2 · (1/4, 3/4); row 1: 0 where PyTorch gives NaN
  CHECK(test::allclose(x.grad(), tensor({{0.5, 1.5}, {0.0, 0.0}}, kFloat64)));
}

TEST_CASE("gradcheck sort and topk: the values along every dim, both directions, and second derivatives") {
  for (const Tensor& x : test::reduction_inputs(2720)) {
    for (int64_t dim : {0, 1, 2, -1}) {
      for (bool flag : {false, true}) {
        CAPTURE(dim);
        CAPTURE(flag);
        // A weighted sum: the loss must depend on where each value lands.
        Tensor w = leaf(x.shape(), 2721).detach();
        CHECK(check1([&](const Tensor& a) { return (a.sort(dim, flag).values * w).sum(); }, x));
        CHECK(check1([&](const Tensor& a) { return sort(a, dim, flag).values.exp(); }, x));
        CHECK(gradgrad1([&](const Tensor& a) { return (a * a).sort(dim, flag).values; }, x));
        const int64_t k = x.size(dim) - 1;
        CHECK(check1([&](const Tensor& a) { return a.topk(k, dim, /*largest=*/flag).values.tanh(); }, x));
        CHECK(gradgrad1([&](const Tensor& a) { return topk(a * a, 1, dim, flag).values; }, x));
      }
    }
  }
}

TEST_CASE("sort and topk backward: the gradient goes back to where each value came from") {
  Tensor x = tensor({3.0, 1.0, 2.0, 5.0}, TensorOptions(kFloat64).requires_grad());
  auto [values, indices] = x.sort();
  CHECK(test::values(indices) == V{1, 2, 0, 3});
  CHECK_FALSE(indices.requires_grad());
  (values * tensor({1.0, 10.0, 100.0, 1000.0}, kFloat64)).sum().backward();
  CHECK(test::values(x.grad()) == V{100, 1, 10, 1000});
  x.zero_grad();
  (x.topk(2).values * tensor({1.0, 10.0}, kFloat64)).sum().backward();  // 5 then 3
  CHECK(test::values(x.grad()) == V{10, 0, 0, 1});
  CHECK_FALSE(x.argsort().requires_grad());  // indices carry no graph
}
