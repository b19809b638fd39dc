// softmax and log_softmax along one dim, computed stably.
//
//   softmax(x)_i     = exp(x_i - m) / Σ_j exp(x_j - m),  m = max_j x_j
//   log_softmax(x)_i = (x_i - m) - log Σ_j exp(x_j - m)
//
// Subtracting the max keeps exp() in range for inputs like ±1e4. A row whose every entry is
// -inf (a fully masked attention row) has no finite max: it gives zeros for softmax and -inf for
// log_softmax instead of NaN (PyTorch gives NaN there). A NaN anywhere in a row makes the whole
// row NaN, as in PyTorch: std::max skips a NaN, so a row whose max came out -inf is searched for
// one before it is taken for a masked row (a diverging model must not go silent).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/reference_mode.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/fast/exp_rows.h"
#include "tensor/kernels/impl.h"
#include "tensor/kernels/pairwise_sum.h"

namespace cppgrad::kernels {

namespace {

// ---- softmax's rows ------------------------------------------------------------------------

// One row of softmax (Log false) or log_softmax (Log true): x and y point at the row's first
// entry and step by `step`.
template <class T, bool Log>
void softmax_row(const T* x, T* y, int64_t size, int64_t step) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < size; ++j) m = std::max(m, x[j * step]);
  if (m == -std::numeric_limits<T>::infinity()) {
    // Every entry masked: zeros (softmax) or -inf (log_softmax). But std::max skips a NaN, so
    // a NaN anywhere makes the whole row NaN, as in PyTorch. (The loop stops at the first
    // NaN: without the break, GCC 12 at -O3 vectorises it and loses the NaN for doubles.)
    T value = Log ? -std::numeric_limits<T>::infinity() : T(0);
    for (int64_t j = 0; j < size; ++j)
      if (std::isnan(x[j * step])) {
        value = std::numeric_limits<T>::quiet_NaN();
        break;
      }
    for (int64_t j = 0; j < size; ++j) y[j * step] = value;
    return;
  }
  double total = 0;  // Σ_j exp(x_j - m)
  for (int64_t j = 0; j < size; ++j) {
    const T e = std::exp(x[j * step] - m);
    if (!Log) y[j * step] = e;
    total += e;
  }
  if (Log) {
    const T log_total = static_cast<T>(std::log(total));
    for (int64_t j = 0; j < size; ++j) y[j * step] = x[j * step] - m - log_total;
  } else {
    const T scale = static_cast<T>(1.0 / total);
    for (int64_t j = 0; j < size; ++j) y[j * step] *= scale;
  }
}

// ---- the kernels: shapes and dtypes --------------------------------------------------------

// A row through the fast form when it is contiguous (the fast form declines a masked row).
template <class T, bool Log>
void softmax_row_fast_or_reference(const T* x, T* y, int64_t size, int64_t step) {
  if (step == 1 && !reference_mode() && fast::softmax_contiguous_row<T, Log>(x, y, size)) return;
  softmax_row<T, Log>(x, y, size, step);
}

template <class T, bool Log>
void softmax_rows(const T* in, T* out, int64_t rows, int64_t inner, int64_t size) {
  // Row r (outer index o, inner index i) starts at o*size*inner + i and steps by `inner`.
  parallel_for(rows, size * 8, [&](int64_t r) {
    const int64_t o = r / inner, i = r % inner;
    softmax_row_fast_or_reference<T, Log>(in + o * size * inner + i, out + o * size * inner + i, size, inner);
  });
}

template <bool Log>
Tensor softmax_impl(const Tensor& t, int64_t dim, const char* op) {
  Tensor x = contiguous(t);
  Tensor out = empty(x.shape(), x.dtype());
  if (x.numel() == 0) return out;
  if (x.dim() == 0) {
    dim = wrap_dim(dim, 0, op);
    fill_(out, Log ? 0.0 : 1.0);
    return out;
  }
  dim = wrap_dim(dim, x.dim(), op);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  const int64_t size = x.shape()[dim];
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    softmax_rows<T, Log>(x.data<T>(), out.data<T>(), outer * inner, inner, size);
  });
  return out;
}

}  // namespace

