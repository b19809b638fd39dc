// Differentiable ops that are not Tensor methods: the inverses that views and indexing need
// for their backward (and that are useful on their own), plus gradcheck's helpers.
#pragma once

#include "autograd/node.h"

namespace cppgrad {

// y = x·Wᵀ + b, x (..., in), W (out, in), b (out) or undefined: Linear's op, one GEMM.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// zeros(shape) with `src` written at start, start+step, ... of `dim`: the gradient of slice.
Tensor slice_scatter(const Tensor& src, const Shape& shape, int64_t dim, int64_t start, int64_t step);
// base with src.select(dim, i) added at base.select(dim, index[i]): the gradient of index_select.
Tensor index_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);
// base with src[i][j] added at base[i][index[i][j]] (dim 1): the gradient of gather.
Tensor scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace cppgrad
