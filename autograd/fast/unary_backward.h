// The fast form of a unary row's backward (kernels::unary_backward_fast: relu, tanh, sigmoid in
// one pass; erf, silu and the GELUs vectorised in float32), taken when the row has one, no graph
// is recorded and reference mode is off; else the row's derivative, as written in the table
// (autograd/ops_math.cpp). A first reading skips this file.
#pragma once

#include "autograd/node.h"
#include "runtime/reference_mode.h"
#include "tensor/kernels.h"

namespace cppgrad::autograd {

// backward(g, saved), or the fast form given the one tensor the row saves (when `saves_one`).
template <class Backward>
auto unary_backward(kernels::Unary op, bool saves_one, Backward backward) {
  return [op, saves_one, backward](const Tensor& g, const Saved& s) -> Grads {
    if (saves_one && !GradMode::is_enabled() && !reference_mode())
      if (Tensor fast = kernels::unary_backward_fast(op, g, s[0]); fast.defined()) return {fast};
    return backward(g, s);
  };
}

}  // namespace cppgrad::autograd
