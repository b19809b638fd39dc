// gradcheck of matmul at every rank combination: 1-D with 1-D, 1-D with 2-D and N-D, 2-D,
// batched, and batch dims that broadcast; on contiguous and transposed operands.
#include <doctest/doctest.h>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using test::check1;
using test::check2;
using test::leaf;
using test::transposed;
using V = std::vector<double>;

namespace {
Tensor mm(const Tensor& a, const Tensor& b) { return matmul(a, b); }
}  // namespace

TEST_CASE("gradcheck matmul: every rank combination") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{4}, {4}},                  // dot product: a 0-d result
      {{4}, {4, 3}},               // vector-matrix
      {{3, 4}, {4}},               // matrix-vector
      {{3, 4}, {4, 2}},            // matrix-matrix
      {{2, 3, 4}, {2, 4, 5}},      // batched
      {{2, 3, 4}, {4, 5}},         // batched with a shared matrix
      {{3, 4}, {2, 4, 5}},         // a shared left matrix
      {{1, 3, 4}, {2, 4, 2}},      // batch dims of 1 broadcast
      {{2, 1, 3, 4}, {3, 4, 2}},   // batch dims broadcast both ways
      {{4}, {2, 4, 3}},            // vector with a batch
      {{2, 3, 4}, {4}},            // batch with a vector
      {{1, 4}, {4, 1}},            // 1x1 result
  };
  uint64_t seed = 2000;
  for (const auto& [sa, sb] : shapes) {
    CAPTURE(shape_str(sa));
    CAPTURE(shape_str(sb));
    Tensor a = leaf(sa, seed++);
    Tensor b = leaf(sb, seed++);
    CHECK(check2(mm, a, b));
    CHECK(check2([](const Tensor& x, const Tensor& y) { return x.matmul(y); }, a, b.detach()));  // only a
    CHECK(check2(mm, a.detach(), b));                                                               // only b
  }
}

TEST_CASE("gradcheck matmul: transposed and strided operands") {
  Tensor a = transposed(leaf({4, 3}, 2100));  // [3,4], strides [1,3]
  Tensor b = transposed(leaf({2, 4}, 2101));  // [4,2], strides [1,4]
  REQUIRE_FALSE(a.is_contiguous());
  CHECK(check2(mm, a, b));
  CHECK(check2([](const Tensor& x, const Tensor& y) { return x.t().matmul(x.matmul(y)); }, a, b));
  Tensor batch = leaf({2, 4, 3}, 2102);
  CHECK(check2([](const Tensor& x, const Tensor& y) { return x.mT().matmul(y); }, batch, leaf({2, 4, 5}, 2103)));
  CHECK(check1([](const Tensor& x) { return x.matmul(x.mT()); }, batch));  // the same tensor twice
  Tensor wide = leaf({3, 8}, 2104);
  CHECK(check2([](const Tensor& x, const Tensor& y) { return x.slice(1, 0, 8, 2).matmul(y); }, wide, b));
  Tensor v = leaf({8}, 2105);
  CHECK(check2([](const Tensor& x, const Tensor& y) { return x.slice(0, 1, 8, 2).matmul(y); }, v, b));
}

TEST_CASE("matmul backward: hand-computed values") {
  Tensor a = tensor({{1.0, 2.0}, {3.0, 4.0}}, TensorOptions(kFloat64).requires_grad());
  Tensor b = tensor({{5.0, 6.0}, {7.0, 8.0}}, TensorOptions(kFloat64).requires_grad());
  a.matmul(b).sum().backward();
  // d/dA Σ AB = 1 · Bᵀ (row sums of B), d/dB = Aᵀ · 1 (column sums of A)
  CHECK(test::values(a.grad()) == V{11, 15, 11, 15});
  CHECK(test::values(b.grad()) == V{4, 4, 6, 6});

  Tensor u = tensor({1.0, 2.0, 3.0}, TensorOptions(kFloat64).requires_grad());
  Tensor w = tensor({4.0, 5.0, 6.0}, TensorOptions(kFloat64).requires_grad());
  Tensor dot = u.matmul(w);
  CHECK(dot.shape() == Shape{});
  CHECK(dot.item() == 32);
  dot.backward();
  CHECK(test::values(u.grad()) == V{4, 5, 6});
  CHECK(test::values(w.grad()) == V{1, 2, 3});

  // A shared weight across a batch gets the sum over the batch.
  Tensor x = ones({3, 2, 2}, kFloat64);
  Tensor m = tensor({{1.0, 0.0}, {0.0, 1.0}}, TensorOptions(kFloat64).requires_grad());
  x.matmul(m).sum().backward();
  CHECK(m.grad().shape() == Shape{2, 2});
  CHECK(test::values(m.grad()) == V{6, 6, 6, 6});
}

