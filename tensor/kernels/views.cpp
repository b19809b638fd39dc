// Views: each returns a new TensorImpl over the same Storage, with new shape/strides/offset.
#include <algorithm>

#include "tensor/kernels.h"

namespace cppgrad::kernels {

Tensor as_strided(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>(t.storage(), shape, strides, offset, t.dtype());
  impl->is_view = true;
  return Tensor(std::move(impl));
}

Tensor alias(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>(t.storage(), t.shape(), t.strides(), t.offset(), t.dtype());
  impl->is_view = t.impl()->is_view;
  return Tensor(std::move(impl));
}

Shape infer_shape(const Shape& requested, int64_t count, std::string_view op) {
  Shape shape = requested;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      CPPGRAD_CHECK(infer_at < 0, "{}: only one dim can be -1, got {}", op, shape_str(requested));
      infer_at = static_cast<int64_t>(i);
    } else {
      CPPGRAD_CHECK(shape[i] >= 0, "{}: invalid size {} in shape {}", op, shape[i], shape_str(requested));
      CPPGRAD_CHECK(!__builtin_mul_overflow(known, shape[i], &known), "{}: the sizes of shape {} multiply past the int64 range",
                    op, shape_str(requested));
    }
  }
  if (infer_at >= 0) {
    CPPGRAD_CHECK(known != 0 && count % known == 0, "{}: shape {} is invalid for input of size {}", op,
          shape_str(requested), count);
    shape[infer_at] = count / known;
  }
  CPPGRAD_CHECK(checked_numel(shape, op) == count, "{}: shape {} is invalid for input of size {}", op, shape_str(requested), count);
  return shape;
}

// A view is possible when the old and new sizes can be cut into groups of equal product, and
// the old dims inside each group are laid out back to back (each stride = the next one × its
// size). The new dims of a group then take strides from the group's innermost old stride.
//   [4, 6] strides [6, 1] -> [2, 2, 3, 2]: one group, dense, so strides [12, 6, 2, 1].
//   [4, 6] strides [1, 4] (a transpose) -> [24]: the group is not dense, so no view.
bool view_strides(const Tensor& t, const Shape& shape, Strides& out) {
  out = contiguous_strides(shape);  // right for an empty tensor, and any stride suits a size-1 dim
  if (t.numel() == 0) return true;
  Shape old_sizes;
  Strides old_strides;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.shape()[d] != 1) {  // a size-1 dim has no layout to keep
      old_sizes.push_back(t.shape()[d]);
      old_strides.push_back(t.strides()[d]);
    }
  size_t i = 0, j = 0;  // next old dim, next new dim
  while (i < old_sizes.size()) {
    const size_t group_old = i, group_new = j;
    int64_t old_product = old_sizes[i++], new_product = 1;
    while (j < shape.size() && new_product * shape[j] <= old_product) new_product *= shape[j++];
    while (new_product != old_product) {  // widen the group until both sides agree
      if (new_product < old_product) {
        if (j == shape.size()) return false;
        new_product *= shape[j++];
      } else {
        if (i == old_sizes.size()) return false;
        old_product *= old_sizes[i++];
      }
    }
    for (size_t k = group_old; k + 1 < i; ++k)
      if (old_strides[k] != old_strides[k + 1] * old_sizes[k + 1]) return false;
    int64_t stride = old_strides[i - 1];
    for (size_t k = j; k-- > group_new;) {
      out[k] = stride;
      stride *= shape[k];
    }
  }
  return true;
}

Tensor view(const Tensor& t, const Shape& requested) {
  Shape shape = infer_shape(requested, t.numel(), "view");
  Strides strides;
  CPPGRAD_CHECK(view_strides(t, shape, strides),
        "view: a tensor of shape {} with strides {} cannot be viewed as {}; use reshape, which copies",
        shape_str(t.shape()), shape_str(t.strides()), shape_str(shape));
  return as_strided(t, shape, strides, t.offset());
}

