// Binary kernels with NumPy broadcasting, dtype promotion, comparisons, where and masked_fill.
#include <algorithm>
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// [[1, 2, 3], [4, 5, 6]]
Tensor two_by_three(DType dtype = kFloat32) { return tensor({{1, 2, 3}, {4, 5, 6}}, dtype); }
}  // namespace

TEST_CASE("binary: same-shape arithmetic") {
  Tensor a = two_by_three(), b = tensor({{6, 5, 4}, {3, 2, 1}});
  CHECK(mismatch(a + b, {2, 3}, {7, 7, 7, 7, 7, 7}) == "");
  CHECK(mismatch(a - b, {2, 3}, {-5, -3, -1, 1, 3, 5}) == "");
  CHECK(mismatch(a * b, {2, 3}, {6, 10, 12, 12, 10, 6}) == "");
  CHECK(mismatch(a / b, {2, 3}, {1.0 / 6, 0.4, 0.75, 4.0 / 3, 2.5, 6}) == "");
  CHECK(mismatch(maximum(a, b), {2, 3}, {6, 5, 4, 4, 5, 6}) == "");
  CHECK(mismatch(minimum(a, b), {2, 3}, {1, 2, 3, 3, 2, 1}) == "");
  CHECK(mismatch_with(add(a, b), a + b) == "");
  CHECK(mismatch_with(sub(a, b), a - b) == "");
  CHECK(mismatch_with(mul(a, b), a * b) == "");
  CHECK(mismatch_with(div(a, b), a / b) == "");
  CHECK(mismatch_with(a.maximum(b), maximum(a, b)) == "");
  CHECK(mismatch_with(a.minimum(b), minimum(a, b)) == "");
}

TEST_CASE("binary: NumPy broadcasting of rows columns and leading dims") {
  Tensor a = two_by_three();
  Tensor row = tensor({10, 20, 30});
  Tensor col = tensor({1, 2}).reshape({2, 1});
  CHECK(mismatch(a + row, {2, 3}, {11, 22, 33, 14, 25, 36}) == "");
  CHECK(mismatch(row + a, {2, 3}, {11, 22, 33, 14, 25, 36}) == "");
  CHECK(mismatch(a - col, {2, 3}, {0, 1, 2, 2, 3, 4}) == "");
  CHECK(mismatch(a / tensor({1, 2, 4}), {2, 3}, {1, 1, 0.75, 4, 2.5, 1.5}) == "");
  // [3,1] * [4] -> [3,4]: an outer product
  Tensor outer = tensor({1, 2, 3}).reshape({3, 1}) * tensor({1, 10, 100, 1000});
  CHECK(mismatch(outer, {3, 4}, {1, 10, 100, 1000, 2, 20, 200, 2000, 3, 30, 300, 3000}) == "");
  // [2,1,3] + [4,1] -> [2,4,3]
  Tensor c = arange(6).to(kFloat32).reshape({2, 1, 3}) + arange(4).to(kFloat32).reshape({4, 1}) * 10.0;
  CHECK(c.shape() == Shape{2, 4, 3});
  CHECK(c.at<float>({1, 2, 0}) == 3 + 20);
  CHECK(c.at<float>({0, 3, 2}) == 2 + 30);
  // A 0-d operand broadcasts to anything.
  CHECK(mismatch(a * scalar_tensor(-1), {2, 3}, {-1, -2, -3, -4, -5, -6}) == "");
  CHECK(mismatch(maximum(a, tensor({3, 5}).reshape({2, 1})), {2, 3}, {3, 3, 3, 5, 5, 6}) == "");
  CHECK(mismatch(minimum(a, tensor({3, 5}).reshape({2, 1})), {2, 3}, {1, 2, 3, 4, 5, 5}) == "");
  // Size-0 dims broadcast like any other.
  CHECK((zeros({0, 3}) + row).shape() == Shape{0, 3});
}