Tensor impl::softmax(const Tensor& t, int64_t dim) { return softmax_impl<false>(t, dim, "softmax"); }
Tensor impl::log_softmax(const Tensor& t, int64_t dim) { return softmax_impl<true>(t, dim, "log_softmax"); }

// softmax(scale · x + mask) over the last dim, in one pass per row. mask (broadcast to x) is
// bool (true hides the key: -inf) or floating (added to the score); `causal` also hides key j
// from query i when j > i, i being the index along x's second-to-last dim.
Tensor impl::masked_softmax(const Tensor& scores, const Tensor& mask, bool causal, double scale) {
  CPPGRAD_CHECK(scores.is_floating_point() && scores.dim() >= 1, "masked_softmax: expected floating scores, got {} {}",
                dtype_name(scores.dtype()), shape_str(scores.shape()));
  CPPGRAD_CHECK(!causal || scores.dim() >= 2, "masked_softmax: a causal mask needs (..., T, S) scores, got {}",
                shape_str(scores.shape()));
  Tensor x = contiguous(scores);
  Tensor out = empty(x.shape(), x.dtype());
  if (x.numel() == 0) return out;
  const int64_t S = x.shape().back(), T_len = causal ? x.shape()[x.dim() - 2] : 1, rows = x.numel() / S;
  Tensor m;
  if (mask.defined()) {
    CPPGRAD_CHECK(mask.dim() <= x.dim(), "masked_softmax: mask {} has more dims than scores {}",
                  shape_str(mask.shape()), shape_str(x.shape()));
    m = expand(mask.dtype() == kBool ? mask : to(mask, x.dtype()), x.shape());  // a view: strides 0 where broadcast
  }
  const Shape row_shape(x.shape().begin(), x.shape().end() - 1);
  dispatch_floating(x.dtype(), "masked_softmax", [&](auto tag) {
    using T = decltype(tag);
    const T minus_inf = -std::numeric_limits<T>::infinity(), k = static_cast<T>(scale);
    const T* in = x.data<T>();
    T* y = out.data<T>();
    const bool* hidden = m.defined() && m.dtype() == kBool ? m.data<bool>() : nullptr;
    const T* added = m.defined() && m.dtype() != kBool ? m.data<T>() : nullptr;
    parallel_for(rows, S * 8, [&](int64_t row) {
      const T* xr = in + row * S;
      T* yr = y + row * S;
      // where this row's mask starts: the row's index, digit by digit, times the mask's strides
      int64_t mask_offset = 0, rest = row;
      if (m.defined())
        for (int64_t d = static_cast<int64_t>(row_shape.size()) - 1; d >= 0; --d) {
          mask_offset += (rest % row_shape[d]) * m.strides()[d];
          rest /= row_shape[d];
        }
      const int64_t mask_step = m.defined() ? m.strides().back() : 0;
      const int64_t visible = causal ? std::min(S, row % T_len + 1) : S;  // keys 0..i when causal
      for (int64_t j = 0; j < S; ++j) {
        T z = j < visible ? k * xr[j] : minus_inf;
        if (hidden && hidden[mask_offset + j * mask_step]) z = minus_inf;
        if (added) z += added[mask_offset + j * mask_step];
        yr[j] = z;
      }
      softmax_row_fast_or_reference<T, false>(yr, yr, S, 1);  // every key hidden: zeros, not NaN
    });
  });
  return out;
}

