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

#include "tensor/profile.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"

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
template <class F>
double row_sum(int64_t width, F f) {
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
    const T* w = weight.defined() ? contiguous(weight).data<T>() : nullptr;
    const T* b = bias.defined() ? contiguous(bias).data<T>() : nullptr;
    const T* in = x.data<T>();
    T *y = out.y.data<T>(), *mean = out.mean.data<T>(), *rstd = out.rstd.data<T>();
    parallel_for(r.count, r.width * 4, [&](int64_t row) {
      const T* xr = in + row * r.width;
      T* yr = y + row * r.width;
      const double n = static_cast<double>(r.width);
      double mu = row_sum(r.width, [&](int64_t j) { return double(xr[j]); }) / n;
      // two passes: Σ(x - mean)² does not cancel as Σx² - N·mean² can
      const double squares = row_sum(r.width, [&](int64_t j) { return (xr[j] - mu) * (xr[j] - mu); });
      double inv_std = 1.0 / std::sqrt(squares / n + eps);
      if (!std::isfinite(squares)) std::tie(mu, inv_std) = scaled_moments(xr, r.width);
      const T m = static_cast<T>(mu), s = static_cast<T>(inv_std);
      mean[row] = m;
      rstd[row] = s;
      for (int64_t j = 0; j < r.width; ++j) {
        T v = (xr[j] - m) * s;
        if (w) v *= w[j];
        if (b) v += b[j];
        yr[j] = v;
      }
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
    const T* w = weight.defined() ? contiguous(weight).data<T>() : nullptr;
    const T *xs = x.data<T>(), *gs = g.data<T>(), *mu = mean.data<T>(), *rs = rstd.data<T>();
    if (need_input) {
      T* dx = out.dx.data<T>();
      parallel_for(r.count, r.width * 6, [&](int64_t row) {
        const T *xr = xs + row * r.width, *gr = gs + row * r.width;
        const T m = mu[row], s = rs[row];
        // Σ ĝ and Σ ĝ ⊙ x̂ over the row
        const double sum_g = row_sum(r.width, [&](int64_t j) { return double(w ? gr[j] * w[j] : gr[j]); });
        const double sum_gx =
            row_sum(r.width, [&](int64_t j) { return double((w ? gr[j] * w[j] : gr[j]) * ((xr[j] - m) * s)); });
        const T mean_g = static_cast<T>(sum_g / static_cast<double>(r.width));
        const T mean_gx = static_cast<T>(sum_gx / static_cast<double>(r.width));
        T* dr = dx + row * r.width;
        for (int64_t j = 0; j < r.width; ++j) {
          const T gh = w ? gr[j] * w[j] : gr[j];
          dr[j] = s * (gh - mean_g - (xr[j] - m) * s * mean_gx);
        }
      });
    }
    if (need_weight || need_bias) {
      // Column sums over the rows, in row order on one thread: the same bits at any thread count.
      std::vector<double> dw(static_cast<size_t>(r.width), 0.0), db(static_cast<size_t>(r.width), 0.0);
      for (int64_t row = 0; row < r.count; ++row) {
        const T *xr = xs + row * r.width, *gr = gs + row * r.width;
        const T m = mu[row], s = rs[row];
        for (int64_t j = 0; j < r.width; ++j) {
          dw[j] += gr[j] * ((xr[j] - m) * s);
          db[j] += gr[j];
        }
      }
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
