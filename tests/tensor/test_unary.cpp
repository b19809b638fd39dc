// Unary elementwise kernels against values worked out by hand, on dense and strided inputs.
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kE = 2.718281828459045;

// [[a, b], [c, d]] transposed: a strided view holding a, c, b, d in row-major order.
Tensor transposed(double a, double b, double c, double d, DType dtype = kFloat64) {
  Tensor t = tensor({{a, b}, {c, d}}, dtype).t();
  REQUIRE_FALSE(t.is_contiguous());
  return t;
}
}  // namespace

TEST_CASE("unary: neg and abs keep integer dtypes") {
  Tensor x = tensor({-2, -0.5, 0, 1, 3});
  CHECK(mismatch(x.neg(), {5}, {2, 0.5, 0, -1, -3}) == "");
  CHECK(mismatch(-x, {5}, {2, 0.5, 0, -1, -3}) == "");
  CHECK(mismatch(x.abs(), {5}, {2, 0.5, 0, 1, 3}) == "");

  Tensor i = tensor({-3, 2, 0}, kInt64);
  CHECK(i.neg().dtype() == kInt64);
  CHECK(i.neg().to_vector<int64_t>() == std::vector<int64_t>{3, -2, 0});
  CHECK(i.abs().to_vector<int64_t>() == std::vector<int64_t>{3, 2, 0});
  CHECK(i.sign().to_vector<int64_t>() == std::vector<int64_t>{-1, 1, 0});
  CHECK(mismatch(x.sign(), {5}, {-1, -1, 0, 1, 1}) == "");
}

TEST_CASE("unary: neg and abs of INT64_MIN wrap to INT64_MIN, as PyTorch's") {
  for (bool reference : {true, false}) {
    ReferenceModeGuard mode(reference);
    INFO((reference ? "reference mode" : "fast forms"));
    Tensor i = tensor(std::vector<int64_t>{INT64_MIN, INT64_MAX, -7}, {3});
    CHECK((-i).to_vector<int64_t>() == std::vector<int64_t>{INT64_MIN, -INT64_MAX, 7});
    CHECK(i.abs().to_vector<int64_t>() == std::vector<int64_t>{INT64_MIN, INT64_MAX, 7});
  }
}

TEST_CASE("unary: exp and log") {
  CHECK(mismatch(tensor({0, 1, -1, 2}).exp(), {4}, {1, kE, 1 / kE, 7.38905609893065}) == "");
  CHECK(mismatch(tensor({1, kE, 0.5, 4}, kFloat64).log(), {4}, {0, 1, -0.6931471805599453, 1.3862943611198906},
                 1e-12) == "");
  CHECK(mismatch(tensor({0, -1}).log(), {2}, {-kInf, kNaN}) == "");
  CHECK(mismatch(tensor({100}).exp(), {1}, {kInf}) == "");  // float32 overflows to inf
  CHECK(mismatch(tensor({100}, kFloat64).exp(), {1}, {2.6881171418161356e43}, 1e-12) == "");
}

TEST_CASE("unary: sqrt and rsqrt") {
  CHECK(mismatch(tensor({0, 4, 2, 0.25}).sqrt(), {4}, {0, 2, 1.4142135623730951, 0.5}) == "");
  CHECK(mismatch(tensor({4, 0.25, 2}, kFloat64).rsqrt(), {3}, {0.5, 2, 0.7071067811865476}, 1e-12) == "");
  CHECK(mismatch(tensor({0}).rsqrt(), {1}, {kInf}) == "");
  CHECK(mismatch(tensor({-1}).sqrt(), {1}, {kNaN}) == "");
}

TEST_CASE("unary: tanh and sigmoid saturate without NaN") {
  CHECK(mismatch(tensor({0, 1, -2, 20}).tanh(), {4}, {0, 0.7615941559557649, -0.9640275800758169, 1}) == "");
  CHECK(mismatch(tensor({-20}).tanh(), {1}, {-1}) == "");
  CHECK(mismatch(tensor({0, 2, -2, 100, -100}).sigmoid(), {5}, {0.5, 0.8807970779778823, 0.11920292202211755, 1, 0}) ==
        "");
  CHECK(mismatch(tensor({0, 2, -2, 800, -800}, kFloat64).sigmoid(), {5},
                 {0.5, 0.8807970779778823, 0.11920292202211755, 1, 0}, 1e-12) == "");
}

