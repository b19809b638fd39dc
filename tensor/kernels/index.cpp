// Joining and indexing: cat, index_select / index_add, gather / scatter_add, slice_scatter.
// Indices must lie in [0, size): a negative one throws (it is not counted from the end).
#include <cstring>

#include "tensor/kernels/impl.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"

namespace cppgrad::kernels {

namespace {
void check_index_tensor(const Tensor& index, std::string_view op) {
  CPPGRAD_CHECK(index.dtype() == kInt64, "{}: index must be int64, got {}", op, dtype_name(index.dtype()));
}
// The index itself when it lies in [0, size); otherwise throws naming the op, the index, the dim
// and its size. A negative index is refused, not wrapped, as PyTorch's gather, scatter and
// index_select do: a padding id of -1 or -100 must not read a real row.
int64_t checked_index(int64_t i, int64_t dim, const Shape& shape, std::string_view op) {
  if (i < 0 || i >= shape[dim])
    throw Error(fmt::format("{}: index {} out of range for dim {} of size {} (shape {}){}", op, i, dim, shape[dim],
                            shape_str(shape), i < 0 ? "; negative indices are not wrapped" : ""));
  return i;
}
// Visits every element of `index`: f(index_offset, position_offset_in_other) where other has
// `other_strides` over index's shape with dim `dim` zeroed: the caller adds index*stride[dim].
template <class F>
void for_each_index(const Tensor& index, const Tensor& other_a, const Tensor& other_b, int64_t dim, F f) {
  Strides sa = other_a.strides(), sb = other_b.strides();
  const int64_t stride_a = sa[dim];
  sa[dim] = 0;
  StridedLoop<3> loop(index.shape(), {index.strides(), sa, sb});
  loop.for_each_run(
      [&](const auto& off, int64_t n, const auto& st) {
        for (int64_t k = 0; k < n; ++k) f(off[0] + k * st[0], off[1] + k * st[1], off[2] + k * st[2], stride_a);
      });
}

// gather's and scatter_add's index: int64, of t's rank, no larger than t but in `dim`. Returns dim wrapped.
int64_t check_gather_index(const Tensor& t, int64_t dim, const Tensor& index, std::string_view op) {
  check_index_tensor(index, op);
  dim = wrap_dim(dim, t.dim(), op);
  CPPGRAD_CHECK(index.dim() == t.dim(), "{}: index of shape {} needs as many dims as the tensor of shape {}", op,
        shape_str(index.shape()), shape_str(t.shape()));
  for (int64_t d = 0; d < t.dim(); ++d)
    CPPGRAD_CHECK(d == dim || index.shape()[d] <= t.shape()[d], "{}: index of shape {} is larger than {} in dim {}", op,
          shape_str(index.shape()), shape_str(t.shape()), d);
  return dim;
}
}  // namespace

Tensor impl::cat(const std::vector<Tensor>& tensors, int64_t dim) {
  CPPGRAD_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  CPPGRAD_CHECK(first.dim() > 0, "cat: 0-d tensors cannot be concatenated");
  dim = wrap_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  DType dtype = first.dtype();
  shape[dim] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    CPPGRAD_CHECK(t.dim() == first.dim(), "cat: tensor {} has shape {}, tensor 0 has {}: ranks differ", i,
          shape_str(t.shape()), shape_str(first.shape()));
    for (int64_t d = 0; d < t.dim(); ++d)
      CPPGRAD_CHECK(d == dim || t.shape()[d] == first.shape()[d],
            "cat: tensor {} has shape {}, tensor 0 has {}: sizes differ in dim {}", i, shape_str(t.shape()),
            shape_str(first.shape()), d);
    CPPGRAD_CHECK(!__builtin_add_overflow(shape[dim], t.shape()[dim], &shape[dim]),
                  "cat: the sizes along dim {} add up past the int64 range", dim);
    dtype = promote(dtype, t.dtype());
  }
  Tensor out = empty(shape, dtype);
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    copy_(slice(out, dim, at, at + t.shape()[dim], 1), t);
    at += t.shape()[dim];
  }
  return out;
}

Tensor impl::index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  check_index_tensor(index, "index_select");
  CPPGRAD_CHECK(index.dim() <= 1, "index_select: index must be 0-d or 1-d, got shape {}", shape_str(index.shape()));
  CPPGRAD_CHECK(t.dim() > 0, "index_select: cannot index a 0-d tensor");
  dim = wrap_dim(dim, t.dim(), "index_select");
  Tensor idx = contiguous(index);
  const int64_t n = idx.numel(), size = t.shape()[dim];
  const int64_t* ip = idx.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) checked_index(ip[i], dim, t.shape(), "index_select");
  Shape shape = t.shape();
  shape[dim] = n;
  Tensor out = empty(shape, t.dtype());
  // Rows of a contiguous table: one memcpy each (the embedding lookup).
  if (dim == 0 && t.is_contiguous()) {
    const size_t row_bytes = static_cast<size_t>(t.numel() / std::max<int64_t>(size, 1)) * dtype_size(t.dtype());
    const char* src = static_cast<const char*>(t.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    parallel_for(n, static_cast<int64_t>(row_bytes), [&](int64_t i) {
      std::memcpy(dst + i * row_bytes, src + ip[i] * row_bytes, row_bytes);
    });
    return out;
  }
  for (int64_t i = 0; i < n; ++i) copy_(select(out, dim, i), select(t, dim, ip[i]));
  return out;
}

