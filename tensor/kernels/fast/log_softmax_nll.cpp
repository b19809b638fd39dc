#include "tensor/kernels/fast/log_softmax_nll.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/profile.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/fast/exp_rows.h"
#include "tensor/kernels/fast/vector_math.h"

namespace cppgrad::kernels::fast {

namespace {

void check_operands(const char* op, const Tensor& logits, const Tensor& target) {
  CPPGRAD_CHECK(logits.dim() == 2 && target.dim() == 1 && target.dtype() == kInt64 && target.size(0) == logits.size(0),
                "{}: logits {} and target {} {} must be (M, C) and int64 (M)", op, shape_str(logits.shape()),
                shape_str(target.shape()), dtype_name(target.dtype()));
  const int64_t classes = logits.size(1);
  const int64_t* t = target.data<int64_t>();
  for (int64_t i = 0; i < target.numel(); ++i)
    CPPGRAD_CHECK(t[i] >= 0 && t[i] < classes, "{}: target {} of row {} is out of range for {} classes", op, t[i], i,
                  classes);
}

}  // namespace

LogSoftmaxNll log_softmax_nll(const Tensor& logits, const Tensor& target_in) {
  CPPGRAD_PROFILE_SCOPE("log_softmax_nll");
  const bool fast_dtype = logits.dtype() == kFloat32 || logits.dtype() == kFloat64;
  if (!fast_dtype || logits.dim() != 2 || !logits.is_contiguous() || logits.size(1) == 0) return {};
  Tensor target = contiguous(target_in);
  check_operands("log_softmax_nll", logits, target);
  const int64_t rows = logits.size(0), classes = logits.size(1);
  LogSoftmaxNll r{empty({rows}, logits.dtype()), empty({rows, 2}, logits.dtype())};
  std::atomic<bool> declined{false};
  dispatch_floating(logits.dtype(), "log_softmax_nll", [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    const int64_t* t = target.data<int64_t>();
    T* nll = r.nll.data<T>();
    T* shift = r.shift.data<T>();
    parallel_for(rows, classes * 8, [&](int64_t i) {
      const T* row = x + i * classes;
      const T m = contiguous_row_max(row, classes);
      if (m == -std::numeric_limits<T>::infinity()) {
        declined = true;
        return;
      }
      const T log_total = log_total_of_row(row, classes, m);
      shift[2 * i] = m;
      shift[2 * i + 1] = log_total;
      nll[i] = -(row[t[i]] - m - log_total);  // −y at the target, y as log_softmax writes it
    });
  });
  if (declined) return {};
  return r;
}

Tensor log_softmax_nll_backward(const Tensor& grad, const Tensor& logits, const Tensor& target_in, const Tensor& shift) {
  CPPGRAD_PROFILE_SCOPE("log_softmax_nll_backward");
  const int64_t rows = logits.size(0), classes = logits.size(1);
  CPPGRAD_CHECK(grad.shape() == Shape{rows} && grad.dtype() == logits.dtype() && shift.shape() == (Shape{rows, 2}),
                "log_softmax_nll_backward: gradient {} {} for logits {} {}", shape_str(grad.shape()),
                dtype_name(grad.dtype()), shape_str(logits.shape()), dtype_name(logits.dtype()));
  Tensor g = contiguous(grad), target = contiguous(target_in);
  Tensor dx = empty({rows, classes}, logits.dtype());
  dispatch_floating(logits.dtype(), "log_softmax_nll_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *x = logits.data<T>(), *gs = g.data<T>(), *sh = shift.data<T>();
    const int64_t* t = target.data<int64_t>();
    T* out = dx.data<T>();
    parallel_for(rows, classes * 8, [&](int64_t i) {
      const T* row = x + i * classes;
      const T m = sh[2 * i], log_total = sh[2 * i + 1];
      T* d = out + i * classes;
      // G's row: gather's backward adds −g_i into zeros (so −0 arrives as +0); its sum, of one
      // non-zero term, is that term.
      const T at_target = T(0) + -gs[i], sum = at_target;
      // dx_j = G_ij − exp(y_j)·Σ G, exp as log_softmax's backward takes it (exp_rows.h)
      if constexpr (std::is_same_v<T, float>) {
        log_softmax_backward_of_zero_row(row, m, log_total, sum, d, classes);
        const T y = row[t[i]] - m - log_total;
        d[t[i]] = at_target - static_cast<float>(vmath::exp(static_cast<double>(y))) * sum;
      } else {
        for (int64_t j = 0; j < classes; ++j) d[j] = T(0) - std::exp(row[j] - m - log_total) * sum;
        d[t[i]] = at_target - std::exp(row[t[i]] - m - log_total) * sum;
      }
    });
  });
  return dx;
}

}  // namespace cppgrad::kernels::fast
