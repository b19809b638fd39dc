// The fast form of some unary rows' backward (tensor/op_tables.h holds the reference formulas):
// one pass over the elements where the formula, written with tensor ops, makes several. Used by
// autograd when no graph is being recorded and reference mode is off. A first reading skips it.
#include "runtime/profile.h"
#include "tensor/kernels.h"
#include "tensor/kernels/fast/elementwise.h"

namespace cppgrad::kernels {

namespace {
// relu: dA = dC where C > 0, else 0, in one pass (the formula is a comparison, then a masked_fill).
Tensor relu_backward(const Tensor& grad, const Tensor& output) {
  CPPGRAD_PROFILE_SCOPE("relu_backward");
  CPPGRAD_CHECK(grad.shape() == output.shape() && grad.dtype() == output.dtype(),
                "relu_backward: grad {} {} and output {} {} differ", shape_str(grad.shape()), dtype_name(grad.dtype()),
                shape_str(output.shape()), dtype_name(output.dtype()));
  Tensor out = empty(grad.shape(), grad.dtype());
  dispatch_floating(grad.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    fast::zip_into<T, T>(out, grad, output, [](T g, T y) { return y > T(0) ? g : T(0); });
  });
  return out;
}
}  // namespace

Tensor unary_backward_fast(Unary op, const Tensor& grad, const Tensor& saved) {
  if (op == Unary::Relu) return relu_backward(grad, saved);
  return {};
}

}  // namespace cppgrad::kernels
