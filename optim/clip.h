// Gradient clipping, applied between backward() and the optimizer's step().
#pragma once

#include <vector>

#include "../tensor/tensor.h"

namespace cppgrad::optim {

// Scales all gradients together so their joint L2 norm is at most max_norm; returns the norm
// they had before. Parameters without a gradient are skipped.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);
// Clamps every gradient element to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace cppgrad::optim