// silu(x) = x / (1 + e⁻ˣ), as torch.nn.functional.silu; the values are x·σ(x) in float64
// (Python's math module). A large negative x makes e⁻ˣ overflow float32 to inf: x / inf is -0, not NaN.
TEST_CASE("unary: silu, and it saturates without NaN") {
  CHECK(mismatch(tensor({-1, 0, 1, 2}, kFloat64).silu(), {4},
                 {-0.2689414213699951, 0, 0.7310585786300049, 1.7615941559557646}, 1e-15) == "");
  Tensor big = tensor({-100, 100});
  CHECK(mismatch(big.silu(), {2}, {0, 100}) == "");
  CHECK(mismatch_with(silu(big), big.silu(), 0) == "");
}

TEST_CASE("unary: relu gelu and erf") {
  CHECK(mismatch(tensor({-1, 0, 2.5}).relu(), {3}, {0, 0, 2.5}) == "");
  // gelu(x) = x Φ(x), the exact (erf) form, as torch's default
  CHECK(mismatch(tensor({0, 1, -1, 2, -3, 0.5}, kFloat64).gelu(), {6},
                 {0, 0.8413447460685429, -0.15865525393145707, 1.9544997361036416, -0.00404969409489031,
                  0.34573123063700656},
                 1e-12) == "");
  CHECK(mismatch(tensor({0, 1, -1, 2}).gelu(), {4}, {0, 0.8413447460685429, -0.15865525393145707, 1.9544997361036416}) ==
        "");
  CHECK(mismatch(tensor({0, 0.5, 1, -2}, kFloat64).erf(), {4}, {0, 0.5204998778130465, 0.8427007929497149,
                                                                 -0.9953222650189527},
                 1e-12) == "");
}

TEST_CASE("unary: pow with a scalar exponent") {
  Tensor x = tensor({1, 2, 3, -2});
  CHECK(mismatch(x.pow(2), {4}, {1, 4, 9, 4}) == "");
  CHECK(mismatch(x.square(), {4}, {1, 4, 9, 4}) == "");
  CHECK(mismatch(x.pow(3), {4}, {1, 8, 27, -8}) == "");
  CHECK(mismatch(x.pow(0), {4}, {1, 1, 1, 1}) == "");
  CHECK(mismatch(tensor({4, 9, 0.25}, kFloat64).pow(0.5), {3}, {2, 3, 0.5}, 1e-12) == "");
  CHECK(mismatch(tensor({2, 4}).pow(-1), {2}, {0.5, 0.25}) == "");
  CHECK(mismatch(tensor({8}).pow(1.0 / 3), {1}, {2}) == "");
  CHECK(mismatch(tensor({-8}).pow(0.5), {1}, {kNaN}) == "");
}

TEST_CASE("unary: results keep the shape and dtype of the input") {
  Tensor x = full({2, 3, 1}, 0.25, kFloat64);
  for (const Tensor& y : {x.exp(), x.log(), x.sqrt(), x.rsqrt(), x.tanh(), x.sigmoid(), x.relu(), x.gelu(), x.erf(),
                          x.pow(1.5), x.neg(), x.abs()}) {
    CHECK(y.shape() == Shape{2, 3, 1});
    CHECK(y.dtype() == kFloat64);
    CHECK(y.is_contiguous());
  }
  Tensor s = scalar_tensor(1).exp();
  CHECK(s.dim() == 0);
  CHECK(s.item<float>() == doctest::Approx(kE));
  // Empty tensors, with the empty dim outermost or innermost.
  CHECK(zeros({0, 4}).exp().shape() == Shape{0, 4});
  CHECK(zeros({4, 0}).neg().shape() == Shape{4, 0});
  CHECK(zeros({2, 0, 3}).transpose(0, 2).contiguous().shape() == Shape{3, 0, 2});
}

