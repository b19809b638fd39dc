// Reductions over any dims, with keepdim: sum, mean, max/argmax, min/argmin, var.
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// [[1, 5, 3], [4, 2, 6]]
Tensor x23(DType dtype = kFloat32) { return tensor({{1, 5, 3}, {4, 2, 6}}, dtype); }
}  // namespace

TEST_CASE("reduce: sum over all dims and over each dim") {
  Tensor x = x23();
  Tensor total = x.sum();
  CHECK(total.dim() == 0);
  CHECK(total.item<float>() == 21.0f);
  CHECK(mismatch(x.sum({0}), {3}, {5, 7, 9}) == "");
  CHECK(mismatch(x.sum({1}), {2}, {9, 12}) == "");
  CHECK(mismatch(x.sum({-1}), {2}, {9, 12}) == "");
  CHECK(mismatch(x.sum({0, 1}), {}, {21}) == "");
  CHECK(mismatch(x.sum({1}, true), {2, 1}, {9, 12}) == "");
  CHECK(mismatch(x.sum({0}, true), {1, 3}, {5, 7, 9}) == "");
  CHECK(mismatch(x.sum({}, true), {1, 1}, {21}) == "");
  CHECK(x.sum({1}).dtype() == kFloat32);
  CHECK(x23(kFloat64).sum({1}).dtype() == kFloat64);
}

TEST_CASE("reduce: sum over several dims of a 3-d tensor") {
  Tensor a = arange(24).to(kFloat64).reshape({2, 3, 4});  // a[i][j][k] = 12i + 4j + k
  // Σ_{i,k} (12i + 4j + k) = 32j + 60
  CHECK(mismatch(a.sum({0, 2}), {3}, {60, 92, 124}) == "");
  CHECK(mismatch(a.sum({2, 0}, true), {1, 3, 1}, {60, 92, 124}) == "");
  CHECK(mismatch(a.sum({-3, -1}), {3}, {60, 92, 124}) == "");
  // Σ_j (12i + 4j + k) = 36i + 12 + 3k
  CHECK(mismatch(a.sum({1}), {2, 4}, {12, 15, 18, 21, 48, 51, 54, 57}) == "");
  CHECK(mismatch(a.sum({1, 2}), {2}, {66, 210}) == "");
}

TEST_CASE("reduce: sum of integers and bools gives int64") {
  Tensor i = tensor({{1, -2, 3}, {4, 5, 6}}, kInt64);
  CHECK(i.sum().dtype() == kInt64);
  CHECK(i.sum().item<int64_t>() == 17);
  CHECK(i.sum({0}).to_vector<int64_t>() == std::vector<int64_t>{5, 3, 9});
  Tensor b = tensor({{1, 0, 1}, {1, 1, 1}}, kBool);
  CHECK(b.sum().dtype() == kInt64);
  CHECK(b.sum({1}).to_vector<int64_t>() == std::vector<int64_t>{2, 3});
}

TEST_CASE("reduce: an int64 sum past the range wraps, as PyTorch's") {
  for (bool reference : {true, false}) {
    ReferenceModeGuard mode(reference);
    INFO((reference ? "reference mode" : "fast forms"));
    // 1.8e19 - 2^64
    CHECK(full({2}, 9e18, kInt64).sum().item<int64_t>() == -446744073709551616);
    Tensor m = tensor(std::vector<int64_t>{INT64_MAX, 3, INT64_MAX, 1}, {2, 2});
    CHECK(m.sum({0}).to_vector<int64_t>() == std::vector<int64_t>{-2, 4});
    CHECK(m.sum().item<int64_t>() == 2);
  }
}

TEST_CASE("reduce: sum of non-contiguous and expanded inputs") {
  Tensor xt = x23().t();  // [[1, 4], [5, 2], [3, 6]]
  CHECK(mismatch(xt.sum({0}), {2}, {9, 12}) == "");
  CHECK(mismatch(xt.sum({1}), {3}, {5, 7, 9}) == "");
  CHECK(mismatch(xt.sum(), {}, {21}) == "");
  Tensor a = arange(24).to(kFloat32).reshape({2, 3, 4});
  Tensor p = a.permute({2, 0, 1});  // p[k][i][j] = 12i + 4j + k
  CHECK(mismatch(p.sum({1, 2}), {4}, {60, 66, 72, 78}) == "");  // Σ_{i,j} = 60 + 6k
  Tensor s = a.slice(2, 1, 4, 2);  // k = 1, 3
  CHECK(mismatch(s.sum({2}), {2, 3}, {4, 12, 20, 28, 36, 44}) == "");
  Tensor e = tensor({1, 2, 3}).expand({4, 3});
  CHECK(mismatch(e.sum({0}), {3}, {4, 8, 12}) == "");
  CHECK(mismatch(e.sum(), {}, {24}) == "");
}

