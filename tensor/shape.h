// Shapes and strides: row-major layout, broadcasting, and dim wrapping.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace cppgrad {

using Shape = std::vector<int64_t>;    // sizes, outermost first
using Strides = std::vector<int64_t>;  // in elements, not bytes

int64_t numel(const Shape& shape);

// The element count of a shape that can exist, checked: every size is non-negative, and the
// product of the non-zero sizes (the element count, and the largest contiguous stride) fits
// int64, even when a 0 elsewhere makes the tensor empty. Throws naming `op` otherwise:
//   "zeros: the sizes of shape [3,4611686018427387904] multiply past the int64 range"
int64_t checked_numel(const Shape& shape, std::string_view op);

// Strides of a dense row-major tensor: [2,3,4] -> [12,4,1].
Strides contiguous_strides(const Shape& shape);

// NumPy broadcasting: align from the right; sizes must match or one of them be 1.
// `op` names the caller in the error: "add: shapes [2,3] and [4] cannot be broadcast".
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

// Turns a possibly negative dim into 0..ndim-1; throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op);

// Wraps, sorts and de-duplicates a dim list; an empty list means every dim.
std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t ndim, std::string_view op);

}  // namespace cppgrad
