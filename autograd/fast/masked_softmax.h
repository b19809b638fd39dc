// The fast form of masked_softmax (skip it on a first reading): kernels::masked_softmax, one
// pass per row, recorded with softmax's backward (autograd/softmax.h), the derivative it shares
// with softmax; it keeps the weights alone, not the scores. Its reference is
// softmax(scale·scores + mask) as tensor ops (autograd/ops_nn.cpp), which reference mode runs.
#pragma once

#include "../node.h"

namespace cppgrad::fast {

// softmax(scale·scores + mask) over the last dim (kernels::masked_softmax).
Tensor masked_softmax(const Tensor& scores, const Tensor& mask, bool is_causal, double scale);

}  // namespace cppgrad::fast
