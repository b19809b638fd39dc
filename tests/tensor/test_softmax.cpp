// softmax and log_softmax over any dim: exact values, stability, fully masked rows.
#include <cmath>
#include <limits>

#include "helpers.h"
#include "tensor/kernels/fast/exp_rows.h"

using namespace cppgrad;
using namespace cppgrad::testing;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// softmax([1, 2, 3]) and log_softmax([1, 2, 3]), worked out in double precision.
const std::vector<double> kSoft123 = {0.09003057317038046, 0.24472847105479764, 0.6652409557748218};
const std::vector<double> kLogSoft123 = {-2.4076059644443806, -1.4076059644443804, -0.4076059644443804};
}  // namespace

TEST_CASE("softmax: a 1-d input") {
  CHECK(mismatch(tensor({1, 2, 3}, kFloat64).softmax(0), {3}, kSoft123, 1e-12) == "");
  CHECK(mismatch(tensor({1, 2, 3}).softmax(0), {3}, kSoft123) == "");
  CHECK(mismatch(tensor({1, 2, 3}, kFloat64).log_softmax(0), {3}, kLogSoft123, 1e-12) == "");
  CHECK(mismatch(tensor({1, 2, 3}).log_softmax(-1), {3}, kLogSoft123) == "");
  // softmax([0, log 3]) = [1/4, 3/4]
  CHECK(mismatch(tensor({0, std::log(3.0)}, kFloat64).softmax(0), {2}, {0.25, 0.75}, 1e-12) == "");
  CHECK(mismatch(softmax(tensor({5, 5, 5, 5}), 0), {4}, {0.25, 0.25, 0.25, 0.25}) == "");
  CHECK(mismatch(log_softmax(tensor({1, 2, 3}), 0), {3}, kLogSoft123) == "");
}

TEST_CASE("softmax: over each dim of a 2-d input") {
  // Rows [1, 2, 3] and [3, 2, 1]; the columns are [1, 3], [2, 2], [3, 1].
  Tensor x = tensor({{1, 2, 3}, {3, 2, 1}}, kFloat64);
  const auto& s = kSoft123;
  CHECK(mismatch(x.softmax(1), {2, 3}, {s[0], s[1], s[2], s[2], s[1], s[0]}, 1e-12) == "");
  CHECK(mismatch_with(x.softmax(-1), x.softmax(1)) == "");
  // softmax([1, 3]) = [1/(1+e²), e²/(1+e²)]
  const double lo = 1 / (1 + std::exp(2.0)), hi = 1 - lo;
  CHECK(mismatch(x.softmax(0), {2, 3}, {lo, 0.5, hi, hi, 0.5, lo}, 1e-12) == "");
  CHECK(mismatch(x.log_softmax(0), {2, 3}, {std::log(lo), std::log(0.5), std::log(hi), std::log(hi), std::log(0.5),
                                           std::log(lo)},
                 1e-12) == "");
}

TEST_CASE("softmax: over the middle dim of a 3-d input") {
  Generator gen(21);
  Tensor x = randn({2, 4, 3}, kFloat64, gen);
  Tensor y = x.softmax(1);
  Tensor ly = x.log_softmax(1);
  CHECK(y.shape() == Shape{2, 4, 3});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 3; ++k) {
      double total = 0;
      for (int64_t j = 0; j < 4; ++j) total += std::exp(x.at<double>({i, j, k}));
      for (int64_t j = 0; j < 4; ++j) {
        CHECK(y.at<double>({i, j, k}) == doctest::Approx(std::exp(x.at<double>({i, j, k})) / total).epsilon(1e-12));
        CHECK(ly.at<double>({i, j, k}) == doctest::Approx(x.at<double>({i, j, k}) - std::log(total)).epsilon(1e-12));
      }
    }
  CHECK(mismatch_with(y.sum({1}), ones({2, 3}, kFloat64), 1e-12) == "");
}

TEST_CASE("softmax: non-contiguous inputs") {
  // The transpose of [[1, 3], [2, 2], [3, 1]]: rows [1, 2, 3] and [3, 2, 1] again.
  Tensor xt = tensor({{1, 3}, {2, 2}, {3, 1}}, kFloat64).t();
  REQUIRE_FALSE(xt.is_contiguous());
  const auto& s = kSoft123;
  CHECK(mismatch(xt.softmax(1), {2, 3}, {s[0], s[1], s[2], s[2], s[1], s[0]}, 1e-12) == "");
  const auto& l = kLogSoft123;
  CHECK(mismatch(xt.log_softmax(1), {2, 3}, {l[0], l[1], l[2], l[2], l[1], l[0]}, 1e-12) == "");
  // Every other column of [[1, 9, 2, 9, 3]]: [1, 2, 3]
  Tensor sliced = tensor({{1, 9, 2, 9, 3}}, kFloat64).slice(1, 0, 5, 2);
  CHECK(mismatch(sliced.softmax(1), {1, 3}, s, 1e-12) == "");
  // An expanded row.
  Tensor e = tensor({1, 2, 3}, kFloat64).expand({2, 3});
  CHECK(mismatch(e.softmax(1), {2, 3}, {s[0], s[1], s[2], s[0], s[1], s[2]}, 1e-12) == "");
}

