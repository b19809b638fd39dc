// The comparisons every test floor shares (tensor, autograd, nn, optim), in one place.
//
// A NaN compares false with everything, so `std::max(worst, NaN)` keeps `worst` and a test
// built on it passes an output that is NaN throughout. Every helper here treats a NaN or an
// infinity that the other side does not hold as an infinite difference, so that no comparison
// can pass a wrong answer; tests/tensor/test_check_helpers.cpp is the negative control.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cppgrad.h"

namespace cppgrad::check {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The elements of a tensor, row-major, as doubles (any dtype, any layout, with or without grad).
inline std::vector<double> values(const Tensor& t) { return t.detach().to(kFloat64).contiguous().to_vector<double>(); }

// |a - b| for one pair of elements: 0 when they are equal (an infinity matches only itself),
// +inf when either is NaN or only one is infinite.
inline double element_diff(double a, double b) {
  if (a == b) return 0.0;
  const double d = std::abs(a - b);
  return std::isnan(d) ? kInfinity : d;
}

// Largest |a - b| over two equal-length lists; +inf as soon as one pair is NaN or mismatched
// infinities, and +inf when the lengths differ.
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return kInfinity;
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = element_diff(a[i], b[i]);
    if (d > worst) worst = d;  // d is never NaN, so `>` sees every element
  }
  return worst;
}

// The same over two tensors, whose shapes must agree.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  return max_abs_diff(values(a), values(b));
}

// Largest |a - b| relative to the largest finite |b|: a scale-aware error for a whole tensor.
// +inf whenever max_abs_diff is.
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  const double diff = max_abs_diff(a, b);
  if (diff == 0.0 || std::isinf(diff)) return diff;
  double scale = 0.0;
  for (double v : values(b))
    if (std::isfinite(v) && std::abs(v) > scale) scale = std::abs(v);
  return diff / (scale > 1e-300 ? scale : 1e-300);
}

// Element-wise |a - b| <= atol + rtol·|b| with equal shapes, as torch.allclose with
// equal_nan=False: a NaN on either side is never close.
inline bool allclose(const Tensor& a, const Tensor& b, double atol = 1e-10, double rtol = 1e-8) {
  if (a.shape() != b.shape()) return false;
  std::vector<double> x = values(a), y = values(b);
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isfinite(y[i]) && element_diff(x[i], y[i]) <= atol + rtol * std::abs(y[i]))))
      return false;
  return true;
}

// Empty when `got` holds `expected` (row-major, the same count), each element within
// tol·(1 + |expected|); otherwise a description of the first difference, so that
//   CHECK(mismatch(values(y), {1, 2, 3, 4}) == "");
// prints what differs. A NaN matches only where `expected` asks for NaN; an infinity only itself.
inline std::string mismatch(const std::vector<double>& got, const std::vector<double>& expected, double tol = 1e-6) {
  if (got.size() != expected.size()) return fmt::format("{} values instead of {}", got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], e = expected[i];
    const bool same = (std::isnan(g) && std::isnan(e)) || g == e ||
                      (std::isfinite(e) && element_diff(g, e) <= tol * (1 + std::abs(e)));
    if (!same) return fmt::format("element {} is {} instead of {}", i, g, e);
  }
  return "";
}

// True when every element is finite (no NaN, no infinity).
inline bool all_finite(const Tensor& t) {
  for (double v : values(t))
    if (!std::isfinite(v)) return false;
  return true;
}

// Runs `f` and returns the message of the cppgrad::Error it throws ("" if it throws none).
template <class F>
std::string error_message(F&& f) {
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

// `state` with entry `key` replaced by `value` (removed when `value` is undefined, appended when
// `key` is new): one tampered entry of a checkpoint, for the tests of checked loads.
inline NamedTensors with_entry(const NamedTensors& state, const std::string& key, const Tensor& value) {
  NamedTensors out;
  bool found = false;
  for (const auto& [name, t] : state) {
    if (name != key) {
      out.emplace_back(name, t);
    } else if ((found = true), value.defined()) {
      out.emplace_back(name, value);
    }
  }
  if (!found && value.defined()) out.emplace_back(key, value);
  return out;
}

}  // namespace cppgrad::check
