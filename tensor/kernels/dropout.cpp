// Dropout's mask, and x ⊙ mask with the mask made on the fly from a key.
//
// Element i of the mask is 0 (with probability p) or 1/(1 − p), as word i of a counter-based
// stream says (kernels/counter_rng.h): each element's draw depends on its index alone, so any
// thread count, and the backward making the mask again from the key, give the same mask.
// The fast forms (fast/dropout.cpp) share the loop between threads and vectorise it.
#include "runtime/reference_mode.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/counter_rng.h"
#include "tensor/kernels/fast/dropout.h"

namespace cppgrad::kernels {

void check_dropout(const char* op, double p, const Tensor& x) {
  CPPGRAD_CHECK(p >= 0.0 && p < 1.0, "{}: probability must be in [0, 1), got {}", op, p);
  CPPGRAD_CHECK(!x.defined() || x.is_floating_point(), "{}: expected a floating dtype, got {}", op,
                dtype_name(x.dtype()));
}

Tensor dropout_mask(const Shape& shape, DType dtype, double p, Generator& gen) {
  return dropout_mask(shape, dtype, p, gen.next_u64());
}

Tensor dropout_mask(const Shape& shape, DType dtype, double p, uint64_t key) {
  check_dropout("dropout_mask", p);
  Tensor mask = empty(shape, dtype);
  if (!reference_mode()) return fast::fill_dropout_mask(mask, p, key);
  dispatch_floating(dtype, "dropout_mask", [&](auto tag) {
    using T = decltype(tag);
    const uint64_t threshold = dropout_threshold(p);
    const T keep = static_cast<T>(1.0 / (1.0 - p));
    T* m = mask.data<T>();
    for (int64_t i = 0; i < mask.numel(); ++i) m[i] = dropout_keeps(key, static_cast<uint64_t>(i), threshold) ? keep : T(0);
  });
  return mask;
}

ExampleLayout example_layout(const char* op, const Shape& shape, int64_t examples) {
  CPPGRAD_CHECK(examples >= 1 && !shape.empty() && shape[0] % examples == 0,
                "{}: keyed by {} examples, a tensor {} must be batch first, its leading dim a multiple of {}", op,
                examples, shape_str(shape), examples);
  // An example's coordinates: (its row of the leading dim's k, then every later dim).
  Shape coordinates = {shape[0] / examples};
  coordinates.insert(coordinates.end(), shape.begin() + 1, shape.end());
  ExampleLayout layout;
  layout.block = numel(coordinates);
  layout.cols = coordinates.back();
  layout.rows = coordinates.size() >= 2 ? coordinates[coordinates.size() - 2] : 1;
  const int64_t leads = layout.rows * layout.cols == 0 ? 0 : layout.block / (layout.rows * layout.cols);
  CPPGRAD_CHECK(layout.rows <= kExampleRowLimit && layout.cols <= kExampleRowLimit && leads <= kExampleLeadLimit,
                "{}: keyed by example, a tensor {} has positions beyond the per-example fields (the last two dims "
                "at most {}, the rest at most {} together)", op, shape_str(shape), kExampleRowLimit, kExampleLeadLimit);
  return layout;
}

Tensor example_dropout_mask(const char* op, const Shape& shape, DType dtype, double p, const std::vector<uint64_t>& keys) {
  check_dropout(op, p);
  const ExampleLayout layout = example_layout(op, shape, static_cast<int64_t>(keys.size()));
  Tensor mask = empty(shape, dtype);
  if (!reference_mode()) return fast::fill_example_dropout_mask(mask, p, keys, layout);
  dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const uint64_t threshold = dropout_threshold(p);
    const T keep = static_cast<T>(1.0 / (1.0 - p));
    T* m = mask.data<T>();
    for (int64_t i = 0; i < mask.numel(); ++i) {  // example i / block, at position (lead, row, col)
      const int64_t o = i % layout.block;
      const uint64_t word = example_word(o / (layout.rows * layout.cols), o / layout.cols % layout.rows, o % layout.cols);
      m[i] = dropout_keeps(keys[static_cast<size_t>(i / layout.block)], word, threshold) ? keep : T(0);
    }
  });
  return mask;
}

Tensor dropout(const Tensor& x, double p, uint64_t key) {
  if (!reference_mode()) return fast::dropout(x, p, key);  // which checks its arguments
  check_dropout("dropout", p, x);
  return binary(Binary::Mul, x, dropout_mask(x.shape(), x.dtype(), p, key));  // x ⊙ mask
}

}  // namespace cppgrad::kernels
