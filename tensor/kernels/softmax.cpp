// softmax and log_softmax along one dim, computed stably.
//
//   softmax(x)_i     = exp(x_i - m) / Σ_j exp(x_j - m),  m = max_j x_j
//   log_softmax(x)_i = (x_i - m) - log Σ_j exp(x_j - m)
//
// Subtracting the max keeps exp() in range for inputs like ±1e4. A row whose every entry is
// -inf (a fully masked attention row) has no finite max: it gives zeros for softmax and -inf for
// log_softmax instead of NaN.
#include <cmath>
#include <limits>

#include "tensor/iterate.h"
#include "tensor/kernels.h"

namespace cppgrad::kernels {

namespace {

template <class T, bool Log>
void softmax_rows(const T* in, T* out, int64_t rows, int64_t inner, int64_t size) {
  // Row r (outer index o, inner index i) starts at o*size*inner + i and steps by `inner`.
  parallel_for(rows, size * 8, [&](int64_t r) {
    const int64_t o = r / inner, i = r % inner;
    const T* x = in + o * size * inner + i;
    T* y = out + o * size * inner + i;
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < size; ++j) m = std::max(m, x[j * inner]);
    if (m == -std::numeric_limits<T>::infinity()) {  // every entry masked
      for (int64_t j = 0; j < size; ++j) y[j * inner] = Log ? -std::numeric_limits<T>::infinity() : T(0);
      return;
    }
    double total = 0;
    for (int64_t j = 0; j < size; ++j) {
      T e = std::exp(x[j * inner] - m);
      if (!Log) y[j * inner] = e;
      total += e;
    }
    if (Log) {
      const T log_total = static_cast<T>(std::log(total));
      for (int64_t j = 0; j < size; ++j) y[j * inner] = x[j * inner] - m - log_total;
    } else {
      const T scale = static_cast<T>(1.0 / total);
      for (int64_t j = 0; j < size; ++j) y[j * inner] *= scale;
    }
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

Tensor softmax(const Tensor& t, int64_t dim) { return softmax_impl<false>(t, dim, "softmax"); }
Tensor log_softmax(const Tensor& t, int64_t dim) { return softmax_impl<true>(t, dim, "log_softmax"); }

}  // namespace cppgrad::kernels
