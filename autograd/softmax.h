// softmax's backward, shared by softmax (autograd/ops_reduce.cpp) and masked_softmax's fused form
// (autograd/fast/masked_softmax.cpp), whose derivative is softmax's chained through its scale;
// and the fast form of log_softmax's.
#pragma once

#include "node.h"

namespace cppgrad::autograd {

// dA = C ⊙ (dC − Σ_dim dC ⊙ C) from softmax's output C: one kernel pass, or under create_graph
// differentiable ops of C and dC.
Tensor softmax_backward(const Tensor& output, const Tensor& grad, int64_t dim);

// The fast form of log_softmax's backward: dA = dC − exp(C) ⊙ Σ_dim dC in one kernel that reads
// each row twice (kernels::log_softmax_backward), where the formula (autograd/ops_reduce.cpp)
// makes three tensors of the input's size. Undefined where the formula runs: under create_graph,
// in reference mode, and for a gradient whose dtype is not the output's.
Tensor log_softmax_backward(const Tensor& output, const Tensor& grad, int64_t dim);

}  // namespace cppgrad::autograd