TEST_CASE("binary: scalar operands keep the tensor's dtype") {
  Tensor a = two_by_three(kFloat64);
  CHECK(mismatch(a * 2.0, {2, 3}, {2, 4, 6, 8, 10, 12}) == "");
  CHECK((a * 2.0).dtype() == kFloat64);
  CHECK(mismatch(1.0 - a, {2, 3}, {0, -1, -2, -3, -4, -5}) == "");
  CHECK(mismatch(12.0 / a, {2, 3}, {12, 6, 4, 3, 2.4, 2}) == "");
  CHECK(mismatch(a / 2.0, {2, 3}, {0.5, 1, 1.5, 2, 2.5, 3}) == "");
  CHECK(mismatch(a + 0.5, {2, 3}, {1.5, 2.5, 3.5, 4.5, 5.5, 6.5}) == "");
  CHECK(mismatch(3.0 * a - 1.0, {2, 3}, {2, 5, 8, 11, 14, 17}) == "");
  CHECK(mismatch_with(2.0 + a, a + 2.0) == "");

  Tensor i = arange(4);
  CHECK((i * 3.0).dtype() == kInt64);
  CHECK((i * 3.0).to_vector<int64_t>() == std::vector<int64_t>{0, 3, 6, 9});
  CHECK((i * 0.5).dtype() == kFloat32);  // a fractional scalar makes an integer tensor float
  CHECK(mismatch(i * 0.5, {4}, {0, 0.5, 1, 1.5}) == "");
}

TEST_CASE("binary: dtype promotion") {
  Tensor f32 = tensor({1.5, 2}), f64 = tensor({0.25, 0.5}, kFloat64), i64 = tensor({2, 3}, kInt64);
  Tensor b = tensor({1, 0}, kBool);
  CHECK((f32 + f64).dtype() == kFloat64);
  CHECK((f64 + f32).dtype() == kFloat64);
  CHECK(mismatch(f32 + f64, {2}, {1.75, 2.5}) == "");
  CHECK((f32 * i64).dtype() == kFloat32);
  CHECK(mismatch(f32 * i64, {2}, {3, 6}) == "");
  CHECK((i64 + i64).dtype() == kInt64);
  CHECK((i64 + i64).to_vector<int64_t>() == std::vector<int64_t>{4, 6});
  CHECK((i64 * b).dtype() == kInt64);
  CHECK((i64 * b).to_vector<int64_t>() == std::vector<int64_t>{2, 0});
  CHECK(maximum(f32, f64).dtype() == kFloat64);
  // Division of integers is true division, as torch.div.
  Tensor q = tensor({1, 2, 3}, kInt64) / tensor({2, 2, 2}, kInt64);
  CHECK(q.dtype() == kFloat32);
  CHECK(mismatch(q, {3}, {0.5, 1, 1.5}) == "");
}

TEST_CASE("binary: int64 add, sub and mul wrap in two's complement, as PyTorch's") {
  for (bool reference : {true, false}) {
    ReferenceModeGuard mode(reference);
    INFO((reference ? "reference mode" : "fast forms"));
    Tensor big = tensor(std::vector<int64_t>{INT64_MAX, INT64_MIN, 5}, {3});
    CHECK((big + 1).to_vector<int64_t>() == std::vector<int64_t>{INT64_MIN, INT64_MIN + 1, 6});
    CHECK((big - 1).to_vector<int64_t>() == std::vector<int64_t>{INT64_MAX - 1, INT64_MAX, 4});
    CHECK((big * 2).to_vector<int64_t>() == std::vector<int64_t>{-2, 0, 10});
    Tensor in_place = big.clone();
    in_place.add_(big);
    CHECK(in_place.to_vector<int64_t>() == std::vector<int64_t>{-2, 0, 10});
  }
}

TEST_CASE("binary: a 0-d tensor promotes only to a higher kind, as torch.result_type") {
  // PyTorch: torch.ones(2) + torch.tensor(0.25, dtype=torch.float64) is float32.
  Tensor f32 = tensor({1.5, 2}), i64 = tensor({2, 3}, kInt64), b = tensor({1, 0}, kBool);
  Tensor f64_0d = full({}, 0.25, kFloat64), i64_0d = full({}, 2, kInt64);
  CHECK((f32 + f64_0d).dtype() == kFloat32);
  CHECK((f64_0d * f32).dtype() == kFloat32);
  CHECK(mismatch(f32 + f64_0d, {2}, {1.75, 2.25}) == "");
  CHECK((i64 + f64_0d).dtype() == kFloat64);  // floating is a higher kind than integer
  CHECK(mismatch(i64 + f64_0d, {2}, {2.25, 3.25}) == "");
  CHECK((b + i64_0d).dtype() == kInt64);
  CHECK((i64 * full({}, 1, kBool)).dtype() == kInt64);
  CHECK((full({}, 1.0, kFloat32) + f64_0d).dtype() == kFloat64);  // both 0-d: the usual ranks
  CHECK((tensor({1.0}, kFloat64) + full({}, 1.0, kFloat32)).dtype() == kFloat64);
  CHECK(where(b, f32, f64_0d).dtype() == kFloat32);
  CHECK(f32.gt(f64_0d).to_vector<bool>() == std::vector<bool>{true, true});
  // The gradient of the 0-d float64 operand comes back float64 and 0-d: dS = Σ x.
  Tensor x = tensor({1.5, 2}).requires_grad_(), s = full({}, 0.25, kFloat64).requires_grad_();
  (x * s).sum().backward();
  CHECK(s.grad().dtype() == kFloat64);
  CHECK(s.grad().dim() == 0);
  CHECK(s.grad().item() == doctest::Approx(3.5));
  CHECK(x.grad().dtype() == kFloat32);
}