TEST_CASE("softmax: stable for inputs like plus and minus 1e4") {
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dtype));
    Tensor x = tensor({1e4, 0, -1e4}, dtype);
    CHECK(mismatch(x.softmax(0), {3}, {1, 0, 0}) == "");
    CHECK(mismatch(x.log_softmax(0), {3}, {0, -1e4, -2e4}) == "");
    CHECK(mismatch(tensor({1e4, 1e4}, dtype).softmax(0), {2}, {0.5, 0.5}) == "");
    CHECK(mismatch(tensor({-1e4, -1e4 + std::log(3.0)}, dtype).softmax(0), {2}, {0.25, 0.75}, 1e-3) == "");
    CHECK(mismatch(tensor({1e4 + 1, 1e4 + 2, 1e4 + 3}, dtype).log_softmax(0), {3}, kLogSoft123, 1e-3) == "");
  }
}

TEST_CASE("softmax: a row of all -inf gives zeros and not NaN") {
  Tensor x = tensor({{-kInf, -kInf, -kInf}, {0, -kInf, std::log(3.0)}});
  CHECK(mismatch(x.softmax(1), {2, 3}, {0, 0, 0, 0.25, 0, 0.75}) == "");
  CHECK(mismatch(x.log_softmax(1), {2, 3}, {-kInf, -kInf, -kInf, std::log(0.25), -kInf, std::log(0.75)}) == "");
  // Along dim 0: the column [-inf, -inf] is fully masked.
  CHECK(mismatch(x.softmax(0), {2, 3}, {0, 0, 0, 1, 0, 1}) == "");
  // A fully masked row built the way attention builds it.
  Tensor scores = zeros({2, 2}).masked_fill(tensor({1, 1, 0, 1}, kBool).reshape({2, 2}), -INFINITY);
  CHECK(mismatch(scores.softmax(-1), {2, 2}, {0, 0, 1, 0}) == "");
  CHECK(mismatch(tensor({-kInf, -kInf}, kFloat64).softmax(0), {2}, {0, 0}) == "");
}

// A diverging model must not go silent: std::max skips a NaN, so a row that is NaN throughout
// used to look fully masked and came out as zeros. Only a row that is -inf throughout gives zeros.
TEST_CASE("softmax: NaN anywhere in a row makes the row NaN, only all -inf rows give zeros") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dtype));
    // Rows: NaN throughout; NaN with -inf; NaN among finite values; -inf throughout.
    Tensor x = tensor({{nan, nan, nan}, {nan, -kInf, -kInf}, {1, nan, 2}, {-kInf, -kInf, -kInf}}, dtype);
    const std::vector<double> nan_row{nan, nan, nan};
    std::vector<double> soft, log_soft;
    for (int r = 0; r < 3; ++r) {
      soft.insert(soft.end(), nan_row.begin(), nan_row.end());
      log_soft.insert(log_soft.end(), nan_row.begin(), nan_row.end());
    }
    soft.insert(soft.end(), {0, 0, 0});
    log_soft.insert(log_soft.end(), {-kInf, -kInf, -kInf});
    CHECK(mismatch(x.softmax(1), {4, 3}, soft) == "");          // contiguous rows: the vectorised path
    CHECK(mismatch(x.log_softmax(1), {4, 3}, log_soft) == "");
    CHECK(mismatch(x.t().softmax(0).t(), {4, 3}, soft) == "");  // strided rows (inner > 1)
    CHECK(mismatch(x.t().log_softmax(0).t(), {4, 3}, log_soft) == "");
    // The fused masked softmax, without a mask tensor and with one that hides nothing.
    CHECK(mismatch(kernels::masked_softmax(x, Tensor(), false, 1.0), {4, 3}, soft) == "");
    CHECK(mismatch(kernels::masked_softmax(x, zeros({3}, kBool), false, 1.0), {4, 3}, soft) == "");
    // A bool mask hiding every finite key of row 2 leaves its NaN: the row stays NaN; row 3 of
    // zeros with every key hidden gives zeros.
    Tensor finite = tensor({{0, 0, 0}, {0, 0, 0}, {1, nan, 2}, {0, 0, 0}}, dtype);
    Tensor hide = tensor({{0, 0, 0}, {0, 0, 0}, {1, 0, 1}, {1, 1, 1}}, kBool);
    CHECK(mismatch(kernels::masked_softmax(finite, hide, false, 1.0).narrow(0, 2, 2), {2, 3},
                   {nan, nan, nan, 0, 0, 0}) == "");
  }
}