TEST_CASE("reduce: sum of float32 accumulates in double") {
  // 200000 × 0.1f: a float accumulator drifts by whole units here; a double one does not.
  Tensor x = full({200000}, 0.1);
  CHECK(x.sum().item<double>() == doctest::Approx(200000 * 0.1f).epsilon(1e-6));
  CHECK(mismatch_with(full({400, 500}, 0.1).sum({0}), full({500}, 400 * 0.1f), 1e-6) == "");
}

TEST_CASE("reduce: empty reductions") {
  CHECK(mismatch(zeros({0, 3}).sum({0}), {3}, {0, 0, 0}) == "");
  CHECK(zeros({0, 3}).sum({1}).shape() == Shape{0});
  CHECK(mismatch(zeros({0}).mean(), {}, {kNaN}) == "");
  // A 0-d tensor reduces to itself.
  CHECK(mismatch(scalar_tensor(2.5).sum(), {}, {2.5}) == "");
}

TEST_CASE("reduce: mean") {
  Tensor x = x23();
  CHECK(mismatch(x.mean(), {}, {3.5}) == "");
  CHECK(mismatch(x.mean({0}), {3}, {2.5, 3.5, 4.5}) == "");
  CHECK(mismatch(x.mean({1}), {2}, {3, 4}) == "");
  CHECK(mismatch(x.mean({1}, true), {2, 1}, {3, 4}) == "");
  CHECK(mismatch(x.t().mean({0}), {2}, {3, 4}) == "");
  Tensor a = arange(24).to(kFloat64).reshape({2, 3, 4});
  CHECK(mismatch(a.mean({0, 2}), {3}, {7.5, 11.5, 15.5}) == "");
  CHECK(mismatch(a.mean({0, 2}, true), {1, 3, 1}, {7.5, 11.5, 15.5}) == "");
}

TEST_CASE("reduce: max and min with their indices") {
  Tensor x = x23();
  CHECK(x.max().item<float>() == 6.0f);
  CHECK(x.min().item<float>() == 1.0f);
  CHECK(x.max().dim() == 0);
  CHECK(x.argmax().item<int64_t>() == 5);
  CHECK(x.argmax().dtype() == kInt64);

  auto [vmax, imax] = x.max(1);
  CHECK(mismatch(vmax, {2}, {5, 6}) == "");
  CHECK(imax.dtype() == kInt64);
  CHECK(imax.to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  auto [vmax0, imax0] = x.max(0, true);
  CHECK(mismatch(vmax0, {1, 3}, {4, 5, 6}) == "");
  CHECK(imax0.shape() == Shape{1, 3});
  CHECK(imax0.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});

  auto [vmin, imin] = x.min(-1);
  CHECK(mismatch(vmin, {2}, {1, 2}) == "");
  CHECK(imin.to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(x.argmax(1).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(x.argmin(0).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0});
  CHECK(x.argmin(0, true).shape() == Shape{1, 3});
}

TEST_CASE("reduce: max of a 3-d tensor along its middle dim") {
  Generator gen(5);
  Tensor a = randn({3, 4, 5}, kFloat64, gen);
  auto [values, indices] = a.max(1);
  CHECK(values.shape() == Shape{3, 5});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 5; ++k) {
      int64_t best = 0;
      for (int64_t j = 1; j < 4; ++j)
        if (a.at<double>({i, j, k}) > a.at<double>({i, best, k})) best = j;
      CHECK(indices.at<int64_t>({i, k}) == best);
      CHECK(values.at<double>({i, k}) == a.at<double>({i, best, k}));
    }
}

