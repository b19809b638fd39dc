// The fast form of cross-entropy's −log softmax(logits)[target] (skip it on a first reading):
// kernels::fast::log_softmax_nll, recorded with its backward. Its reference is log_softmax then
// gather as tensor ops (nn/functional.cpp's cross_entropy), which reference mode runs.
#pragma once

#include "../node.h"

namespace cppgrad::fast {

// −log_softmax(logits, 1)[i, target_i] of logits (M, C) and int64 targets (M) in [0, C); undefined
// where the kernel declines (kernels/fast/log_softmax_nll.h).
Tensor log_softmax_nll(const Tensor& logits, const Tensor& target);

}  // namespace cppgrad::fast
