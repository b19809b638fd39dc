// Shared helpers for the autograd tests: seeded float64 leaves and gradcheck shorthands.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cppgrad.h"
#include "../common/check.h"

namespace cppgrad::test {

// A float64 leaf of N(0,1) values that requires grad; the same seed gives the same values.
inline Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, kFloat64, gen).requires_grad_();
}

// A float64 leaf with values in [low, high) (for log, sqrt, pow with a fractional exponent).
inline Tensor positive_leaf(const Shape& shape, uint64_t seed, double low = 0.5, double high = 2.0) {
  Generator gen(seed);
  Tensor u = rand(shape, kFloat64, gen);
  NoGradGuard no_grad;
  return (u * (high - low) + low).requires_grad_();
}

// A float64 leaf whose values are at least 0.2 away from 0 (abs and relu are not
// differentiable at 0; finite differences there would straddle the kink).
inline Tensor away_from_zero_leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor x = randn(shape, kFloat64, gen);
  NoGradGuard no_grad;
  return (x + x.sign() * 0.2).requires_grad_();
}

// The domain column of an op table's row (tensor/op_tables.h): where gradcheck draws its inputs.
enum class Domain { Any, Positive, AwayFromZero };
inline Tensor leaf_in(Domain domain, const Shape& shape, uint64_t seed) {
  switch (domain) {
    case Domain::Positive: return positive_leaf(shape, seed);
    case Domain::AwayFromZero: return away_from_zero_leaf(shape, seed);
    case Domain::Any: break;
  }
  return leaf(shape, seed);
}

// The same values as `leaf(shape, seed)` stored transposed: a non-contiguous leaf of shape
// [shape[1], shape[0]] whose strides are [1, shape[1]].
inline Tensor transposed_leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = randn(shape, kFloat64, gen).t().detach();
  t.requires_grad_();
  REQUIRE_FALSE(t.is_contiguous());
  return t;
}

// The same values as the leaf `x`, stored transposed: a non-contiguous leaf of x's shape
// reversed (for a 2-D x).
inline Tensor transposed(const Tensor& x) {
  Tensor t = x.detach().t();
  t.requires_grad_();
  return t;
}

// An int64 index tensor from values.
inline Tensor index(std::vector<int64_t> values, const Shape& shape) { return tensor(values, shape); }
inline Tensor index(std::vector<int64_t> values) {
  Shape shape{static_cast<int64_t>(values.size())};
  return tensor(values, shape);
}

// A bool mask from 0/1 values.
inline Tensor mask(std::initializer_list<std::initializer_list<double>> values) {
  return tensor(values, kFloat64).ne(zeros({}, kFloat64));
}

// Shorthand: gradcheck of a one-input function.
template <class F>
bool check1(F f, const Tensor& x, GradcheckOptions options = {}) {
  return gradcheck([&](const std::vector<Tensor>& in) { return f(in[0]); }, {x}, options);
}
template <class F>
bool check2(F f, const Tensor& a, const Tensor& b, GradcheckOptions options = {}) {
  return gradcheck([&](const std::vector<Tensor>& in) { return f(in[0], in[1]); }, {a, b}, options);
}
template <class F>
bool gradgrad1(F f, const Tensor& x, GradcheckOptions options = {}) {
  return gradgradcheck([&](const std::vector<Tensor>& in) { return f(in[0]); }, {x}, options);
}
template <class F>
bool gradgrad2(F f, const Tensor& a, const Tensor& b, GradcheckOptions options = {}) {
  return gradgradcheck([&](const std::vector<Tensor>& in) { return f(in[0], in[1]); }, {a, b}, options);
}

// NaN-safe comparisons and error messages, shared by every floor.
using check::allclose;
using check::contains;
using check::error_message;
using check::max_abs_diff;
using check::values;

// Dim lists for a 3-D input: every dim, single dims (also negative), pairs, and all three.
inline const std::vector<std::vector<int64_t>> kDimLists = {{}, {0}, {1}, {-1}, {0, 2}, {1, -1}, {0, 1, 2}};

// Inputs for one reduction test: a contiguous [2,3,4] leaf and a permuted (non-contiguous) one.
inline std::vector<Tensor> reduction_inputs(uint64_t seed) {
  Generator gen(seed);
  Tensor permuted = randn({4, 2, 3}, kFloat64, gen).permute({1, 2, 0}).detach();  // [2,3,4]
  permuted.requires_grad_();
  return {leaf({2, 3, 4}, seed + 1), permuted};
}

}  // namespace cppgrad::test
