// Gradient clipping, applied between backward() and the optimizer's step().
#pragma once

#include <vector>

#include "../tensor/tensor.h"

namespace cppgrad::optim {

// Both change the gradients in place, as PyTorch's do: a handle to p.grad() taken before sees
// the clipped values. Parameters without a gradient are skipped; an undefined one is refused.

// Scales all gradients together so their joint L2 norm is at most max_norm; returns the norm
// they had before. A NaN norm makes every gradient NaN (the scale is NaN), as in PyTorch.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);
// Clamps every gradient element to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace cppgrad::optim
