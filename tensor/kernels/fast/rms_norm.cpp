// RMSNorm's rows in one pass each way (the fast form of the rms_norm op; its reference is the
// formula as tensor ops, nn/rmsnorm.cpp, which autograd differentiates: its derivative is written
// here alone). Over rows of N elements:
//
//   r = 1 / √(Σ x² / N + eps),   y = x · r ⊙ w
//   with x̂ = x · r and ĝ = dy ⊙ w:   dx = r · (ĝ − x̂ · mean(ĝ ⊙ x̂)),   dw = Σ_rows dy ⊙ x̂
//
// As separate ops the forward reads x four times and keeps three temporaries for the backward;
// here a row is read twice while it sits in cache, and only r (one number a row) is kept.
#include "tensor/kernels/fast/rms_norm.h"

#include <cmath>
#include <vector>

#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/fast/row_sum.h"

namespace cppgrad::kernels::fast {

namespace {

int64_t row_count(const Tensor& x, int64_t width) {
  CPPGRAD_CHECK(width >= 1 && x.dim() >= 1 && x.numel() % width == 0,
                "rms_norm: input {} cannot be split into rows of {} elements", shape_str(x.shape()), width);
  return x.numel() / width;
}

}  // namespace

RMSNormResult rms_norm(const Tensor& input, int64_t width, const Tensor& weight, double eps) {
  Tensor x = contiguous(input), w = weight.defined() ? contiguous(weight) : Tensor();
  const int64_t rows = row_count(x, width);
  RMSNormResult result{empty(x.shape(), x.dtype()), empty({rows}, x.dtype())};
  dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.data<T>();
    const T* ws = w.defined() ? w.data<T>() : nullptr;
    T* ys = result.y.data<T>();
    T* rs = result.rstd.data<T>();
    parallel_for(rows, width * 4, [=](int64_t i) {
      const T* xr = xs + i * width;
      const double squares = row_sum(width, [&](int64_t j) { return double(xr[j]) * xr[j]; });
      const double r = 1.0 / std::sqrt(squares / static_cast<double>(width) + eps);
      rs[i] = static_cast<T>(r);
      T* yr = ys + i * width;
      for (int64_t j = 0; j < width; ++j) yr[j] = static_cast<T>(xr[j] * r * (ws ? double(ws[j]) : 1.0));
    });
  });
  return result;
}

RMSNormGrads rms_norm_backward(const Tensor& grad, const Tensor& input, const Tensor& rstd, const Tensor& weight,
                               bool need_dx, bool need_dweight) {
  Tensor g = contiguous(grad), x = contiguous(input), w = weight.defined() ? contiguous(weight) : Tensor();
  const int64_t width = x.numel() / rstd.numel(), rows = rstd.numel();
  RMSNormGrads out;
  if (need_dx) out.dx = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "rms_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *xs = x.data<T>(), *gs = g.data<T>(), *rs = rstd.data<T>();
    const T* ws = w.defined() ? w.data<T>() : nullptr;
    if (need_dx) {
      T* dxs = out.dx.data<T>();
      parallel_for(rows, width * 6, [=](int64_t i) {
        const T *xr = xs + i * width, *gr = gs + i * width;
        const double r = rs[i];
        const double dot =  // Σ ĝ ⊙ x̂
            row_sum(width, [&](int64_t j) { return double(gr[j]) * (ws ? double(ws[j]) : 1.0) * xr[j] * r; });
        const double mean_dot = dot / static_cast<double>(width);
        T* dxr = dxs + i * width;
        for (int64_t j = 0; j < width; ++j)
          dxr[j] = static_cast<T>(r * (double(gr[j]) * (ws ? double(ws[j]) : 1.0) - xr[j] * r * mean_dot));
      });
    }
    if (need_dweight && ws) {
      std::vector<double> dw(static_cast<size_t>(width), 0.0);  // the rows added in order
      for (int64_t i = 0; i < rows; ++i) {
        const T *xr = xs + i * width, *gr = gs + i * width;
        const double r = rs[i];
        for (int64_t j = 0; j < width; ++j) dw[static_cast<size_t>(j)] += double(gr[j]) * xr[j] * r;
      }
      out.dweight = kernels::to(tensor(dw, Shape{width}), x.dtype());  // kernels::to: tensor/ may not call autograd's Tensor::to
    }
  });
  return out;
}

}  // namespace cppgrad::kernels::fast
