// The fast form of layer_norm (skip it on a first reading): kernels::layer_norm's fused rows
// recorded on the graph (autograd/fast/fused.h), keeping each row's mean and 1/std. Its
// reference is the formula as tensor ops (autograd/ops_nn.cpp), which reference mode runs.
#pragma once

#include "fused.h"

namespace cppgrad::fast {

// (x − mean)/√(var + eps) ⊙ weight + bias over the last `normalized_dims` dims, arguments checked
// by the caller; `reference` is the same as tensor ops of {x, weight, bias}.
Tensor layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight, const Tensor& bias, double eps,
                  Reference reference);

}  // namespace cppgrad::fast