TEST_CASE("binary: maximum and minimum propagate NaN") {
  Tensor a = tensor({kNaN, 1, 2}), b = tensor({1, kNaN, 3});
  CHECK(mismatch(maximum(a, b), {3}, {kNaN, kNaN, 3}) == "");
  CHECK(mismatch(minimum(a, b), {3}, {kNaN, kNaN, 2}) == "");
}

TEST_CASE("binary: non-contiguous operands") {
  Tensor a = two_by_three();
  Tensor at = a.t();  // [[1, 4], [2, 5], [3, 6]]
  Tensor b = tensor({{10, 20}, {30, 40}, {50, 60}});
  CHECK(mismatch(at + b, {3, 2}, {11, 24, 32, 45, 53, 66}) == "");
  CHECK(mismatch(b - at, {3, 2}, {9, 16, 28, 35, 47, 54}) == "");
  CHECK(mismatch(at * at, {3, 2}, {1, 16, 4, 25, 9, 36}) == "");
  CHECK(mismatch(at / tensor({1, 2}), {3, 2}, {1, 2, 2, 2.5, 3, 3}) == "");  // and broadcast
  CHECK(mismatch(maximum(at, b.t().t() / 10.0 + 1.0), {3, 2}, {2, 4, 4, 5, 6, 7}) == "");

  // Slices with a step, on both sides.
  Tensor base = arange(12).to(kFloat32).reshape({3, 4});
  Tensor even = base.slice(1, 0, 4, 2);  // [[0, 2], [4, 6], [8, 10]]
  Tensor odd = base.slice(1, 1, 4, 2);   // [[1, 3], [5, 7], [9, 11]]
  CHECK(mismatch(odd - even, {3, 2}, {1, 1, 1, 1, 1, 1}) == "");
  CHECK(mismatch(even * odd, {3, 2}, {0, 6, 20, 42, 72, 110}) == "");
  CHECK(mismatch_with(minimum(even, odd.t().t()), even) == "");
  CHECK(mismatch(base.select(1, 3) + base.select(0, 1).narrow(0, 0, 3), {3}, {7, 12, 17}) == "");
  // A transposed operand with a column broadcast: [3,2] + [3,1]
  CHECK(mismatch(at + tensor({100, 200, 300}).reshape({3, 1}), {3, 2}, {101, 104, 202, 205, 303, 306}) == "");
}

TEST_CASE("binary: comparisons give bool with broadcasting") {
  Tensor a = two_by_three();
  Tensor t = tensor({2, 5}).reshape({2, 1});
  auto as_bools = [](const Tensor& x) {
    CHECK(x.dtype() == kBool);
    return x.to_vector<bool>();
  };
  using B = std::vector<bool>;
  CHECK(as_bools(a > t) == B{false, false, true, false, false, true});
  CHECK(as_bools(a >= t) == B{false, true, true, false, true, true});
  CHECK(as_bools(a < t) == B{true, false, false, true, false, false});
  CHECK(as_bools(a <= t) == B{true, true, false, true, true, false});
  CHECK(as_bools(a == t) == B{false, true, false, false, true, false});
  CHECK(as_bools(a != t) == B{true, false, true, true, false, true});
  CHECK(as_bools(a.gt(t)) == as_bools(a > t));
  CHECK(as_bools(a.eq(t)) == as_bools(a == t));
  CHECK((a > t).shape() == Shape{2, 3});
  // Across dtypes, after promotion: 2 (int64) == 2.0 (float32)
  CHECK(as_bools(tensor({2, 3}, kInt64) == tensor({2, 2.5})) == B{true, false});
  CHECK(as_bools(tensor({kNaN}) == tensor({kNaN})) == B{false});
  // On a transposed view.
  CHECK(as_bools(a.t() > scalar_tensor(2.5)) == B{false, true, false, true, true, true});
}

