// LayerNorm over the last N elements of each row, forward and backward.
//
//   mean = Σ x / N,   rstd = 1 / √(Σ (x - mean)² / N + eps),   x̂ = (x - mean) · rstd
//   y = x̂ ⊙ w + b
//
// Backward, with ĝ = dy ⊙ w (or dy when there is no weight):
//   dx = rstd · (ĝ - mean(ĝ) - x̂ · mean(ĝ ⊙ x̂))      per row
//   dw = Σ_rows dy ⊙ x̂,   db = Σ_rows dy
//
// Written out as separate tensor ops this takes some nine passes forward and twenty backward;
// here each row is read once or twice while it sits in cache. The loops below are the
// reference; their fast form (fast/norm.cpp) sums in eight lanes so that they vectorise.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "runtime/reference_mode.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/fast/norm.h"
#include "tensor/kernels/traced.h"

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

// layer_norm's arguments checked; the shape of a row.
Shape layer_norm_row_shape(const Tensor& x, int64_t normalized_dims, const Tensor& weight, const Tensor& bias) {
  CPPGRAD_CHECK(x.is_floating_point(), "layer_norm: expected a floating dtype, got {}", dtype_name(x.dtype()));
  CPPGRAD_CHECK(normalized_dims >= 1 && normalized_dims <= x.dim(), "layer_norm: cannot normalise the last {} dims of {}",
                normalized_dims, shape_str(x.shape()));
  const Shape row_shape(x.shape().end() - normalized_dims, x.shape().end());
  for (const Tensor* t : {&weight, &bias})
    CPPGRAD_CHECK(!t->defined() || (t->shape() == row_shape && t->dtype() == x.dtype()),
                  "layer_norm: weight or bias {} {} should be {} {} for input {}", shape_str(t->shape()),
                  dtype_name(t->dtype()), shape_str(row_shape), dtype_name(x.dtype()), shape_str(x.shape()));
  return row_shape;
}

// The mean of a row of values x·scale, and the sum of their squared distances to it. Two
// passes: Σ(x - mean)² does not cancel as Σx² - N·mean² can.
template <class T>
std::pair<double, double> mean_and_squares(const T* xr, int64_t width, double scale) {
  double sum = 0;
  for (int64_t j = 0; j < width; ++j) sum += xr[j] * scale;
  const double mu = sum / static_cast<double>(width);
  double squares = 0;
  for (int64_t j = 0; j < width; ++j) squares += (xr[j] * scale - mu) * (xr[j] * scale - mu);
  return {mu, squares};
}

