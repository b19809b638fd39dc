// The fast forms of dropout's kernels: dropout's mask, x ⊙ mask, and dropout(relu(x)).
//
// Each word of the counter-based stream (kernels/counter_rng.h) is two 64-bit multiplies of the
// element's index, so the loop is bound by arithmetic, not memory. It is written without a
// branch (a select) and out of line, compiled once per vector unit (runtime/simd_clones.h): the
// baseline has no 64-bit vector multiply and runs it one element at a time, AVX-512 runs eight
// at once. The words are integers, so every version draws the same mask, bit for bit, and so
// does the reference (tensor/kernels/dropout.cpp).
#include "tensor/kernels/fast/dropout.h"

#include <algorithm>

#include "runtime/profile.h"
#include "runtime/simd_clones.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/counter_rng.h"

namespace cppgrad::kernels::fast {

namespace {

// mask[i] = dropout's factor of element i, for i in [begin, end).
template <class T>
CPPGRAD_SIMD_CLONES void dropout_mask_range(int64_t begin, int64_t end, uint64_t key, uint64_t threshold, T keep,
                                            T* __restrict mask) {
  for (int64_t i = begin; i < end; ++i) mask[i] = dropout_keeps(key, static_cast<uint64_t>(i), threshold) ? keep : T(0);
}

// mask[i] = dropout's factor of word first + i, for i in [0, n): a row of an example keyed by
// position (its words consecutive along the row).
template <class T>
CPPGRAD_SIMD_CLONES void dropout_mask_row(int64_t n, uint64_t first, uint64_t key, uint64_t threshold, T keep,
                                          T* __restrict mask) {
  for (int64_t i = 0; i < n; ++i) mask[i] = dropout_keeps(key, first + static_cast<uint64_t>(i), threshold) ? keep : T(0);
}

// out[i] = relu(x[i]) · factor (forward, g null) or out[i] = x[i] <= 0 ? 0 : g[i] · factor
// (backward), factor being dropout's, for i in [begin, end): exactly what dropout(relu(x))
// and its two backward steps compute, in one pass each (NaN passing as through relu's row).
// Without Relu: out[i] = x[i] · factor, dropout's forward and (on the gradient) its backward.
template <class T, bool Relu>
CPPGRAD_SIMD_CLONES void relu_dropout_range(int64_t begin, int64_t end, uint64_t key, uint64_t threshold, T keep,
                                            const T* __restrict x, const T* __restrict g, T* __restrict out) {
  if (g == nullptr) {
    for (int64_t i = begin; i < end; ++i) {
      const T factor = dropout_keeps(key, static_cast<uint64_t>(i), threshold) ? keep : T(0);
      if constexpr (Relu)
        out[i] = (x[i] <= T(0) ? T(0) : x[i]) * factor;
      else
        out[i] = x[i] * factor;
    }
    return;
  }
  for (int64_t i = begin; i < end; ++i) {
    const T factor = dropout_keeps(key, static_cast<uint64_t>(i), threshold) ? keep : T(0);
    out[i] = x[i] <= T(0) ? T(0) : g[i] * factor;
  }
}

constexpr int64_t kChunk = 16384;  // elements per task

template <class T, bool Relu>
void relu_dropout_all(int64_t n, double p, uint64_t key, const T* x, const T* g, T* out) {
  const T keep = static_cast<T>(1.0 / (1.0 - p));
  const uint64_t threshold = dropout_threshold(p);
  parallel_for((n + kChunk - 1) / kChunk, kChunk * 2, [=](int64_t c) {
    relu_dropout_range<T, Relu>(c * kChunk, std::min(n, (c + 1) * kChunk), key, threshold, keep, x, g, out);
  });
}

// dropout(x) or dropout(relu(x)) with the mask the key makes: one checked body for both ops.
template <bool Relu>
Tensor masked_by_key(const char* op, const Tensor& input, double p, uint64_t key) {
  check_dropout(op, p, input);
  Tensor x = contiguous(input);
  Tensor out = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    relu_dropout_all<T, Relu>(x.numel(), p, key, x.data<T>(), nullptr, out.data<T>());
  });
  return out;
}

}  // namespace

Tensor fill_dropout_mask(const Tensor& mask, double p, uint64_t key) {
  CPPGRAD_PROFILE_SCOPE("dropout_mask");
  dispatch_floating(mask.dtype(), "dropout_mask", [&](auto tag) {
    using T = decltype(tag);
    const T keep = static_cast<T>(1.0 / (1.0 - p));
    const uint64_t threshold = dropout_threshold(p);
    const int64_t n = mask.numel();
    T* m = mask.data<T>();
    parallel_for((n + kChunk - 1) / kChunk, kChunk, [=](int64_t c) {
      dropout_mask_range<T>(c * kChunk, std::min(n, (c + 1) * kChunk), key, threshold, keep, m);
    });
  });
  return mask;
}

Tensor fill_example_dropout_mask(const Tensor& mask, double p, const std::vector<uint64_t>& keys,
                                 const ExampleLayout& layout) {
  CPPGRAD_PROFILE_SCOPE("dropout_mask");
  if (mask.numel() == 0) return mask;
  dispatch_floating(mask.dtype(), "dropout_mask", [&](auto tag) {
    using T = decltype(tag);
    const T keep = static_cast<T>(1.0 / (1.0 - p));
    const uint64_t threshold = dropout_threshold(p);
    const int64_t rows_per_example = layout.block / layout.cols, cols = layout.cols, rows = layout.rows;
    T* m = mask.data<T>();
    const uint64_t* key = keys.data();
    parallel_for(mask.numel() / cols, cols, [=](int64_t r) {  // row r: of example r / rows_per_example
      const int64_t in_example = r % rows_per_example;
      dropout_mask_row<T>(cols, example_word(in_example / rows, in_example % rows, 0), key[r / rows_per_example],
                          threshold, keep, m + r * cols);
    });
  });
  return mask;
}

void dropout_factors(int64_t n, uint64_t first, uint64_t key, uint64_t threshold, float keep, float* out) {
  dropout_mask_row<float>(n, first, key, threshold, keep, out);
}
void dropout_factors(int64_t n, uint64_t first, uint64_t key, uint64_t threshold, double keep, double* out) {
  dropout_mask_row<double>(n, first, key, threshold, keep, out);
}

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

}  // namespace cppgrad::kernels::fast
