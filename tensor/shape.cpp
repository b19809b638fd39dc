#include "tensor/shape.h"

#include <algorithm>

#include "runtime/error.h"

namespace cppgrad {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t checked_numel(const Shape& shape, std::string_view op) {
  int64_t product = 1;  // of the non-zero sizes
  bool empty = false;
  for (int64_t size : shape) {
    CPPGRAD_CHECK(size >= 0, "{}: negative size in shape {}", op, shape_str(shape));
    if (size == 0) {
      empty = true;
      continue;
    }
    CPPGRAD_CHECK(!__builtin_mul_overflow(product, size, &product), "{}: the sizes of shape {} multiply past the int64 range",
                  op, shape_str(shape));
  }
  return empty ? 0 : product;
}

// ---- strides and broadcasting ----------------------------------------------------------------

// A contiguous tensor's strides: the last dim steps by 1, each dim before by the sizes after it.
Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

// Broadcasting, as NumPy and PyTorch: align the shapes at their last dims; a size 1 (or a
// missing dim) stretches to the other's size.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    CPPGRAD_CHECK(da == db || da == 1 || db == 1, "{}: shapes {} and {} cannot be broadcast (dim {}: {} vs {})", op,
          shape_str(a), shape_str(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---- dims counted from the end -----------------------------------------------------------------

int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  CPPGRAD_CHECK(dim >= lo && dim <= hi, "{}: dim {} out of range for a tensor of {} dims (expected {} to {})", op, dim, ndim,
        lo, hi);
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t ndim, std::string_view op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  CPPGRAD_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), "{}: dim list repeats a dim", op);
  return out;
}

}  // namespace cppgrad
