// LayerNorm over the last N elements of each row, forward and backward in one pass each.
//
//   mean = Σ x / N,   rstd = 1 / √(Σ (x - mean)² / N + eps),   x̂ = (x - mean) · rstd
//   y = x̂ ⊙ w + b
//
// Backward, with ĝ = dy ⊙ w (or dy when there is no weight):
//   dx = rstd · (ĝ - mean(ĝ) - x̂ · mean(ĝ ⊙ x̂))      per row
//   dw = Σ_rows dy ⊙ x̂,   db = Σ_rows dy
//
// Written out as separate tensor ops this takes some nine passes forward and twenty backward;
// here each row is read once or twice while it sits in cache.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "runtime/profile.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "runtime/simd_clones.h"

namespace cppgrad::kernels {

namespace {

struct Rows {
  int64_t count, width;
};

Rows rows_of(const Tensor& x, int64_t normalized_numel, const char* op) {
  CPPGRAD_CHECK(normalized_numel >= 1 && x.numel() % normalized_numel == 0 && x.dim() >= 1,
                "{}: input {} cannot be split into rows of {} elements", op, shape_str(x.shape()), normalized_numel);
  return {x.numel() / normalized_numel, normalized_numel};
}

void check_affine(const Tensor& t, const Tensor& x, int64_t width, const char* what) {
  if (!t.defined()) return;
  CPPGRAD_CHECK(t.numel() == width && t.dtype() == x.dtype(), "layer_norm: {} {} ({}) does not match rows of {} {}",
                what, shape_str(t.shape()), dtype_name(t.dtype()), width, dtype_name(x.dtype()));
}

// Σ f(j) over a row with eight partial sums: the additions no longer wait on each other, so the
// loop vectorises. The order is fixed, so the result does not depend on the thread count.
// Always inlined, so that each vector unit's copy of a caller (below) gets its own vectorised copy.
template <class F>
[[gnu::always_inline]] inline double row_sum(int64_t width, F f) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= width; j += 8)
    for (int k = 0; k < 8; ++k) part[k] += f(j + k);
  for (; j < width; ++j) part[0] += f(j);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// The mean and 1/std of a row of finite float64 values whose squares pass the double range
// (|x| beyond about 1e154): computed on the row scaled by a power of two, exactly, so that its
// largest |x| is near 1. At that size eps is far below the variance and drops out. A row with
// inf or NaN stays NaN, as it would unscaled.
template <class T>
std::pair<double, double> scaled_moments(const T* xr, int64_t width) {
  double peak = 0;
  for (int64_t j = 0; j < width; ++j) peak = std::max(peak, std::abs(double(xr[j])));
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

// dx of the rows [begin, end), with ĝ = dy ⊙ w (Weighted) or dy.
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

// dw += Σ_rows dy ⊙ x̂ and db += Σ_rows dy, the rows added in order.
template <class T>
CPPGRAD_SIMD_CLONES void layer_norm_weight_grads(int64_t rows, int64_t width, const T* __restrict xs,
                                                 const T* __restrict gs, const T* __restrict mu,
                                                 const T* __restrict rs, double* __restrict dw,
                                                 double* __restrict db) {
  for (int64_t row = 0; row < rows; ++row) {
    const T *xr = xs + row * width, *gr = gs + row * width;
    const T m = mu[row], s = rs[row];
    for (int64_t j = 0; j < width; ++j) {
      dw[j] += gr[j] * ((xr[j] - m) * s);
      db[j] += gr[j];
    }
  }
}

}  // namespace

LayerNormResult layer_norm(const Tensor& input, int64_t normalized_numel, const Tensor& weight, const Tensor& bias,
                           double eps) {
  CPPGRAD_PROFILE_SCOPE("layer_norm");
  CPPGRAD_CHECK(input.is_floating_point(), "layer_norm: expected a floating dtype, got {}", dtype_name(input.dtype()));
  const Rows r = rows_of(input, normalized_numel, "layer_norm");
  check_affine(weight, input, r.width, "weight");
  check_affine(bias, input, r.width, "bias");
  Tensor x = contiguous(input);
  LayerNormResult out{empty(x.shape(), x.dtype()), empty({r.count}, x.dtype()), empty({r.count}, x.dtype())};
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    const Tensor weight_c = weight.defined() ? contiguous(weight) : Tensor(), bias_c = bias.defined() ? contiguous(bias) : Tensor();
    const T* w = weight.defined() ? weight_c.data<T>() : nullptr;
    const T* b = bias.defined() ? bias_c.data<T>() : nullptr;
    const T* in = x.data<T>();
    T *y = out.y.data<T>(), *mean = out.mean.data<T>(), *rstd = out.rstd.data<T>();
    // A weight without a bias (or the reverse) runs as affine with the missing one 1 (or 0):
    // v·1 and v + 0 are v exactly.
    const Tensor ones_row = w == nullptr && b != nullptr ? ones({r.width}, x.dtype()) : Tensor();
    const Tensor zeros_row = b == nullptr && w != nullptr ? zeros({r.width}, x.dtype()) : Tensor();
    if (ones_row.defined()) w = ones_row.data<T>();
    if (zeros_row.defined()) b = zeros_row.data<T>();
    constexpr int64_t block = 16;  // rows per task
    parallel_for((r.count + block - 1) / block, block * r.width * 4, [&](int64_t i) {
      const int64_t begin = i * block, end = std::min(r.count, begin + block);
      if (w)
        layer_norm_rows<T, true>(begin, end, r.width, eps, in, w, b, y, mean, rstd);
      else
        layer_norm_rows<T, false>(begin, end, r.width, eps, in, w, b, y, mean, rstd);
    });
  });
  return out;
}