TEST_CASE("binary: where picks from two broadcast operands") {
  Tensor cond = tensor({1, 0}, kBool).reshape({2, 1});
  Tensor a = two_by_three();
  CHECK(mismatch(where(cond, a, scalar_tensor(0)), {2, 3}, {1, 2, 3, 0, 0, 0}) == "");
  CHECK(mismatch(where(cond, a, -a), {2, 3}, {1, 2, 3, -4, -5, -6}) == "");  // whole rows from one side
  Tensor mask = tensor({1, 0, 1}, kBool);
  CHECK(mismatch(where(mask, a, -a), {2, 3}, {1, -2, 3, 4, -5, 6}) == "");
  // Promotion: int64 and float64 give float64.
  Tensor w = where(mask, tensor({1, 2, 3}, kInt64), tensor({0.5, 0.5, 0.5}, kFloat64));
  CHECK(w.dtype() == kFloat64);
  CHECK(mismatch(w, {3}, {1, 0.5, 3}) == "");
  // A transposed condition and operand.
  Tensor ct = tensor({{1, 0, 0}, {0, 1, 1}}, kBool).t();  // [[1,0],[0,1],[0,1]]
  CHECK(mismatch(where(ct, a.t(), zeros({3, 2})), {3, 2}, {1, 0, 0, 5, 0, 6}) == "");
  CHECK(mismatch(where(a > scalar_tensor(3), a, scalar_tensor(3)), {2, 3}, {3, 3, 3, 4, 5, 6}) == "");
}

TEST_CASE("binary: masked_fill out of place and in place") {
  Tensor a = two_by_three();
  Tensor mask = tensor({1, 0, 1}, kBool);
  CHECK(mismatch(a.masked_fill(mask, -1), {2, 3}, {-1, 2, -1, -1, 5, -1}) == "");
  CHECK(mismatch(a, {2, 3}, {1, 2, 3, 4, 5, 6}) == "");  // untouched
  CHECK(mismatch(a.masked_fill(a > scalar_tensor(4), 0), {2, 3}, {1, 2, 3, 4, 0, 0}) == "");
  // -inf, as attention masks use it.
  Tensor neg_inf = a.masked_fill(tensor({0, 1}, kBool).reshape({2, 1}), -INFINITY);
  CHECK(mismatch(neg_inf, {2, 3}, {1, 2, 3, -INFINITY, -INFINITY, -INFINITY}) == "");
  Tensor rows = a.clone();  // in place, a whole row filled or left as it is
  rows.masked_fill_(tensor({1, 0}, kBool).reshape({2, 1}), 0);
  CHECK(mismatch(rows, {2, 3}, {0, 0, 0, 4, 5, 6}) == "");
  // On a transposed view.
  CHECK(mismatch(a.t().masked_fill(tensor({1, 0}, kBool), 9), {3, 2}, {9, 4, 9, 5, 9, 6}) == "");
  // int64 tensors too.
  CHECK(arange(4).masked_fill(tensor({0, 1, 0, 1}, kBool), 7).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 7, 2, 7});
  // A value no int64 holds is refused, as PyTorch refuses it (it became INT64_MIN).
  Tensor ints = arange(4);
  CHECK_THROWS_WITH_AS(ints.masked_fill(tensor({0, 1, 0, 1}, kBool), -INFINITY),
                       doctest::Contains("masked_fill: value -inf cannot be converted to int64"), Error);
  CHECK_THROWS_WITH_AS(ints.masked_fill_(tensor({0, 1, 0, 1}, kBool), NAN),
                       doctest::Contains("masked_fill_: value nan cannot be converted to int64"), Error);
  CHECK_THROWS_WITH_AS(ints.fill_(1e19), doctest::Contains("fill_: value 1e+19 cannot be converted to int64"), Error);
  CHECK(ints.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  // A scalar operand no int64 holds promotes to float32, as PyTorch's float scalars do.
  CHECK((ints + INFINITY).dtype() == kFloat32);
  CHECK(mismatch(ints + INFINITY, {4}, {INFINITY, INFINITY, INFINITY, INFINITY}) == "");
  CHECK((ints < INFINITY).to_vector<bool>() == std::vector<bool>{true, true, true, true});
  CHECK((ints == NAN).to_vector<bool>() == std::vector<bool>{false, false, false, false});

  // In place through a view writes into the base.
  Tensor base = zeros({2, 3});
  Tensor col = base.select(1, 1);
  col.masked_fill_(tensor({0, 1}, kBool), 5);
  CHECK(mismatch(base, {2, 3}, {0, 0, 0, 0, 5, 0}) == "");
}

