// The fast form of masked_softmax (skip it on a first reading): kernels::masked_softmax, one
// pass per row, recorded on the graph (autograd/fast/fused.h) with softmax's backward kernel.
// Its reference is softmax(scale·scores + mask) as tensor ops (autograd/ops_nn.cpp), which
// reference mode runs.
#pragma once

#include "fused.h"

namespace cppgrad::fast {

// softmax(scale·scores + mask) over the last dim (kernels::masked_softmax); `reference` is the
// same as tensor ops of {scores, the mask when it is floating}.
Tensor masked_softmax(const Tensor& scores, const Tensor& mask, bool is_causal, double scale, Reference reference);

}  // namespace cppgrad::fast