LayerNormGrads layer_norm_backward(const Tensor& grad, const Tensor& input, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool need_input, bool need_weight, bool need_bias) {
  CPPGRAD_PROFILE_SCOPE("layer_norm_backward");
  const Rows r = rows_of(input, mean.numel() > 0 ? input.numel() / mean.numel() : 1, "layer_norm_backward");
  CPPGRAD_CHECK(grad.shape() == input.shape() && grad.dtype() == input.dtype() && rstd.numel() == r.count,
                "layer_norm_backward: grad {} does not match input {}", shape_str(grad.shape()), shape_str(input.shape()));
  check_affine(weight, input, r.width, "weight");
  Tensor x = contiguous(input), g = contiguous(grad);
  LayerNormGrads out;
  if (need_input) out.dx = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const Tensor weight_c = weight.defined() ? contiguous(weight) : Tensor();
    const T* w = weight.defined() ? weight_c.data<T>() : nullptr;
    const T *xs = x.data<T>(), *gs = g.data<T>(), *mu = mean.data<T>(), *rs = rstd.data<T>();
    if (need_input) {
      T* dx = out.dx.data<T>();
      constexpr int64_t block = 16;  // rows per task
      parallel_for((r.count + block - 1) / block, block * r.width * 6, [&](int64_t i) {
        const int64_t begin = i * block, end = std::min(r.count, begin + block);
        if (w)
          layer_norm_backward_rows<T, true>(begin, end, r.width, xs, gs, w, mu, rs, dx);
        else
          layer_norm_backward_rows<T, false>(begin, end, r.width, xs, gs, w, mu, rs, dx);
      });
    }
    if (need_weight || need_bias) {
      // Column sums over the rows, in row order on one thread: the same bits at any thread count.
      std::vector<double> dw(static_cast<size_t>(r.width), 0.0), db(static_cast<size_t>(r.width), 0.0);
      layer_norm_weight_grads<T>(r.count, r.width, xs, gs, mu, rs, dw.data(), db.data());
      auto to_tensor = [&](const std::vector<double>& acc) {
        Tensor t = empty({r.width}, x.dtype());
        for (int64_t j = 0; j < r.width; ++j) t.data<T>()[j] = static_cast<T>(acc[j]);
        return t;
      };
      if (need_weight) out.dweight = to_tensor(dw);
      if (need_bias) out.dbias = to_tensor(db);
    }
  });
  return out;
}

}  // namespace cppgrad::kernels