// The mean and 1/std of a row. A float64 row whose squares pass the double range (|x| beyond
// about 1e154) gets them from the row scaled by a power of two, exactly, so that its largest
// |x| is near 1; at that size eps is far below the variance and drops out. A row with inf or
// NaN stays NaN.
template <class T>
std::pair<double, double> row_moments(const T* xr, int64_t width, double eps) {
  const double n = static_cast<double>(width);
  const auto [mu, squares] = mean_and_squares(xr, width, 1.0);
  if (std::isfinite(squares)) return {mu, 1.0 / std::sqrt(squares / n + eps)};
  double peak = 0;
  for (int64_t j = 0; j < width; ++j) peak = std::max(peak, std::abs(double(xr[j])));
  if (!std::isfinite(peak)) return {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  const double scale = std::ldexp(1.0, -std::ilogb(peak));
  const auto [scaled_mu, scaled_squares] = mean_and_squares(xr, width, scale);
  return {scaled_mu / scale, scale / std::sqrt(scaled_squares / n)};
}

template <class T>
void layer_norm_rows(int64_t rows, int64_t width, double eps, const T* x, const T* w, const T* b, T* y, T* mean,
                     T* rstd) {
  parallel_for(rows, width * 4, [&](int64_t row) {
    const T* xr = x + row * width;
    T* yr = y + row * width;
    const auto [mu, inv_std] = row_moments(xr, width, eps);
    const T m = static_cast<T>(mu), s = static_cast<T>(inv_std);
    mean[row] = m;
    rstd[row] = s;
    for (int64_t j = 0; j < width; ++j) yr[j] = w ? (xr[j] - m) * s * w[j] + b[j] : (xr[j] - m) * s;
  });
}

template <class T>
void layer_norm_input_grad(int64_t rows, int64_t width, const T* x, const T* g, const T* w, const T* mean,
                           const T* rstd, T* dx) {
  parallel_for(rows, width * 6, [&](int64_t row) {
    const T *xr = x + row * width, *gr = g + row * width;
    const T m = mean[row], s = rstd[row];
    double sum_g = 0, sum_gx = 0;  // Σ ĝ and Σ ĝ ⊙ x̂ over the row
    for (int64_t j = 0; j < width; ++j) {
      const T g_hat = w ? gr[j] * w[j] : gr[j];
      sum_g += g_hat;
      sum_gx += g_hat * ((xr[j] - m) * s);
    }
    const T mean_g = static_cast<T>(sum_g / static_cast<double>(width));
    const T mean_gx = static_cast<T>(sum_gx / static_cast<double>(width));
    T* dr = dx + row * width;
    for (int64_t j = 0; j < width; ++j) {
      const T g_hat = w ? gr[j] * w[j] : gr[j];
      dr[j] = s * (g_hat - mean_g - (xr[j] - m) * s * mean_gx);
    }
  });
}

// Column sums over the rows, in row order on one thread: the same bits at any thread count.
template <class T>
void layer_norm_affine_grads(int64_t rows, int64_t width, const T* x, const T* g, const T* mean, const T* rstd,
                             double* dw, double* db) {
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t j = 0; j < width; ++j) {
      dw[j] += g[row * width + j] * ((x[row * width + j] - mean[row]) * rstd[row]);
      db[j] += g[row * width + j];
    }
}

}  // namespace

LayerNormResult layer_norm(const Tensor& input, int64_t normalized_dims, const Tensor& weight, const Tensor& bias,
                           double eps) {
  CPPGRAD_PROFILE_KERNEL("layer_norm", input, weight, bias);
  int64_t width = 1;
  for (int64_t n : layer_norm_row_shape(input, normalized_dims, weight, bias)) width *= n;
  const Rows r = rows_of(input, width, "layer_norm");
  Tensor x = contiguous(input);
  LayerNormResult out{empty(x.shape(), x.dtype()), empty({r.count}, x.dtype()), empty({r.count}, x.dtype())};
  // A weight without a bias (or the reverse) runs as affine with the missing one 1 (or 0):
  // v·1 and v + 0 are v exactly.
  const bool affine = weight.defined() || bias.defined();
  const Tensor w = !affine ? Tensor() : weight.defined() ? contiguous(weight) : ones({r.width}, x.dtype());
  const Tensor b = !affine ? Tensor() : bias.defined() ? contiguous(bias) : zeros({r.width}, x.dtype());
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* wp = affine ? w.data<T>() : nullptr;
    const T* bp = affine ? b.data<T>() : nullptr;
    auto rows = reference_mode() ? layer_norm_rows<T> : fast::layer_norm_forward<T>;
    rows(r.count, r.width, eps, x.data<T>(), wp, bp, out.y.data<T>(), out.mean.data<T>(), out.rstd.data<T>());
  });
  return out;
}

LayerNormGrads layer_norm_backward(const Tensor& grad, const Tensor& input, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool need_input, bool need_weight, bool need_bias) {
  CPPGRAD_PROFILE_KERNEL("layer_norm_backward", grad, input, weight);
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
    const bool reference = reference_mode();
    if (need_input)
      (reference ? layer_norm_input_grad<T> : fast::layer_norm_input_grad<T>)(r.count, r.width, xs, gs, w, mu, rs,
                                                                               out.dx.data<T>());
    if (need_weight || need_bias) {
      std::vector<double> dw(static_cast<size_t>(r.width), 0.0), db(static_cast<size_t>(r.width), 0.0);
      (reference ? layer_norm_affine_grads<T> : fast::layer_norm_affine_grads<T>)(r.count, r.width, xs, gs, mu, rs,
                                                                                   dw.data(), db.data());
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
