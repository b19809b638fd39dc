// The fast form of rms_norm (skip it on a first reading): kernels::fast::rms_norm recorded on
// the graph as a fused op (fused.h), one pass over each row forward and one backward, keeping 1/rms of each row. Its
// reference is nn::functional::rms_norm's formula as tensor ops (nn/rmsnorm.cpp), which
// reference mode runs instead.
#pragma once

#include "fused.h"

namespace cppgrad::fast {

// x / √(mean(x²) + eps) ⊙ weight over the last `normalized_dims` dims; weight of those dims'
// shape, or undefined. `reference` is the same as tensor ops of {x, weight}.
Tensor rms_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight, double eps, Reference reference);

}  // namespace cppgrad::fast
