// The vectorised float32 forms of the transcendental unary rows (exp, log, tanh, sigmoid, silu,
// erf, gelu, gelu_tanh) and of their backwards: loops over contiguous floats built on
// vector_math.h, compiled once per vector unit and chosen when the program starts
// (runtime/simd_clones.h). Every clone does the same IEEE operations in the same order (no
// fused multiply-add: -ffp-contract=off), so each gives the same bits as the others.
//
// The scalar reference (the row's forward column, std::erf and friends in float) stays what
// reference mode runs. The two differ by the reference's own rounding: both are within 2 ulp of
// the exact function where the float formula does not cancel (tests/tensor/test_unary_floats.cpp
// sweeps the float range), and this form stays within 1 ulp where it does (GELU below -3).
// Measured in bench/bench_unary (figures in bench/README.md). A first reading skips this file.
#include "tensor/kernels/fast/unary_floats.h"

#include "runtime/profile.h"
#include "runtime/simd_clones.h"
#include "tensor/iterate.h"
#include "tensor/kernels/fast/vector_math.h"
#include "tensor/op_tables.h"

namespace cppgrad::kernels::fast {

namespace {

using namespace op_constants;
constexpr double inv_sqrt2pi = inv_sqrt_2pi;

// ---- forwards: y = f(x) ---------------------------------------------------------------------
CPPGRAD_SIMD_CLONES void exp_floats(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(vmath::exp(x[i]));
}
CPPGRAD_SIMD_CLONES void log_floats(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(vmath::log(x[i]));
}
CPPGRAD_SIMD_CLONES void tanh_floats(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(vmath::tanh(x[i]));
}
CPPGRAD_SIMD_CLONES void sigmoid_floats(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(vmath::sigmoid(x[i]));
}
CPPGRAD_SIMD_CLONES void silu_floats(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double a = x[i];
    y[i] = static_cast<float>(a * vmath::sigmoid(a));
  }
}
CPPGRAD_SIMD_CLONES void erf_floats(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(vmath::erf(x[i]));
}
// GELU(x) = x·Φ(x)
CPPGRAD_SIMD_CLONES void gelu_floats(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double a = x[i];
    y[i] = static_cast<float>(a * vmath::normal_cdf(a));
  }
}
// ½x(1 + tanh u) = x·σ(2u), u = k(x + c·x³)
CPPGRAD_SIMD_CLONES void gelu_tanh_floats(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double a = x[i];
    const double u = gelu_k * (a + gelu_c * a * a * a);
    y[i] = static_cast<float>(a * vmath::sigmoid(2.0 * u));
  }
}

// ---- backwards: dA = g·f'(A) ----------------------------------------------------------------
// erf: dA = dC · 2/√π · e^{−A²}
CPPGRAD_SIMD_CLONES void erf_backward_floats(const float* g, const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double a = x[i];
    out[i] = static_cast<float>(g[i] * (two_over_sqrtpi * vmath::exp(-(a * a))));
  }
}
// silu: dA = dC · σ(A)·(1 + A·σ(−A))
CPPGRAD_SIMD_CLONES void silu_backward_floats(const float* g, const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double a = x[i];
    out[i] = static_cast<float>(g[i] * (vmath::sigmoid(a) * (1.0 + a * vmath::sigmoid(-a))));
  }
}
// gelu: dA = dC · (Φ(A) + A·φ(A))
CPPGRAD_SIMD_CLONES void gelu_backward_floats(const float* g, const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double a = x[i];
    const double density = vmath::exp(-0.5 * a * a) * inv_sqrt2pi;
    out[i] = static_cast<float>(g[i] * (vmath::normal_cdf(a) + a * density));
  }
}
// gelu_tanh: dA = dC · (½(1 + tanh u) + ½A(1 − tanh² u)·k(1 + 3c·A²)) = dC · (s + 2A·s·s̄·k(1 + 3c·A²)),
// s = σ(2u), s̄ = σ(−2u) = 1 − s (½(1 + tanh u) = s, 1 − tanh² u = 4s·s̄)
CPPGRAD_SIMD_CLONES void gelu_tanh_backward_floats(const float* g, const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double a = x[i];
    const double u = gelu_k * (a + gelu_c * a * a * a);
    const double s = vmath::sigmoid(2.0 * u), s_bar = vmath::sigmoid(-2.0 * u);
    out[i] = static_cast<float>(g[i] * (s + 2.0 * a * s * s_bar * gelu_k * (1.0 + 3.0 * gelu_c * a * a)));
  }
}

using Forward = void (*)(const float*, float*, int64_t);
using Backward = void (*)(const float*, const float*, float*, int64_t);

Forward forward_of(Unary op) {
  switch (op) {
    case Unary::Exp: return exp_floats;
    case Unary::Log: return log_floats;
    case Unary::Tanh: return tanh_floats;
    case Unary::Sigmoid: return sigmoid_floats;
    case Unary::Silu: return silu_floats;
    case Unary::Erf: return erf_floats;
    case Unary::Gelu: return gelu_floats;
    case Unary::GeluTanh: return gelu_tanh_floats;
    default: return nullptr;
  }
}

// The backwards that save the input A (the others' are products of g and the saved output C).
Backward backward_of(Unary op) {
  switch (op) {
    case Unary::Erf: return erf_backward_floats;
    case Unary::Silu: return silu_backward_floats;
    case Unary::Gelu: return gelu_backward_floats;
    case Unary::GeluTanh: return gelu_tanh_backward_floats;
    default: return nullptr;
  }
}

// Blocks of a fixed size, spread over the threads: which element a block holds does not depend
// on the thread count. ~20 operations an element.
constexpr int64_t kBlock = 4096;
template <class Body>
void in_blocks(int64_t n, Body body) {
  parallel_for((n + kBlock - 1) / kBlock, kBlock * 20, [&](int64_t b) {
    const int64_t start = b * kBlock;
    body(start, std::min(kBlock, n - start));
  });
}

const char* backward_name(Unary op) {
  switch (op) {
    case Unary::Erf: return "erf_backward";
    case Unary::Silu: return "silu_backward";
    case Unary::Gelu: return "gelu_backward";
    default: return "gelu_tanh_backward";
  }
}

bool contiguous_float32(const Tensor& t) { return t.dtype() == kFloat32 && t.is_contiguous(); }

}  // namespace

bool has_vector_form(Unary op) { return forward_of(op) != nullptr; }

bool unary_floats(Unary op, const Tensor& in, const Tensor& out) {
  const Forward f = forward_of(op);
  if (f == nullptr || !contiguous_float32(in) || !contiguous_float32(out) || in.shape() != out.shape()) return false;
  const float* x = in.data<float>();
  float* y = out.data<float>();
  in_blocks(in.numel(), [&](int64_t start, int64_t n) { f(x + start, y + start, n); });
  return true;
}

Tensor unary_backward_floats(Unary op, const Tensor& grad, const Tensor& input) {
  const Backward f = backward_of(op);
  if (f == nullptr || !contiguous_float32(grad) || !contiguous_float32(input) || grad.shape() != input.shape())
    return {};
  CPPGRAD_PROFILE_SCOPE(backward_name(op));
  Tensor out = empty(grad.shape(), kFloat32);
  const float* g = grad.data<float>();
  const float* x = input.data<float>();
  float* o = out.data<float>();
  in_blocks(grad.numel(), [&](int64_t start, int64_t n) { f(g + start, x + start, o + start, n); });
  return out;
}

}  // namespace cppgrad::kernels::fast
