// Shared helpers for the nn tests: seeded float64 tensors, comparisons, error messages, and the
// gradcheck shorthands used with modules.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cppgrad.h"

namespace cppgrad::nntest {

// A float64 tensor of N(0,1) values; the same seed gives the same values.
inline Tensor randn64(const Shape& shape, uint64_t seed, bool requires_grad = false) {
  Generator gen(seed);
  Tensor t = randn(shape, kFloat64, gen);
  if (requires_grad) t.requires_grad_();
  return t;
}

// The elements of a tensor, row-major, as doubles (any floating dtype, any layout).
inline std::vector<double> values(const Tensor& t) { return t.detach().to(kFloat64).contiguous().to_vector<double>(); }

// Largest |a - b| over the elements; shapes must agree.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  std::vector<double> x = values(a), y = values(b);
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

// Largest |a - b| relative to the largest |b|: a scale-aware error for a whole tensor.
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> y = values(b);
  double scale = 0.0;
  for (double v : y) scale = std::max(scale, std::abs(v));
  return max_abs_diff(a, b) / std::max(scale, 1e-300);
}

// Checks that `t` holds `expected` (row-major) to within `tol`.
inline void check_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-12) {
  std::vector<double> got = values(t);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == doctest::Approx(expected[i]).epsilon(tol).scale(1.0));
  }
}

inline bool all_finite(const Tensor& t) {
  for (double v : values(t))
    if (!std::isfinite(v)) return false;
  return true;
}

// Runs `f` and returns the message of the cppgrad::Error it throws ("" if it does not throw).
template <class F>
std::string error_message(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A bool tensor from 0/1 values.
inline Tensor bool_mask(std::initializer_list<std::initializer_list<double>> rows) {
  return tensor(rows, kFloat64).ne(zeros({}, kFloat64));
}

// Sets a float64 parameter's values from a row-major list, under no-grad.
inline void set_values(Tensor param, const std::vector<double>& v) {
  REQUIRE(static_cast<int64_t>(v.size()) == param.numel());
  NoGradGuard no_grad;
  param.copy_(tensor(v, param.shape()).to(param.dtype()));
}

// Gradcheck options for the whole-layer checks: fast mode (random projections), with a
// tolerance that still catches any wrong term.
inline GradcheckOptions fast(uint64_t seed = 1) {
  GradcheckOptions o;
  o.fast_mode = true;
  o.seed = seed;
  return o;
}

}  // namespace cppgrad::nntest
