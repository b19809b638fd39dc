// gradcheck of joining, indexing and selection: cat, stack, index_select, gather, index_add,
// scatter_add, slice_scatter, where and masked_fill; with repeated indices (whose gradients
// must accumulate), broadcast masks and conditions, and non-contiguous inputs.
#include <doctest/doctest.h>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using test::check1;
using test::check2;
using test::index;
using test::leaf;
using test::transposed;
using V = std::vector<double>;

TEST_CASE("gradcheck index: cat along every dim") {
  Tensor a = leaf({2, 3}, 3000);
  Tensor b = leaf({2, 1}, 3001);
  Tensor c = transposed(leaf({2, 2}, 3002));  // non-contiguous [2,2]
  auto cat3 = [](const std::vector<Tensor>& in) { return cat({in[0], in[1], in[2]}, 1).exp(); };
  CHECK(gradcheck(cat3, {a, b, c}));
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return cat({in[0], in[1]}, -1); }, {a, b}));
  Tensor d = leaf({1, 3}, 3003);
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return cat({in[0], in[1], in[0]}, 0).tanh(); }, {a, d}));
  // Inputs that do not require grad get no gradient, the others still do.
  Tensor k = leaf({2, 3}, 3004).detach();
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return cat({k, in[0]}, 0).exp(); }, {a}));
  CHECK(check1([](const Tensor& x) { return cat({x}, 0); }, leaf({3}, 3005)));
}

TEST_CASE("gradcheck index: stack along every dim") {
  Tensor a = leaf({2, 3}, 3100);
  Tensor b = transposed(leaf({3, 2}, 3101));
  for (int64_t dim : {0, 1, 2, -1}) {
    CAPTURE(dim);
    CHECK(check2([&](const Tensor& x, const Tensor& y) { return stack({x, y, x}, dim).exp(); }, a, b));
  }
  Tensor s = leaf({}, 3102);
  CHECK(check1([](const Tensor& x) { return stack({x, x * 2.0}, 0); }, s));
}

TEST_CASE("gradcheck index: index_select with repeated indices") {
  Tensor x = leaf({4, 3}, 3200);
  for (const Tensor& in : {x, transposed(leaf({3, 4}, 3201))}) {
    CHECK(check1([](const Tensor& t) { return t.index_select(0, index({2, 0, 2, 3})).exp(); }, in));
    CHECK(check1([](const Tensor& t) { return t.index_select(1, index({1, 1})).tanh(); }, in));
    CHECK(check1([](const Tensor& t) { return t.index_select(-1, index({2, 0})); }, in));
    CHECK(check1([](const Tensor& t) { return t.index_select(0, index({3, 0, 3})).exp(); }, in));
    CHECK(check1([](const Tensor& t) { return t.index_select(0, tensor(std::vector<int64_t>{1}, {})).exp(); }, in));
  }
  CHECK(x.index_select(0, tensor(std::vector<int64_t>{1}, {})).shape() == Shape{1, 3});  // keeps the dim
  Tensor v = tensor({1.0, 2.0, 3.0}, TensorOptions(kFloat64).requires_grad());
  v.index_select(0, index({0, 0, 2, 0})).sum().backward();
  CHECK(test::values(v.grad()) == V{3, 0, 1});
}

TEST_CASE("gradcheck index: gather along each dim") {
  Tensor x = leaf({3, 4}, 3300);
  Tensor idx1 = index({0, 3, 3, 1, 2, 2, 0, 0, 1}, {3, 3});  // dim 1, repeats
  Tensor idx0 = index({2, 0, 1, 0, 2, 2, 1, 0}, {2, 4});     // dim 0, fewer rows than x
  for (const Tensor& in : {x, transposed(leaf({4, 3}, 3301))}) {
    CHECK(check1([&](const Tensor& t) { return t.gather(1, idx1).exp(); }, in));
    CHECK(check1([&](const Tensor& t) { return t.gather(0, idx0).tanh(); }, in));
    CHECK(check1([&](const Tensor& t) { return t.gather(-1, idx1); }, in));
  }
  Tensor y = leaf({2, 3, 4}, 3302);
  Tensor idx2 = index({0, 1, 1, 0, 2, 2, 0, 0, 1, 2, 1, 1}, {2, 3, 2});
  CHECK(check1([&](const Tensor& t) { return t.gather(2, idx2).exp(); }, y));
  Tensor v = tensor({{1.0, 2.0}, {3.0, 4.0}}, TensorOptions(kFloat64).requires_grad());
  v.gather(1, index({1, 1, 0, 1}, {2, 2})).sum().backward();
  CHECK(test::values(v.grad()) == V{0, 2, 1, 1});
}