TEST_CASE("softmax: 0-d and empty inputs") {
  CHECK(mismatch(scalar_tensor(7).softmax(0), {}, {1}) == "");
  CHECK(mismatch(scalar_tensor(7).log_softmax(-1), {}, {0}) == "");
  CHECK(zeros({0, 3}).softmax(1).shape() == Shape{0, 3});
}

TEST_CASE("softmax: rows of a large random input sum to one") {
  Generator gen(8);
  Tensor x = randn({256, 200}, kFloat32, gen) * 10.0;
  Tensor y = x.softmax(1);
  CHECK(mismatch_with(y.sum({1}), ones({256}), 1e-5) == "");
  CHECK(mismatch_with(x.log_softmax(1).exp(), y, 1e-4) == "");
  CHECK(mismatch_with(x.t().softmax(0), y.t(), 1e-6) == "");
}

TEST_CASE("softmax: the vectorised float exp is within 2 ulp of the exact value") {
  double worst_ulp = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.0031f) {
    const double exact = std::exp(static_cast<double>(x));
    const float rounded = static_cast<float>(exact);
    const double ulp = std::nextafter(rounded, std::numeric_limits<float>::infinity()) - rounded;
    const double error_ulp = std::abs(kernels::fast::exp_float(x) - exact) / ulp;
    REQUIRE(std::isfinite(error_ulp));  // std::max would drop a NaN
    worst_ulp = std::max(worst_ulp, error_ulp);
  }
  CHECK(worst_ulp <= 2.0);
  CHECK(kernels::fast::exp_float(0.0f) == 1.0f);
  CHECK(kernels::fast::exp_float(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(kernels::fast::exp_float(-100.0f) == 0.0f);
  CHECK(std::isinf(kernels::fast::exp_float(100.0f)));
  CHECK(std::isnan(kernels::fast::exp_float(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("softmax: float results agree with float64 ones, long rows included") {
  Generator gen(9);
  for (int64_t size : {1, 7, 17, 128, 300, 50000}) {
    CAPTURE(size);
    Tensor x = randn({3, size}, kFloat64, gen) * 5.0;
    Tensor reference = x.softmax(1);
    CHECK(mismatch_with(x.to(kFloat32).softmax(1), reference, 1e-5) == "");
    CHECK(mismatch_with(x.to(kFloat32).log_softmax(1), x.log_softmax(1), 1e-5) == "");
    CHECK(mismatch_with(kernels::masked_softmax(x.to(kFloat32), Tensor(), /*causal=*/true, 0.5),
                        kernels::masked_softmax(x, Tensor(), true, 0.5), 1e-5) == "");
  }
}

TEST_CASE("log_softmax: the backward's two-pass kernel gives the bits of its formula as tensor ops") {
  // Without create_graph the backward is kernels::log_softmax_backward (reference mode takes the
  // formula); with it, the formula g - exp(y)·Σg as differentiable ops. Both dtypes, rows side by
  // side in groups of eight and a group cut short (13 rows), a long row and strided rows (dim 0),
  // and a row of -inf (y = -inf, exp(y) = 0).
  Generator gen(12);
  for (DType dtype : {kFloat32, kFloat64})
    for (bool reference : {false, true})
      for (int64_t dim : {1, 0}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(reference);
        CAPTURE(dim);
        ReferenceModeGuard mode(reference);
        Tensor x = randn({13, 3001}, dtype, gen) * 4.0;
        x.narrow(0, 2, 1).fill_(-kInf);
        Tensor g = randn({13, 3001}, dtype, gen);
        Tensor a = x.detach().requires_grad_(), b = x.detach().requires_grad_();
        a.log_softmax(dim).backward(g);
        // grad() rather than backward(): a recorded gradient kept in b.grad would hold b's graph,
        // and the graph b, in a cycle (as in PyTorch).
        Tensor b_grad = autograd::grad({b.log_softmax(dim)}, {b}, {g}, false, /*create_graph=*/true)[0];
        CHECK(check::max_abs_diff(a.grad(), b_grad.detach()) == 0.0);
        CHECK(check::max_abs_diff(kernels::log_softmax_backward(x.log_softmax(dim), g, dim),
                                  g - x.log_softmax(dim).exp() * g.sum({dim}, true)) == 0.0);
      }
}

TEST_CASE("log_softmax: a gradient of another dtype than the output's takes the formula") {
  // A root gradient's dtype is not checked against its output's (float64 for a float32 loss is
  // allowed, as in PyTorch): the kernel, which wants one dtype, steps aside for the formula.
  Generator gen(13);
  Tensor x = randn({4, 9}, kFloat32, gen).requires_grad_();
  Tensor g = randn({4, 9}, kFloat64, gen);
  x.log_softmax(1).backward(g);
  Tensor y = x.detach().log_softmax(1);
  Tensor expected = (g - y.exp() * g.sum({1}, true)).to(kFloat32);
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(check::max_abs_diff(x.grad(), expected) <= 1e-6);
}
