// Dropout's mask, x ⊙ mask with the mask made on the fly, and dropout(relu(x)) in one pass.
//
// Element i of the mask is 0 or 1/(1 − p) as word i of a counter-based stream says
// (kernels/counter_rng.h): each word is two 64-bit multiplies of the element's index, so the
// loop is bound by arithmetic, not memory. It is written without a branch (a select) and out of
// line, compiled once per vector unit (runtime/simd_clones.h): the baseline has no 64-bit vector
// multiply and runs it one element at a time, AVX-512 runs eight at once. The words are integers,
// so every version draws the same mask, bit for bit.
#include <algorithm>

#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/counter_rng.h"
#include "runtime/profile.h"
#include "runtime/simd_clones.h"

namespace cppgrad::kernels {

namespace {

// mask[i] = dropout's factor of element i, and y[i] = x[i] · mask[i] when x is given, for i in
// [begin, end).
template <class T>
CPPGRAD_SIMD_CLONES void dropout_range(int64_t begin, int64_t end, uint64_t key, uint64_t threshold, T keep,
                                       const T* __restrict x, T* __restrict y, T* __restrict mask) {
  if (x == nullptr) {
    for (int64_t i = begin; i < end; ++i)
      mask[i] = dropout_keeps(key, static_cast<uint64_t>(i), threshold) ? keep : T(0);
    return;
  }
  for (int64_t i = begin; i < end; ++i) {
    const T factor = dropout_keeps(key, static_cast<uint64_t>(i), threshold) ? keep : T(0);
    mask[i] = factor;
    y[i] = x[i] * factor;
  }
}

// out[i] = relu(x[i]) · factor (forward, g null) or out[i] = x[i] > 0 ? g[i] · factor : 0
// (backward), factor being dropout's, for i in [begin, end): exactly what dropout(relu(x))
// and its two backward steps compute, in one pass each.
// Without Relu: out[i] = x[i] · factor, dropout's forward and (on the gradient) its backward.
template <class T, bool Relu>
CPPGRAD_SIMD_CLONES void relu_dropout_range(int64_t begin, int64_t end, uint64_t key, uint64_t threshold, T keep,
                                            const T* __restrict x, const T* __restrict g, T* __restrict out) {
  if (g == nullptr) {
    for (int64_t i = begin; i < end; ++i) {
      const T factor = dropout_keeps(key, static_cast<uint64_t>(i), threshold) ? keep : T(0);
      if constexpr (Relu)
        out[i] = (x[i] > T(0) ? x[i] : T(0)) * factor;
      else
        out[i] = x[i] * factor;
    }
    return;
  }
  for (int64_t i = begin; i < end; ++i) {
    const T factor = dropout_keeps(key, static_cast<uint64_t>(i), threshold) ? keep : T(0);
    out[i] = x[i] > T(0) ? g[i] * factor : T(0);
  }
}

// Runs dropout_range over n elements in chunks shared between the threads; `work` is the cost
// of an element, in the units of parallel_grain().
template <class T>
void dropout_all(int64_t n, double p, uint64_t key, const T* x, T* y, T* mask, int64_t work) {
  const T keep = static_cast<T>(1.0 / (1.0 - p));
  const uint64_t threshold = dropout_threshold(p);
  constexpr int64_t chunk = 16384;
  parallel_for((n + chunk - 1) / chunk, chunk * work, [=](int64_t c) {
    dropout_range<T>(c * chunk, std::min(n, (c + 1) * chunk), key, threshold, keep, x, y, mask);
  });
}

template <class T, bool Relu>
void relu_dropout_all(int64_t n, double p, uint64_t key, const T* x, const T* g, T* out) {
  const T keep = static_cast<T>(1.0 / (1.0 - p));
  const uint64_t threshold = dropout_threshold(p);
  constexpr int64_t chunk = 16384;
  parallel_for((n + chunk - 1) / chunk, chunk * 2, [=](int64_t c) {
    relu_dropout_range<T, Relu>(c * chunk, std::min(n, (c + 1) * chunk), key, threshold, keep, x, g, out);
  });
}

}  // namespace

Tensor dropout_mask(const Shape& shape, DType dtype, double p, Generator& gen) {
  return dropout_mask(shape, dtype, p, gen.next_u64());
}

Tensor dropout_mask(const Shape& shape, DType dtype, double p, uint64_t key) {
  CPPGRAD_PROFILE_SCOPE("dropout_mask");
  CPPGRAD_CHECK(p >= 0.0 && p < 1.0, "dropout_mask: probability must be in [0, 1), got {}", p);
  Tensor mask = empty(shape, dtype);
  dispatch_floating(dtype, "dropout_mask", [&](auto tag) {
    using T = decltype(tag);
    dropout_all<T>(mask.numel(), p, key, nullptr, nullptr, mask.data<T>(), 1);
  });
  return mask;
}

DropoutResult dropout(const Tensor& input, double p, Generator& gen) {
  CPPGRAD_PROFILE_SCOPE("dropout");
  CPPGRAD_CHECK(p >= 0.0 && p < 1.0, "dropout: probability must be in [0, 1), got {}", p);
  CPPGRAD_CHECK(input.is_floating_point(), "dropout: expected a floating dtype, got {}", dtype_name(input.dtype()));
  Tensor x = contiguous(input);
  DropoutResult out{empty(x.shape(), x.dtype()), empty(x.shape(), x.dtype())};
  const uint64_t key = gen.next_u64();
  dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    dropout_all<T>(x.numel(), p, key, x.data<T>(), out.output.data<T>(), out.mask.data<T>(), 2);
  });
  return out;
}

namespace {

// dropout(x) or dropout(relu(x)) with the mask the key makes: one checked body for both ops.
template <bool Relu>
Tensor masked_by_key(const char* op, const Tensor& input, double p, uint64_t key) {
  CPPGRAD_CHECK(p >= 0.0 && p < 1.0, "{}: probability must be in [0, 1), got {}", op, p);
  CPPGRAD_CHECK(input.is_floating_point(), "{}: expected a floating dtype, got {}", op, dtype_name(input.dtype()));
  Tensor x = contiguous(input);
  Tensor out = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    relu_dropout_all<T, Relu>(x.numel(), p, key, x.data<T>(), nullptr, out.data<T>());
  });
  return out;
}

}  // namespace

Tensor dropout(const Tensor& input, double p, uint64_t key) {
  CPPGRAD_PROFILE_SCOPE("dropout");
  return masked_by_key<false>("dropout", input, p, key);
}

Tensor relu_dropout(const Tensor& input, double p, uint64_t key) {
  CPPGRAD_PROFILE_SCOPE("relu_dropout");
  return masked_by_key<true>("relu_dropout", input, p, key);
}

Tensor relu_dropout_backward(const Tensor& grad, const Tensor& input, double p, uint64_t key) {
  CPPGRAD_PROFILE_SCOPE("relu_dropout_backward");
  CPPGRAD_CHECK(p >= 0.0 && p < 1.0, "relu_dropout_backward: probability must be in [0, 1), got {}", p);
  CPPGRAD_CHECK(grad.shape() == input.shape() && grad.dtype() == input.dtype() && input.is_floating_point(),
                "relu_dropout_backward: grad {} {} and input {} {} differ", shape_str(grad.shape()),
                dtype_name(grad.dtype()), shape_str(input.shape()), dtype_name(input.dtype()));
  Tensor x = contiguous(input), g = contiguous(grad);
  Tensor out = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "relu_dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    relu_dropout_all<T, true>(x.numel(), p, key, x.data<T>(), g.data<T>(), out.data<T>());
  });
  return out;
}

}  // namespace cppgrad::kernels