TEST_CASE("binary: in-place arithmetic writes through views") {
  Tensor base = ones({2, 3});
  Tensor row = base.select(0, 1);
  row.add_(tensor({1, 2, 3}));
  CHECK(mismatch(base, {2, 3}, {1, 1, 1, 2, 3, 4}) == "");
  row.mul_(2.0);
  CHECK(mismatch(base, {2, 3}, {1, 1, 1, 4, 6, 8}) == "");
  base.t().sub_(tensor({1, 2}));  // [3,2] minus a broadcast row: column j of base minus [1,2]
  CHECK(mismatch(base, {2, 3}, {0, 0, 0, 2, 4, 6}) == "");
  base.div_(tensor({1, 2, 4}));
  CHECK(mismatch(base, {2, 3}, {0, 0, 0, 2, 2, 1.5}) == "");
  base.add_(tensor({1, 1, 1}), 0.5);  // alpha scales the other operand
  CHECK(mismatch(base, {2, 3}, {0.5, 0.5, 0.5, 2.5, 2.5, 2}) == "");
  Tensor before = base.clone();
  base.zero_();
  CHECK(mismatch(base, {2, 3}, {0, 0, 0, 0, 0, 0}) == "");
  base.copy_(before.t().t());
  CHECK(mismatch_with(base, before) == "");
  CHECK(shares_storage(row, base));
}

TEST_CASE("binary: every pair of operand layouts gives the elementwise result") {
  // Layouts of one logical [R, C] shape: dense, transposed, every other column, a column block,
  // and two broadcasts, with a grain small enough that the loop is split across threads.
  SmallParallelGrain threaded;
  const int64_t R = 150, C = 240;
  Generator gen(99);
  std::vector<std::pair<const char*, Tensor>> layouts = {
      {"dense", randn({R, C}, kFloat32, gen)},
      {"transposed", randn({C, R}, kFloat32, gen).t()},
      {"every other column", randn({R, 2 * C}, kFloat32, gen).slice(1, 0, 2 * C, 2)},
      {"column block", randn({R, C + 7}, kFloat32, gen).narrow(1, 7, C)},
      {"row broadcast", randn({C}, kFloat32, gen).expand({R, C})},
      {"column broadcast", randn({R, 1}, kFloat32, gen).expand({R, C})},
  };
  for (const auto& [name_x, x] : layouts)
    for (const auto& [name_y, y] : layouts) {
      CAPTURE(name_x);
      CAPTURE(name_y);
      const std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>();
      const std::vector<float> sum = (x + y).to_vector<float>(), prod = (x * y).to_vector<float>();
      const std::vector<float> high = maximum(x, y).to_vector<float>();
      const std::vector<bool> less = (x < y).to_vector<bool>();
      int64_t wrong = 0;
      for (size_t i = 0; i < xv.size(); ++i)
        if (sum[i] != xv[i] + yv[i] || prod[i] != xv[i] * yv[i] || high[i] != std::max(xv[i], yv[i]) ||
            less[i] != (xv[i] < yv[i]))
          ++wrong;
      CHECK(wrong == 0);
    }
}

TEST_CASE("binary: a loop split between threads inside a run gives the same result") {
  // 7 runs of 1001 elements (a column block) and one run of 7007 (dense): two threads cut the
  // elements at 3503, inside a run; every element must still be visited once.
  SmallParallelGrain threaded;
  Generator gen(5);
  Tensor dense = randn({7, 1001}, kFloat32, gen);
  Tensor block = randn({7, 1010}, kFloat32, gen).narrow(1, 9, 1001);
  for (const Tensor& x : {dense, block}) {
    const std::vector<float> xv = x.to_vector<float>(), dv = dense.to_vector<float>();
    const std::vector<float> sum = (x + dense).to_vector<float>(), copy = x.contiguous().to_vector<float>();
    int64_t wrong = 0;
    for (size_t i = 0; i < xv.size(); ++i)
      if (sum[i] != xv[i] + dv[i] || copy[i] != xv[i]) ++wrong;
    CHECK(wrong == 0);
  }
}
