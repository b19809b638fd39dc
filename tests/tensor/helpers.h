// Shared helpers for the tensor tests.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cppgrad.h"
#include "tensor/kernels.h"
#include "../common/check.h"

namespace cppgrad::testing {

using check::contains;
using check::error_message;
using check::values;

// Empty when `t` has `shape` and holds `expected` in row-major order, each value within
// tol * (1 + |expected|); otherwise a description of the first difference. Use as
//   CHECK(mismatch(y, {2, 2}, {1, 2, 3, 4}) == "");
// so that a failure prints what differs. NaN matches only NaN, an infinity only itself
// (check::mismatch).
inline std::string mismatch(const Tensor& t, const Shape& shape, const std::vector<double>& expected,
                            double tol = 1e-6) {
  if (t.shape() != shape) return fmt::format("shape {} instead of {}", shape_str(t.shape()), shape_str(shape));
  return check::mismatch(values(t), expected, tol);
}

// The same, comparing with another tensor's shape and values.
inline std::string mismatch_with(const Tensor& t, const Tensor& expected, double tol = 1e-6) {
  return mismatch(t, expected.shape(), values(expected), tol);
}

// Lowers the parallel grain for one test, so small tensors take the threaded code paths.
struct SmallParallelGrain {
  int64_t saved = parallel_grain();
  SmallParallelGrain() { set_parallel_grain(1024); }
  ~SmallParallelGrain() { set_parallel_grain(saved); }
};

// Whether `a` and `b` are views of one block of memory.
inline bool shares_storage(const Tensor& a, const Tensor& b) { return a.storage().get() == b.storage().get(); }

}  // namespace cppgrad::testing
