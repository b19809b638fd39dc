// softmax's backward, shared by softmax (autograd/ops_reduce.cpp) and masked_softmax's fused form
// (autograd/fast/masked_softmax.cpp), whose derivative is softmax's chained through its scale.
#pragma once

#include "node.h"

namespace cppgrad::autograd {

// dA = C ⊙ (dC − Σ_dim dC ⊙ C) from softmax's output C: one kernel pass, or under create_graph
// differentiable ops of C and dC.
Tensor softmax_backward(const Tensor& output, const Tensor& grad, int64_t dim);

}  // namespace cppgrad::autograd
