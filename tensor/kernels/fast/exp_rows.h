// The fast form of softmax's exp: exp over a contiguous row of floats, written so the compiler
// turns the loop into SIMD code. The reference (softmax.cpp's exp_shifted) calls std::exp.
//
// std::exp is a call into libm per element, which no compiler vectorises without -ffast-math,
// and softmax spent most of its time there. The float version below is the textbook method:
//
//   exp(x) = 2^n · exp(r),  n = round(x / ln 2),  r = x - n·ln 2  (|r| ≤ ln2/2)
//
// with exp(r) from a degree-6 polynomial (Cephes' single-precision coefficients) and 2^n built
// in the exponent bits. Error: within 2 ulp of the exact result on the whole float range; -inf
// and anything below the smallest normal's log give exactly 0, NaN stays NaN. float64 keeps
// std::exp: its results are compared with PyTorch's to 1e-10.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace cppgrad::kernels::fast {

inline float exp_float(float x) {
  constexpr float log2e = 1.44269504088896341f;
  constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;  // ln 2 = hi + lo, hi exact in few bits
  constexpr float hi = 88.3762626647949f;                            // exp overflows above
  constexpr float lo = -87.3365447504019f;                           // exp is subnormal below
  // Clamped into range, and NaN replaced by 0, so the conversion to int below is always defined.
  const float clamped = x < lo ? lo : (x > hi ? hi : (x == x ? x : 0.0f));
  const float n = std::floor(clamped * log2e + 0.5f);
  float r = clamped - n * ln2_hi;
  r = r - n * ln2_lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float two_to_n = std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  float y = p * two_to_n;
  y = x < lo ? 0.0f : y;
  y = x > hi ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;  // NaN in, NaN out
}

// row[j] = exp(row[j] - shift) for j < n, in place; returns the sum of the results. The float
// sum is taken in blocks, each block's float total added in double, so a long row (a
// vocabulary of 50k) loses no more than a short one. In place on purpose: given input and
// output pointers that may be equal, the compiler guards its vector loop with an overlap check,
// which equal pointers fail, and runs the scalar loop instead.
// Compiled for each vector unit (runtime/simd_clones.h), in exp_rows.cpp.
// With `visible` < n, entries from `visible` on are known to be -inf (keys a causal mask or a
// window hides from this row, in fused attention): they are written 0, exp's result for them,
// without computing it, and summed as before, so the same bits as the full row.
double exp_shifted_row(float* row, int64_t n, float shift, int64_t visible);
inline double exp_shifted_row(float* row, int64_t n, float shift) { return exp_shifted_row(row, n, shift, n); }

inline double exp_shifted_row(double* row, int64_t n, double shift, int64_t visible) {
  double total = 0;
  for (int64_t j = 0; j < n; ++j) {
    row[j] = j < visible ? std::exp(row[j] - shift) : 0.0;
    total += row[j];
  }
  return total;
}
inline double exp_shifted_row(double* row, int64_t n, double shift) { return exp_shifted_row(row, n, shift, n); }

// Σ_j exp(row[j] - shift) for j < n, the exps not kept (log_softmax needs only their sum): the
// same blocks as exp_shifted_row. Compiled for each vector unit, in exp_rows.cpp.
double exp_shifted_sum(const float* row, int64_t n, float shift);

inline double exp_shifted_sum(const double* row, int64_t n, double shift) {
  double total = 0;
  for (int64_t j = 0; j < n; ++j) total += std::exp(row[j] - shift);
  return total;
}

// dx = g - exp(y)·sum over a float row of n entries `step` apart: log_softmax's backward, exp as
// the unary table's vector column computes it (in double, rounded once), so the bits of the
// formula as tensor ops. Compiled for each vector unit, in exp_rows.cpp.
void log_softmax_backward_row(const float* y, const float* g, float sum, float* dx, int64_t n, int64_t step);

// dx = 0 − exp(x − m − log_total)·sum over a float row of n entries: log_softmax's backward
// (the row above) where the gradient is zero, with y = x − m − log_total made again as
// log_softmax makes it: the fused cross-entropy's backward (log_softmax_nll.cpp), with the bits
// of log_softmax then gather. Compiled for each vector unit, in exp_rows.cpp.
void log_softmax_backward_of_zero_row(const float* x, float m, float log_total, float sum, float* dx, int64_t n);

// A contiguous row's max, or -inf for a row of -inf (or NaN: x > m is false for it, so it is
// skipped). Written as the compare-and-select a vector max instruction does, which the compiler
// turns into one; std::max's form it left a scalar loop, an element per cycle of latency.
template <class T>
T contiguous_row_max(const T* x, int64_t size) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < size; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// log Σ_j exp(x_j − m) of a contiguous row and its max m: log_softmax's row is x − m − that.
template <class T>
T log_total_of_row(const T* x, int64_t size, T m) {
  return static_cast<T>(std::log(exp_shifted_sum(x, size, m)));
}

// One contiguous row of softmax (Log false) or log_softmax (Log true), y = f(x): the reference
// row of softmax.cpp with stride 1 known, so that the compiler vectorises its loops, and with
// the vectorised exp above. Returns false, writing nothing, for a row whose max is -inf (every
// entry masked, or a NaN), which the reference handles.
template <class T, bool Log>
bool softmax_contiguous_row(const T* x, T* y, int64_t size) {
  const T m = contiguous_row_max(x, size);
  if (m == -std::numeric_limits<T>::infinity()) return false;
  if (Log) {  // y = x - m - log Σ exp(x - m): the exps are summed, not kept
    const T log_total = log_total_of_row(x, size, m);
#pragma omp simd
    for (int64_t j = 0; j < size; ++j) y[j] = x[j] - m - log_total;
  } else {
    std::copy(x, x + size, y);
    const T scale = static_cast<T>(1.0 / exp_shifted_row(y, size, m));
#pragma omp simd
    for (int64_t j = 0; j < size; ++j) y[j] *= scale;
  }
  return true;
}

}  // namespace cppgrad::kernels::fast