TEST_CASE("unary: every op on a transposed view") {
  // Values in view order: a, c, b, d.
  CHECK(mismatch(transposed(1, 2, 3, 4).exp(), {2, 2}, {kE, 20.085536923187668, 7.38905609893065, 54.598150033144236},
                 1e-12) == "");
  CHECK(mismatch(transposed(1, kE, 4, 0.5).log(), {2, 2}, {0, 1.3862943611198906, 1, -0.6931471805599453}, 1e-12) ==
        "");
  CHECK(mismatch(transposed(-1, 2, -3, 4).neg(), {2, 2}, {1, 3, -2, -4}) == "");
  CHECK(mismatch(transposed(-1, 2, -3, 4).abs(), {2, 2}, {1, 3, 2, 4}) == "");
  CHECK(mismatch(transposed(0, 4, 9, 16).sqrt(), {2, 2}, {0, 3, 2, 4}) == "");
  CHECK(mismatch(transposed(4, 1, 16, 0.25).rsqrt(), {2, 2}, {0.5, 0.25, 1, 2}) == "");
  CHECK(mismatch(transposed(0, 1, -2, 0).tanh(), {2, 2}, {0, -0.9640275800758169, 0.7615941559557649, 0}, 1e-12) ==
        "");
  CHECK(mismatch(transposed(0, 2, -2, 0).sigmoid(), {2, 2}, {0.5, 0.11920292202211755, 0.8807970779778823, 0.5},
                 1e-12) == "");
  CHECK(mismatch(transposed(-1, 2, 3, -4).relu(), {2, 2}, {0, 3, 2, 0}) == "");
  CHECK(mismatch(transposed(1, 0, -1, 2).gelu(), {2, 2},
                 {0.8413447460685429, -0.15865525393145707, 0, 1.9544997361036416}, 1e-12) == "");
  CHECK(mismatch(transposed(0.5, 0, 1, -2).erf(), {2, 2}, {0.5204998778130465, 0.8427007929497149, 0,
                                                            -0.9953222650189527},
                 1e-12) == "");
  CHECK(mismatch(transposed(1, 2, 3, 4).pow(2), {2, 2}, {1, 9, 4, 16}) == "");
  CHECK(mismatch(transposed(1, 2, 3, 4).pow(0.5), {2, 2}, {1, 1.7320508075688772, 1.4142135623730951, 2}, 1e-12) ==
        "");
}

TEST_CASE("unary: on a slice with a step and on an expanded view") {
  Tensor base = arange(12).to(kFloat32).reshape({3, 4});
  Tensor cols = base.slice(1, 1, 4, 2);  // columns 1 and 3: [[1, 3], [5, 7], [9, 11]]
  CHECK(mismatch(cols.neg(), {3, 2}, {-1, -3, -5, -7, -9, -11}) == "");
  CHECK(mismatch(cols.pow(2), {3, 2}, {1, 9, 25, 49, 81, 121}) == "");
  CHECK(mismatch(cols.sqrt(), {3, 2}, {1, std::sqrt(3.0), std::sqrt(5.0), std::sqrt(7.0), 3, std::sqrt(11.0)}) == "");
  // The base is untouched.
  CHECK(mismatch(base.select(0, 0), {4}, {0, 1, 2, 3}) == "");

  Tensor e = tensor({-1, 2}).expand({3, 2});
  CHECK(mismatch(e.relu(), {3, 2}, {0, 2, 0, 2, 0, 2}) == "");
  CHECK(e.relu().is_contiguous());
}

TEST_CASE("unary: logical_not of a bool tensor") {
  Tensor b = tensor({1, 0, 0}, kBool);
  CHECK(b.logical_not().dtype() == kBool);
  CHECK(b.logical_not().to_vector<bool>() == std::vector<bool>{false, true, true});
  Tensor bt = tensor({{1, 0}, {1, 1}}, kBool).t();
  CHECK(bt.logical_not().to_vector<bool>() == std::vector<bool>{false, false, true, false});
}
