// The fast form of layer_norm: its row loops, forward and backward (skip it on a first reading:
// the reference is the formula as tensor ops, autograd/ops_nn.cpp, which autograd differentiates;
// tests/autograd/test_fast_forms.cpp checks these loops against it). The one place layer_norm's
// derivative is written. Each sum keeps eight partial sums (row_sum.h), so the additions no longer
// wait on each other and the loop vectorises; each loop is compiled once per vector unit
// (runtime/simd_clones.h), every version adding in the same order.
#include "tensor/kernels/fast/norm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "runtime/simd_clones.h"
#include "tensor/iterate.h"
#include "tensor/kernels/fast/row_sum.h"

namespace cppgrad::kernels::fast {

namespace {

// The mean and 1/std of a row of finite float64 values whose squares pass the double range
// (|x| beyond about 1e154): computed on the row scaled by a power of two, exactly, so that its
// largest |x| is near 1. At that size eps is far below the variance and drops out. A row with
// inf or NaN stays NaN, as it would unscaled.
template <class T>
std::pair<double, double> scaled_moments(const T* xr, int64_t width) {
  // peak: the largest |x|, NaN when any is (std::max would skip a NaN, and a row of NaN and
  // zeros would ask ilogb for the exponent of 0)
  double peak = 0;
  for (int64_t j = 0; j < width; ++j) {
    const double a = std::abs(double(xr[j]));
    peak = std::isnan(a) ? a : std::max(peak, a);
    if (std::isnan(peak)) break;
  }
  if (!std::isfinite(peak)) return {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  const double scale = std::ldexp(1.0, -std::ilogb(peak)), n = static_cast<double>(width);
  const double mu = row_sum(width, [&](int64_t j) { return xr[j] * scale; }) / n;
  const double squares = row_sum(width, [&](int64_t j) { return (xr[j] * scale - mu) * (xr[j] * scale - mu); });
  return {mu / scale, scale / std::sqrt(squares / n)};
}

// The rows [begin, end) of the forward: mean, 1/std and y of each. Compiled once per vector unit
// (runtime/simd_clones.h); every sum keeps its eight partial sums in lanes, so each version adds
// in the same order and gives the same bits.
template <class T, bool Affine>
CPPGRAD_SIMD_CLONES void layer_norm_rows(int64_t begin, int64_t end, int64_t width, double eps, const T* __restrict in,
                                         const T* __restrict w, const T* __restrict b, T* __restrict y,
                                         T* __restrict mean, T* __restrict rstd) {
  const double n = static_cast<double>(width);
  for (int64_t row = begin; row < end; ++row) {
    const T* xr = in + row * width;
    T* yr = y + row * width;
    double mu = row_sum(width, [&](int64_t j) { return double(xr[j]); }) / n;
    // two passes: Σ(x - mean)² does not cancel as Σx² - N·mean² can
    const double squares = row_sum(width, [&](int64_t j) { return (xr[j] - mu) * (xr[j] - mu); });
    double inv_std = 1.0 / std::sqrt(squares / n + eps);
    if (!std::isfinite(squares)) std::tie(mu, inv_std) = scaled_moments(xr, width);
    const T m = static_cast<T>(mu), s = static_cast<T>(inv_std);
    mean[row] = m;
    rstd[row] = s;
    if constexpr (Affine)
      for (int64_t j = 0; j < width; ++j) yr[j] = (xr[j] - m) * s * w[j] + b[j];
    else
      for (int64_t j = 0; j < width; ++j) yr[j] = (xr[j] - m) * s;
  }
}

// ---- layer_norm's derivative, the one place it is written ---------------------------------------
// dx of the rows [begin, end), with ĝ = dy ⊙ w (Weighted) or dy and x̂ = (x − mean)·rstd:
// dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ ⊙ x̂))
template <class T, bool Weighted>
CPPGRAD_SIMD_CLONES void layer_norm_backward_rows(int64_t begin, int64_t end, int64_t width, const T* __restrict xs,
                                                  const T* __restrict gs, const T* __restrict w,
                                                  const T* __restrict mu, const T* __restrict rs, T* __restrict dx) {
  for (int64_t row = begin; row < end; ++row) {
    const T *xr = xs + row * width, *gr = gs + row * width;
    const T m = mu[row], s = rs[row];
    auto g_hat = [&](int64_t j) {
      if constexpr (Weighted) return gr[j] * w[j];
      else return gr[j];
    };
    // Σ ĝ and Σ ĝ ⊙ x̂ over the row
    const double sum_g = row_sum(width, [&](int64_t j) { return double(g_hat(j)); });
    const double sum_gx = row_sum(width, [&](int64_t j) { return double(g_hat(j) * ((xr[j] - m) * s)); });
    const T mean_g = static_cast<T>(sum_g / static_cast<double>(width));
    const T mean_gx = static_cast<T>(sum_gx / static_cast<double>(width));
    T* dr = dx + row * width;
    for (int64_t j = 0; j < width; ++j) dr[j] = s * (g_hat(j) - mean_g - (xr[j] - m) * s * mean_gx);
  }
}

// dw += Σ_rows dy ⊙ x̂ and db += Σ_rows dy over `width` columns of rows `ld` apart, the rows added
// in order (a column on one thread: the same bits at any thread count).
template <class T>
CPPGRAD_SIMD_CLONES void layer_norm_weight_grads(int64_t rows, int64_t width, int64_t ld, const T* __restrict xs,
                                                 const T* __restrict gs, const T* __restrict mu,
                                                 const T* __restrict rs, double* __restrict dw,
                                                 double* __restrict db) {
  for (int64_t row = 0; row < rows; ++row) {
    const T *xr = xs + row * ld, *gr = gs + row * ld;
    const T m = mu[row], s = rs[row];
    for (int64_t j = 0; j < width; ++j) {
      dw[j] += gr[j] * ((xr[j] - m) * s);
      db[j] += gr[j];
    }
  }
}

}  // namespace

// ---- the rows in blocks, on the threads ---------------------------------------------------------
template <class T>
void layer_norm_forward(int64_t rows, int64_t width, double eps, const T* x, const T* w, const T* b, T* y, T* mean,
                        T* rstd) {
  constexpr int64_t block = 16;  // rows per task
  parallel_for((rows + block - 1) / block, block * width * 4, [&](int64_t i) {
    const int64_t begin = i * block, end = std::min(rows, begin + block);
    if (w)
      layer_norm_rows<T, true>(begin, end, width, eps, x, w, b, y, mean, rstd);
    else
      layer_norm_rows<T, false>(begin, end, width, eps, x, w, b, y, mean, rstd);
  });
}

template <class T>
void layer_norm_input_grad(int64_t rows, int64_t width, const T* x, const T* g, const T* w, const T* mean,
                           const T* rstd, T* dx) {
  constexpr int64_t block = 16;  // rows per task
  parallel_for((rows + block - 1) / block, block * width * 6, [&](int64_t i) {
    const int64_t begin = i * block, end = std::min(rows, begin + block);
    if (w)
      layer_norm_backward_rows<T, true>(begin, end, width, x, g, w, mean, rstd, dx);
    else
      layer_norm_backward_rows<T, false>(begin, end, width, x, g, w, mean, rstd, dx);
  });
}

template <class T>
void layer_norm_affine_grads(int64_t rows, int64_t width, const T* x, const T* g, const T* mean, const T* rstd,
                             double* dw, double* db) {
  parallel_for_columns(width, rows * 4, [&](int64_t first, int64_t columns) {
    layer_norm_weight_grads<T>(rows, columns, width, x + first, g + first, mean, rstd, dw + first, db + first);
  });
}

#define CPPGRAD_LAYER_NORM_INSTANCES(T)                                                                             \
  template void layer_norm_forward<T>(int64_t, int64_t, double, const T*, const T*, const T*, T*, T*, T*);        \
  template void layer_norm_input_grad<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, const T*, T*); \
  template void layer_norm_affine_grads<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, double*, double*);
CPPGRAD_LAYER_NORM_INSTANCES(float)
CPPGRAD_LAYER_NORM_INSTANCES(double)
#undef CPPGRAD_LAYER_NORM_INSTANCES

}  // namespace cppgrad::kernels::fast