Tensor reshape(const Tensor& t, const Shape& requested) {
  Shape shape = infer_shape(requested, t.numel(), "reshape");
  Strides strides;
  if (view_strides(t, shape, strides)) return as_strided(t, shape, strides, t.offset());
  return view(contiguous(t), shape);
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  if (t.dim() == 0) return alias(t);
  dim0 = wrap_dim(dim0, t.dim(), "transpose");
  dim1 = wrap_dim(dim1, t.dim(), "transpose");
  Shape shape = t.shape();
  Strides strides = t.strides();
  std::swap(shape[dim0], shape[dim1]);
  std::swap(strides[dim0], strides[dim1]);
  return as_strided(t, shape, strides, t.offset());
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  CPPGRAD_CHECK(t.dim() > 0, "slice: cannot slice a 0-d tensor");
  dim = wrap_dim(dim, t.dim(), "slice");
  CPPGRAD_CHECK(step > 0, "slice: step must be positive, got {}", step);
  const int64_t size = t.shape()[dim];
  // Python-style clamping: negative counts from the end, out-of-range is cut to the size.
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  Shape shape = t.shape();
  Strides strides = t.strides();
  // ceil((end - start) / step) without forming end - start + step, which a huge step overflows.
  shape[dim] = end == start ? 0 : (end - start - 1) / step + 1;
  // A step whose product with the stride overflows leaves one element at most (two or more need
  // step < size), and one element's stride is never used to move: it stays as it was.
  if (__builtin_mul_overflow(strides[dim], step, &strides[dim])) strides[dim] = t.strides()[dim];
  return as_strided(t, shape, strides, t.offset() + start * t.strides()[dim]);
}

Tensor expand(const Tensor& t, const Shape& requested) {
  CPPGRAD_CHECK(requested.size() >= t.shape().size(), "expand: cannot expand shape {} to fewer dims {}", shape_str(t.shape()),
        shape_str(requested));
  const size_t lead = requested.size() - t.shape().size();
  Shape shape(requested.size());
  Strides strides(requested.size());
  for (size_t i = 0; i < requested.size(); ++i) {
    if (i < lead) {
      CPPGRAD_CHECK(requested[i] >= 0, "expand: size -1 not allowed for a new leading dim in {}", shape_str(requested));
      shape[i] = requested[i];
      strides[i] = 0;
      continue;
    }
    int64_t have = t.shape()[i - lead];
    int64_t want = requested[i] == -1 ? have : requested[i];
    CPPGRAD_CHECK(have == want || have == 1, "expand: shape {} cannot be expanded to {} (dim {}: {} is not 1)",
          shape_str(t.shape()), shape_str(requested), i, have);
    shape[i] = want;
    strides[i] = have == want ? t.strides()[i - lead] : 0;
  }
  checked_numel(shape, "expand");  // [1] expanded to [2^32, 2^32] would wrap its count to 0
  return as_strided(t, shape, strides, t.offset());
}

// ---- more views of the same kind: a new shape and strides over the same storage -------------

Tensor permute(const Tensor& t, const std::vector<int64_t>& dims) {
  CPPGRAD_CHECK(static_cast<int64_t>(dims.size()) == t.dim(), "permute: {} dims given for a tensor of shape {}",
        dims.size(), shape_str(t.shape()));
  Shape shape(dims.size());
  Strides strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], t.dim(), "permute");
    CPPGRAD_CHECK(!seen[d], "permute: dim {} repeated in {}", d, shape_str(dims));
    seen[d] = true;
    shape[i] = t.shape()[d];
    strides[i] = t.strides()[d];
  }
  return as_strided(t, shape, strides, t.offset());
}

Tensor squeeze(const Tensor& t) {
  Shape shape;
  Strides strides;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.shape()[d] != 1) {
      shape.push_back(t.shape()[d]);
      strides.push_back(t.strides()[d]);
    }
  return as_strided(t, shape, strides, t.offset());
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  if (t.dim() == 0) return alias(t);
  dim = wrap_dim(dim, t.dim(), "squeeze");
  if (t.shape()[dim] != 1) return alias(t);  // as PyTorch: squeezing a dim that is not 1 is a no-op
  return select(t, dim, 0);
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  dim = wrap_dim(dim, t.dim() + 1, "unsqueeze");
  Shape shape = t.shape();
  Strides strides = t.strides();
  int64_t stride = dim < t.dim() ? shape[dim] * strides[dim] : 1;
  shape.insert(shape.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  return as_strided(t, shape, strides, t.offset());
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  CPPGRAD_CHECK(t.dim() > 0, "select: cannot select from a 0-d tensor");
  dim = wrap_dim(dim, t.dim(), "select");
  const int64_t size = t.shape()[dim];
  CPPGRAD_CHECK(index >= -size && index < size, "select: index {} out of range for dim {} of size {} (shape {})", index, dim,
        size, shape_str(t.shape()));
  if (index < 0) index += size;
  Shape shape = t.shape();
  Strides strides = t.strides();
  int64_t offset = t.offset() + index * strides[dim];
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  return as_strided(t, shape, strides, offset);
}

}  // namespace cppgrad::kernels