Tensor impl::index_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = clone(base);
  index_add_(out, dim, index, src);
  return out;
}

void impl::index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index_tensor(index, "index_add");
  dim = wrap_dim(dim, out.dim(), "index_add");
  Tensor idx = contiguous(index);
  // The source is the base's shape but in `dim`, where it has one slice per index.
  Shape expected = out.shape();
  if (out.dim() > 0) expected[dim] = idx.numel();
  CPPGRAD_CHECK(idx.dim() <= 1 && src.shape() == expected,
        "index_add: base {}, index {}, source {}: the source must be of shape {} (the base's, with index's length in dim {})",
        shape_str(out.shape()), shape_str(index.shape()), shape_str(src.shape()), shape_str(expected), dim);
  CPPGRAD_CHECK(src.dtype() == out.dtype(), "index_add: base {} and source {} must have the same dtype",
        dtype_name(out.dtype()), dtype_name(src.dtype()));
  const int64_t* ip = idx.data<int64_t>();
  if (dim == 0 && out.is_floating_point() && out.is_contiguous()) {
    // Rows of a table (an embedding's gradient): one plain loop per row, no per-row tensors.
    Tensor rows = contiguous(src);
    const int64_t width = idx.numel() > 0 ? rows.numel() / idx.numel() : 0;
    dispatch_floating(out.dtype(), "index_add", [&](auto tag) {
      using T = decltype(tag);
      T* o = out.data<T>();
      const T* r = rows.data<T>();
      for (int64_t i = 0; i < idx.numel(); ++i) {  // in index order: repeated rows add in a fixed order
        T* target = o + checked_index(ip[i], dim, out.shape(), "index_add") * width;
        for (int64_t j = 0; j < width; ++j) target[j] += r[i * width + j];
      }
    });
    return;
  }
  // In index order, so repeated indices accumulate in a fixed order.
  for (int64_t i = 0; i < idx.numel(); ++i) {
    Tensor row = select(out, dim, checked_index(ip[i], dim, out.shape(), "index_add"));
    kernels::binary_(Binary::Add, row, select(src, dim, i));
  }
}

// out[i][j][k] = t[i][index[i][j][k]][k] for dim = 1
Tensor impl::gather(const Tensor& t, int64_t dim, const Tensor& index) {
  dim = check_gather_index(t, dim, index, "gather");
  if (t.dim() == 0)  // a 0-d tensor is read as the one-element vector it holds, as in PyTorch
    return reshape(gather(reshape(t, {1}), 0, reshape(index, {1})), {});
  Tensor out = empty(index.shape(), t.dtype());
  const Shape& shape = t.shape();
  dispatch(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t* ip = index.data<int64_t>();
    const T* src = t.data<T>();
    T* dst = out.data<T>();
    for_each_index(index, t, out, dim, [&](int64_t io, int64_t so, int64_t oo, int64_t stride) {
      dst[oo] = src[so + checked_index(ip[io], dim, shape, "gather") * stride];
    });
  });
  return out;
}

// out = base; out[i][index[i][j][k]][k] += src[i][j][k] for dim = 1
Tensor impl::scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src) {
  dim = check_gather_index(base, dim, index, "scatter_add");
  CPPGRAD_CHECK(src.shape() == index.shape(), "scatter_add: source shape {} differs from index shape {}",
        shape_str(src.shape()), shape_str(index.shape()));
  CPPGRAD_CHECK(src.dtype() == base.dtype(), "scatter_add: base {} and source {} must have the same dtype",
        dtype_name(base.dtype()), dtype_name(src.dtype()));
  if (base.dim() == 0) return reshape(scatter_add(reshape(base, {1}), 0, reshape(index, {1}), reshape(src, {1})), {});
  Tensor out = clone(base);
  const Tensor& source = src;
  const Shape& shape = base.shape();
  dispatch_numeric(base.dtype(), "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    const int64_t* ip = index.data<int64_t>();
    const T* s = source.data<T>();
    T* dst = out.data<T>();
    for_each_index(index, out, source, dim, [&](int64_t io, int64_t oo, int64_t so, int64_t stride) {
      dst[oo + checked_index(ip[io], dim, shape, "scatter_add") * stride] += s[so];
    });
  });
  return out;
}

Tensor impl::slice_scatter(const Tensor& src, const Shape& shape, int64_t dim, int64_t start, int64_t step) {
  CPPGRAD_CHECK(!shape.empty() && src.shape().size() == shape.size(),
                "slice_scatter: a source of shape {} cannot fill a slice of shape {} (ranks must match and not be 0)",
                shape_str(src.shape()), shape_str(shape));
  CPPGRAD_CHECK(step > 0, "slice_scatter: step must be positive, got {}", step);
  const int64_t size = shape[dim], count = src.shape()[dim];
  // The last position, start + (count - 1) * step, compared by division: the product may overflow.
  const bool fits = count == 0 ? start >= 0 && start <= size
                                : start >= 0 && start < size && count - 1 <= (size - 1 - start) / step;
  CPPGRAD_CHECK(fits,
                "slice_scatter: {} elements from start {} by step {} do not fit in dim {} of size {} (shape {})", count,
                start, step, dim, size, shape_str(shape));
  Tensor out = zeros(shape, src.dtype());
  copy_(slice(out, dim, start, slice_end(start, count, step), step), src);
  return out;
}

}  // namespace cppgrad::kernels
