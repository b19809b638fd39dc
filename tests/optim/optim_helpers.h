// Shared helpers for the optim tests: a small quadratic problem with its gradient in plain
// doubles, comparisons against reference values, state dicts and error messages.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cppgrad.h"
#include "../common/check.h"

namespace cppgrad::optimtest {

// NaN-safe comparisons and error messages, shared by every floor.
using check::contains;
using check::error_message;
using check::max_abs_diff;
using check::values;

// Checks that `t` holds `expected` (row-major), each element to within `rel` relative error;
// rel = 0 asks for exact equality.
inline void check_values(const Tensor& t, const std::vector<double>& expected, double rel = 1e-12) {
  std::vector<double> got = values(t);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", expected " << expected[i]);
    if (rel == 0.0)
      CHECK(got[i] == expected[i]);
    else
      CHECK(got[i] == doctest::Approx(expected[i]).epsilon(rel));
  }
}

// A float64 leaf tensor holding `v`, requiring grad.
inline Tensor param(const std::vector<double>& v) {
  Tensor t = tensor(v, {static_cast<int64_t>(v.size())});
  t.requires_grad_();
  return t;
}

// loss = Σ a_i (p_i - c_i)² over two parameters x (2 elements) and y (3 elements), so that
// ∂loss/∂p_i = 2 a_i (p_i - c_i). The weights a differ, so per-element methods (Adam) see
// gradients of different sizes; the starts lie on both sides of the targets.
struct Quadratic {
  std::vector<double> a{1.0, 3.0, 0.5, 2.0, 0.25};
  std::vector<double> c{0.5, -1.0, 2.0, 0.0, -3.0};
  std::vector<double> start{1.0, 0.4, 1.0, -0.7, 2.0};

  Tensor x = param({start[0], start[1]});
  Tensor y = param({start[2], start[3], start[4]});

  std::vector<Tensor> params() const { return {x, y}; }

  // Builds the loss with autograd and runs backward: x.grad and y.grad are set.
  void backward() const {
    const DType d = x.dtype();
    Tensor ax = tensor({a[0], a[1]}, d), cx = tensor({c[0], c[1]}, d);
    Tensor ay = tensor({a[2], a[3], a[4]}, d), cy = tensor({c[2], c[3], c[4]}, d);
    Tensor loss = (ax * (x - cx).square()).sum() + (ay * (y - cy).square()).sum();
    loss.backward();
  }

  // The gradient at p (all five elements), in plain doubles.
  std::vector<double> grad(const std::vector<double>& p) const {
    std::vector<double> g(p.size());
    for (size_t i = 0; i < p.size(); ++i) g[i] = 2.0 * a[i] * (p[i] - c[i]);
    return g;
  }

  // x and y joined, as the reference loops see them.
  std::vector<double> current() const {
    std::vector<double> p = values(x), q = values(y);
    p.insert(p.end(), q.begin(), q.end());
    return p;
  }
};

// Checks the joined values of x and y against a reference.
inline void check_quadratic(const Quadratic& q, const std::vector<double>& expected, double rel = 1e-12) {
  check_values(q.x, {expected[0], expected[1]}, rel);
  check_values(q.y, {expected[2], expected[3], expected[4]}, rel);
}

// The whole-tensor bits of two state dicts agree: same names, shapes, dtypes and values.
inline bool identical(const nn::NamedTensors& a, const nn::NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || a[i].second.shape() != b[i].second.shape() ||
        a[i].second.dtype() != b[i].second.dtype())
      return false;
    // serialize_safetensors gives the raw bytes: equal bytes mean bit-identical values.
    if (nn::serialize_safetensors({a[i]}) != nn::serialize_safetensors({b[i]})) return false;
  }
  return true;
}

}  // namespace cppgrad::optimtest