TEST_CASE("gradcheck index: index_add for base and source") {
  Tensor base = leaf({4, 3}, 3400);
  Tensor src = leaf({5, 3}, 3401);
  Tensor idx = index({1, 3, 1, 0, 1});  // repeats accumulate
  CHECK(check2([&](const Tensor& b, const Tensor& s) { return index_add(b, 0, idx, s).exp(); }, base, src));
  Tensor src1 = transposed(leaf({2, 4}, 3402));  // [4,2] non-contiguous
  CHECK(check2([&](const Tensor& b, const Tensor& s) { return index_add(b, 1, index({2, 2}), s).tanh(); }, base,
               src1));
  CHECK(check1([&](const Tensor& s) { return index_add(zeros({4, 3}, kFloat64), 0, idx, s); }, src));
  Tensor b = zeros({3}, TensorOptions(kFloat64).requires_grad());
  Tensor s = tensor({1.0, 2.0, 3.0}, TensorOptions(kFloat64).requires_grad());
  (index_add(b, 0, index({2, 0, 2}), s) * tensor({10.0, 20.0, 30.0}, kFloat64)).sum().backward();
  CHECK(test::values(b.grad()) == V{10, 20, 30});
  CHECK(test::values(s.grad()) == V{30, 10, 30});
}

TEST_CASE("gradcheck index: scatter_add for base and source") {
  Tensor base = leaf({3, 4}, 3500);
  Tensor src = leaf({3, 3}, 3501);
  Tensor idx1 = index({0, 3, 3, 1, 2, 2, 0, 0, 1}, {3, 3});
  CHECK(check2([&](const Tensor& b, const Tensor& s) { return scatter_add(b, 1, idx1, s).exp(); }, base, src));
  Tensor src0 = leaf({2, 4}, 3502);
  Tensor idx0 = index({2, 0, 1, 0, 2, 2, 1, 0}, {2, 4});
  CHECK(check2([&](const Tensor& b, const Tensor& s) { return scatter_add(b, 0, idx0, s).tanh(); }, base, src0));
  CHECK(check2([&](const Tensor& b, const Tensor& s) { return scatter_add(b, 0, idx0, s); }, transposed(leaf({4, 3}, 3503)),
               transposed(leaf({4, 2}, 3504))));
}

TEST_CASE("gradcheck index: slice_scatter with a step") {
  Tensor src = leaf({3, 2}, 3600);
  CHECK(check1([](const Tensor& s) { return slice_scatter(s, {3, 5}, 1, 1, 2).exp(); }, src));
  CHECK(check1([](const Tensor& s) { return slice_scatter(s, {3, 2}, 1, 0, 1); }, src));
  CHECK(check1([](const Tensor& s) { return slice_scatter(s, {7, 2}, 0, 0, 3).tanh(); }, src));
  CHECK(check1([](const Tensor& s) { return slice_scatter(s, {3, 6}, -1, 4, 1); }, transposed(leaf({2, 3}, 3601))));
  Tensor v = tensor({1.0, 2.0}, TensorOptions(kFloat64).requires_grad());
  Tensor out = slice_scatter(v, {5}, 0, 1, 3);
  CHECK(test::values(out) == V{0, 1, 0, 0, 2});
  (out * tensor({1.0, 2.0, 3.0, 4.0, 5.0}, kFloat64)).sum().backward();
  CHECK(test::values(v.grad()) == V{2, 5});
}

TEST_CASE("gradcheck index: where with broadcast condition and operands") {
  Tensor cond = test::mask({{1, 0, 0, 1}, {0, 1, 1, 0}, {1, 1, 0, 0}});  // [3,4]
  Tensor a = leaf({3, 4}, 3700);
  Tensor b = leaf({4}, 3701);
  CHECK(check2([&](const Tensor& x, const Tensor& y) { return where(cond, x, y).exp(); }, a, b));
  Tensor row_cond = test::mask({{1, 0, 1, 0}}).reshape({4});
  CHECK(check2([&](const Tensor& x, const Tensor& y) { return where(row_cond, x, y); }, transposed(leaf({4, 3}, 3702)),
               leaf({3, 1}, 3703)));
  Tensor s = leaf({}, 3704);
  CHECK(check2([&](const Tensor& x, const Tensor& y) { return where(cond, x, y).tanh(); }, s, a));
  CHECK(check1([&](const Tensor& x) { return where(x.gt(zeros({}, kFloat64)), x, x * x); }, test::away_from_zero_leaf({3, 4}, 3705)));
}

TEST_CASE("gradcheck index: masked_fill with a broadcast mask") {
  Tensor m = test::mask({{0, 1, 1, 0}, {1, 0, 0, 0}, {0, 0, 1, 1}});
  Tensor x = leaf({3, 4}, 3800);
  CHECK(check1([&](const Tensor& t) { return t.masked_fill(m, -1.5).exp(); }, x));
  Tensor row = test::mask({{1, 0, 0, 1}});
  CHECK(check1([&](const Tensor& t) { return t.masked_fill(row, 0.0).tanh(); }, transposed(leaf({4, 3}, 3801))));
  // A mask larger than the tensor broadcasts the output up; the gradient is summed back.
  CHECK(check1([&](const Tensor& t) { return t.masked_fill(m, 1.0); }, leaf({4}, 3802)));
  Tensor v = tensor({1.0, 2.0, 3.0}, TensorOptions(kFloat64).requires_grad());
  Tensor out = v.masked_fill(test::mask({{0, 1, 0}}).reshape({3}), 9.0);
  CHECK(test::values(out) == V{1, 9, 3});
  (out * 2.0).sum().backward();
  CHECK(test::values(v.grad()) == V{2, 0, 2});
}