// A tied head multiplies by Wᵀ, a transposed view of the embedding's table: matmul hands that
// view a gradient in its own layout, so W's gradient arrives contiguous and the embedding's adds
// into it in place. The values are the plain formula's, Aᵀ·dC summed over the batch.
TEST_CASE("matmul backward: a transposed weight gets its gradient in its own layout, values unchanged") {
  Generator gen(41);
  Tensor table = randn({7, 3}, kFloat64, gen).requires_grad_();  // (vocab, d)
  Tensor h = randn({2, 4, 3}, kFloat64, gen), dc = randn({2, 4, 7}, kFloat64, gen);
  Tensor tokens = tensor({1.0, 5.0, 5.0, 0.0}, kInt64);
  Tensor logits = h.matmul(table.t());  // (2, 4, vocab)
  ((logits * dc).sum() + table.index_select(0, tokens).sum()).backward();
  CHECK(table.grad().is_contiguous());
  // The product's own gradient for the view Wᵀ is laid out as Wᵀ is (columns contiguous).
  Tensor view = table.detach().requires_grad_().t();
  const Tensor d_view = autograd::grad({(h.matmul(view) * dc).sum()}, {view})[0];
  CHECK(d_view.stride(0) == 1);
  CHECK(test::max_abs_diff(d_view.t(), dc.reshape({-1, 7}).t().matmul(h.reshape({-1, 3}))) < 1e-12);
  Tensor expected = dc.reshape({-1, 7}).t().matmul(h.reshape({-1, 3})).contiguous();  // (vocab, d)
  for (int64_t row : {1, 5, 5, 0}) expected.select(0, row).add_(ones({3}, kFloat64));
  CHECK(test::max_abs_diff(table.grad(), expected) < 1e-12);
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return in[0].matmul(in[1].t()); },
                  {leaf({2, 4, 3}, 2210), leaf({7, 3}, 2211)}));
}

// linear(x, W, b) = x·Wᵀ + b is one op with its own backward (the bias goes into the GEMM).
TEST_CASE("gradcheck linear: ranks, bias or none, strided input, and its second derivative") {
  using Inputs = std::vector<Tensor>;
  auto with_bias = [](const Inputs& in) { return linear(in[0], in[1], in[2]); };
  auto no_bias = [](const Inputs& in) { return linear(in[0], in[1]); };
  const Tensor w = leaf({3, 4}, 2200), b = leaf({3}, 2201);
  for (const Shape& sx : {Shape{4}, Shape{5, 4}, Shape{2, 5, 4}}) {
    CAPTURE(shape_str(sx));
    const Tensor x = leaf(sx, 2202);
    CHECK(gradcheck(with_bias, {x, w, b}));
    CHECK(gradcheck(no_bias, {x, w}));
    CHECK(gradcheck(with_bias, {x.detach(), w, b}));  // parameters only, as in a first layer
  }
  CHECK(gradcheck(with_bias, {transposed(leaf({4, 5}, 2203)), transposed(leaf({4, 3}, 2204)), b}));
  CHECK(gradgradcheck(with_bias, {leaf({2, 4}, 2205), w, b}));
  // the same values as matmul plus bias
  const Tensor x = leaf({2, 5, 4}, 2206);
  CHECK(test::allclose(linear(x, w, b), x.matmul(w.t()) + b));
  CHECK_THROWS_AS(linear(leaf({2, 3}, 1), w, b), Error);
  CHECK_THROWS_AS(linear(x, w, leaf({4}, 1)), Error);
}
