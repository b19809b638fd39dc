// Shared helpers for the tensor tests.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cppgrad.h"
#include "tensor/kernels.h"

namespace cppgrad::testing {

// Empty when `t` has `shape` and holds `expected` in row-major order, each value within
// tol * (1 + |expected|); otherwise a description of the first difference. Use as
//   CHECK(mismatch(y, {2, 2}, {1, 2, 3, 4}) == "");
// so that a failure prints what differs. NaN matches NaN and infinities match themselves.
inline std::string mismatch(const Tensor& t, const Shape& shape, const std::vector<double>& expected,
                            double tol = 1e-6) {
  if (t.shape() != shape) return fmt::format("shape {} instead of {}", shape_str(t.shape()), shape_str(shape));
  std::vector<double> got = t.to_vector<double>();
  if (got.size() != expected.size())
    return fmt::format("{} values instead of {}", got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], e = expected[i];
    const bool same = (std::isnan(g) && std::isnan(e)) || g == e || std::abs(g - e) <= tol * (1 + std::abs(e));
    if (!same) return fmt::format("element {} is {} instead of {}", i, g, e);
  }
  return "";
}

// The same, comparing with another tensor's shape and values.
inline std::string mismatch_with(const Tensor& t, const Tensor& expected, double tol = 1e-6) {
  return mismatch(t, expected.shape(), expected.to_vector<double>(), tol);
}

// Whether `a` and `b` are views of one block of memory.
// Lowers the parallel grain for one test, so small tensors take the threaded code paths.
struct SmallParallelGrain {
  int64_t saved = parallel_grain();
  SmallParallelGrain() { set_parallel_grain(1024); }
  ~SmallParallelGrain() { set_parallel_grain(saved); }
};

inline bool shares_storage(const Tensor& a, const Tensor& b) { return a.storage().get() == b.storage().get(); }

// The message of the cppgrad::Error that `f` throws, or "" when it throws none.
template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace cppgrad::testing
