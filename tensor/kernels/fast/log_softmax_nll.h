// The fused form of cross-entropy's −log softmax(x)[target] (skip it on a first reading).
// log_softmax then gather writes the whole (M, C) log_softmax forward and keeps it, and its
// backward makes the (M, C) gradient gather scatters (zero but at each row's target) before
// log_softmax's backward reads it. Here the forward keeps each row's shift (its max and
// log Σ exp) beside the logits, and the backward makes y = x − max − log Σ exp again from them:
// at GPT-2's 50,257 classes, two passes over an (M, C) tensor fewer each step, and one (M, C)
// tensor fewer at the backward's peak. The same bits as the two ops' fast forms: the shift comes
// from the functions log_softmax's row uses (exp_rows.h), and a row sum of one non-zero term is
// that term.
#pragma once

#include "tensor/tensor.h"

namespace cppgrad::kernels::fast {

struct LogSoftmaxNll {
  Tensor nll;    // (M): −log_softmax(x)[i, target_i]
  Tensor shift;  // (M, 2): row i's max and log Σ_j exp(x_ij − max)
};

// Of logits (M, C) and class indices target (M) in [0, C). Undefined (nll) where log_softmax
// and gather must run instead: logits that are not a contiguous float32 or float64 matrix with
// C > 0, or a row whose max is −inf (every class at −inf, or a NaN), which log_softmax's
// reference row handles.
LogSoftmaxNll log_softmax_nll(const Tensor& logits, const Tensor& target);

// dx (M, C) from the nll's gradient g (M): log_softmax's backward, dx = G − exp(y) ⊙ Σ_row G,
// of the gradient G that gather's backward makes (−g_i at (i, target_i), 0 elsewhere).
Tensor log_softmax_nll_backward(const Tensor& g, const Tensor& logits, const Tensor& target, const Tensor& shift);

}  // namespace cppgrad::kernels::fast