TEST_CASE("reduce: the first of tied extrema wins and NaN propagates") {
  Tensor t = tensor({3, 1, 3, 1});
  CHECK(t.argmax().item<int64_t>() == 0);
  CHECK(t.argmin(0).item<int64_t>() == 1);  // (there is no argmin() over the flattened tensor)
  Tensor n = tensor({1, kNaN, 3});
  CHECK(std::isnan(n.max().item<double>()));
  CHECK(n.argmax().item<int64_t>() == 1);
  CHECK(std::isnan(n.min().item<double>()));
  CHECK(n.argmin(0).item<int64_t>() == 1);
  // Of several NaNs, the first wins, as in torch.argmax.
  Tensor nans = tensor({{1, kNaN, 5, kNaN}, {kNaN, 2, kNaN, 9}});
  CHECK(nans.argmax(1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(nans.argmin(1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(nans.argmax().item<int64_t>() == 1);
}

TEST_CASE("reduce: max and argmax of non-contiguous inputs and of int64") {
  Tensor xt = x23().t();  // [[1, 4], [5, 2], [3, 6]]
  auto [v, i] = xt.max(1);
  CHECK(mismatch(v, {3}, {4, 5, 6}) == "");
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(xt.argmax().item<int64_t>() == 5);  // of the flattened view [1, 4, 5, 2, 3, 6]
  CHECK(xt.argmin(0).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  Tensor ints = tensor({{7, -3, 9}}, kInt64);
  CHECK(ints.max().item<int64_t>() == 9);
  CHECK(ints.min(1).values.to_vector<int64_t>() == std::vector<int64_t>{-3});
  CHECK(ints.min(1).indices.to_vector<int64_t>() == std::vector<int64_t>{1});
}

TEST_CASE("reduce: var with a correction") {
  Tensor x = x23(kFloat64);
  // Rows [1, 5, 3] and [4, 2, 6]: squared deviations from the mean sum to 8 in each.
  CHECK(mismatch(x.var({1}), {2}, {4, 4}) == "");
  CHECK(mismatch(x.var({1}, 0), {2}, {8.0 / 3, 8.0 / 3}) == "");
  CHECK(mismatch(x.var({1}, 1, true), {2, 1}, {4, 4}) == "");
  // Columns [1, 4], [5, 2], [3, 6]: 4.5 each.
  CHECK(mismatch(x.var({0}), {3}, {4.5, 4.5, 4.5}) == "");
  // All six values: squared deviations from 3.5 sum to 17.5.
  CHECK(mismatch(x.var(), {}, {3.5}) == "");
  CHECK(mismatch(x.var({}, 0), {}, {17.5 / 6}) == "");
  CHECK(mismatch(x.var({0, 1}, 2), {}, {17.5 / 4}) == "");
  CHECK(mismatch(x.t().var({0}), {2}, {4, 4}) == "");
  // One element with Bessel's correction: 0/0, NaN as in PyTorch.
  CHECK(std::isnan(tensor({2}).var().item<double>()));
  CHECK(x23().var({1}).dtype() == kFloat32);
  // A correction of n or more divides by max(0, n - correction) = 0, as in PyTorch: inf, not a negative
  // variance; a correction near INT64_MIN divides by n - correction in double, not a wrapped int64.
  Tensor two = tensor({1.0, 2.0}, kFloat64);
  CHECK(two.var({}, 2).item<double>() == INFINITY);
  CHECK(two.var({}, 3).item<double>() == INFINITY);
  CHECK(two.var({}, INT64_MAX).item<double>() == INFINITY);
  CHECK(two.var({}, -1).item<double>() == doctest::Approx(0.5 / 3));
  CHECK(two.var({}, INT64_MIN).item<double>() == 0.5 / (2.0 + 0x1p63));
}

TEST_CASE("reduce: sum_to undoes broadcasting") {
  Tensor g = ones({2, 3, 4});
  CHECK(mismatch_with(sum_to(g, {3, 4}), full({3, 4}, 2)) == "");
  CHECK(mismatch_with(sum_to(g, {3, 1}), full({3, 1}, 8)) == "");
  CHECK(mismatch_with(sum_to(g, {1, 1, 4}), full({1, 1, 4}, 6)) == "");
  CHECK(mismatch(sum_to(g, {}), {}, {24}) == "");
  CHECK(sum_to(g, {2, 3, 4}).is_same(g));
}

// Sums are pairwise (blocks of 16 added in order, blocks merged as a binary counter carries), so
// the error of a long float64 sum grows with log n: 10^6 × 0.1 in order is off by ~1.3e-11
// relative, pairwise by 3e-16 (PyTorch: 7e-16). The bound, 1e-15, is ~7 ulp of 1e5.
TEST_CASE("reduce: a long float64 sum is pairwise, accurate to a few ulp") {
  Tensor x = full({1000000}, 0.1, kFloat64);
  const double exact = 1e5;  // 10^6 × fl(0.1) = 1e5 + 5.6e-12, which rounds to 1e5
  CHECK(std::abs(x.sum().item<double>() - exact) / exact < 1e-15);
  CHECK(std::abs(x.mean().item<double>() - 0.1) / 0.1 < 1e-15);
  // The same sum over a non-contiguous view (stride 2) and as a column sum (leading dims) gives
  // the same bits: the order of additions depends only on the count.
  Tensor wide = full({1000000, 2}, 0.1, kFloat64);
  CHECK(wide.select(1, 0).sum().item<double>() == x.sum().item<double>());
  Tensor column_sums = wide.sum(0);
  CHECK(column_sums.select(0, 0).item<double>() == x.sum().item<double>());
}

TEST_CASE("reduce: pairwise sums of every length agree with the exact sum") {
  // Lengths around the block size (16) and its multiples exercise every carry.
  for (int64_t n : {1, 15, 16, 17, 31, 32, 33, 255, 256, 257, 1000, 16 * 64 + 5}) {
    Tensor x = arange(1, static_cast<double>(n) + 1, 1, kFloat64);
    CHECK(x.sum().item<double>() == static_cast<double>(n * (n + 1) / 2));  // integers: exact
    Tensor rows = x.reshape({n, 1}).expand({n, 3}).contiguous();
    Tensor by_column = rows.sum(0);
    for (int64_t j = 0; j < 3; ++j) CHECK(by_column.select(0, j).item<double>() == static_cast<double>(n * (n + 1) / 2));
  }
}