namespace {

// A softmax backward's operands: y and g contiguous, the output made, and the rows along `dim`
// (as softmax_rows has them). No rows for an empty or 0-d input, whose output is then set.
struct BackwardRows {
  Tensor y, g, out;
  int64_t inner = 1, size = 1, rows = 0;
};
BackwardRows backward_rows(const char* op, const Tensor& output, const Tensor& grad, int64_t dim) {
  CPPGRAD_CHECK(output.shape() == grad.shape() && output.dtype() == grad.dtype() && output.is_floating_point(),
                "{}: output {} and grad {} differ", op, shape_str(output.shape()), shape_str(grad.shape()));
  BackwardRows r{contiguous(output), contiguous(grad), empty(output.shape(), output.dtype())};
  if (r.y.numel() == 0) return r;
  if (r.y.dim() == 0) {  // a softmax over nothing is the constant 1, a log_softmax the constant 0
    fill_(r.out, 0.0);
    return r;
  }
  dim = wrap_dim(dim, r.y.dim(), op);
  for (int64_t d = dim + 1; d < r.y.dim(); ++d) r.inner *= r.y.shape()[d];
  r.size = r.y.shape()[dim];
  r.rows = r.y.numel() / r.size;
  return r;
}
int64_t row_start(const BackwardRows& r, int64_t row) { return (row / r.inner) * r.size * r.inner + row % r.inner; }

}  // namespace

// The gradient of softmax along `dim` from its output y: y ⊙ (g - Σ_dim g ⊙ y).
Tensor impl::softmax_backward(const Tensor& output, const Tensor& grad, int64_t dim) {
  const BackwardRows r = backward_rows("softmax_backward", output, grad, dim);
  const int64_t inner = r.inner, size = r.size;
  dispatch_floating(r.y.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *ys = r.y.data<T>(), *gs = r.g.data<T>();
    T* dx = r.out.data<T>();
    parallel_for(r.rows, size * 4, [&](int64_t row) {
      const int64_t base = row_start(r, row);
      double dot = 0;
      for (int64_t j = 0; j < size; ++j) dot += gs[base + j * inner] * ys[base + j * inner];
      const T d = static_cast<T>(dot);
      for (int64_t j = 0; j < size; ++j) dx[base + j * inner] = ys[base + j * inner] * (gs[base + j * inner] - d);
    });
  });
  return r.out;
}

// The gradient of log_softmax along `dim` from its output y: g - exp(y) ⊙ Σ_dim g, each row read
// twice (its sum, then the gradient) where the formula as tensor ops (the create_graph path,
// autograd/ops_reduce.cpp) makes three tensors of the input's size. The same bits as the formula:
// each row's sum is reduce.cpp's pairwise sum, in its order (eight rows side by side, each on
// its own), and exp is the unary table's (std::exp, or in float32 its vector column, as the
// formula's exp takes).
Tensor impl::log_softmax_backward(const Tensor& output, const Tensor& grad, int64_t dim) {
  const BackwardRows r = backward_rows("log_softmax_backward", output, grad, dim);
  const int64_t inner = r.inner, size = r.size;
  constexpr int64_t kSideBySide = 8;
  const bool vector_exp = r.y.dtype() == kFloat32 && !reference_mode();
  dispatch_floating(r.y.dtype(), "log_softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *ys = r.y.data<T>(), *gs = r.g.data<T>();
    T* dx = r.out.data<T>();
    const int64_t groups = (r.rows + kSideBySide - 1) / kSideBySide;
    parallel_for(groups, size * kSideBySide * 8, [&](int64_t group) {
      const int64_t first = group * kSideBySide, count = std::min(kSideBySide, r.rows - first);
      int64_t starts[kSideBySide];
      for (int64_t k = 0; k < count; ++k) starts[k] = row_start(r, first + k);
      PairwiseSum pairwise(count);  // column k sums row first + k
      for (int64_t j = 0; j < size; ++j) {
        double* block = pairwise.block();
        for (int64_t k = 0; k < count; ++k) block[k] += gs[starts[k] + j * inner];
        pairwise.end_value();
      }
      double totals[kSideBySide];
      pairwise.totals(totals);
      for (int64_t k = 0; k < count; ++k) {
        const T sum = static_cast<T>(totals[k]);
        const int64_t b = starts[k];
        if constexpr (std::is_same_v<T, float>)
          if (vector_exp) {
            fast::log_softmax_backward_row(ys + b, gs + b, sum, dx + b, size, inner);
            continue;
          }
        for (int64_t j = 0; j < size; ++j) dx[b + j * inner] = gs[b + j * inner] - std::exp(ys[b + j * inner]) * sum;
      }
    });
  });
  return r.out;
}

}  // namespace cppgrad::kernels
