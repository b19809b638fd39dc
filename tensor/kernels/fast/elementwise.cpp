// The fast form of some unary rows' backward (the vectorised float32 ones are in unary_floats.cpp) (tensor/op_tables.h holds the reference formulas):
// one pass over the elements where the formula, written with tensor ops, makes several. Used by
// autograd when no graph is being recorded and reference mode is off. A first reading skips it.
#include "runtime/profile.h"
#include "tensor/kernels.h"
#include "tensor/kernels/fast/elementwise.h"
#include "tensor/kernels/fast/unary_floats.h"

namespace cppgrad::kernels {

namespace {
// relu: dA = 0 where C <= 0, else dC (so dC where C is NaN), in one pass (the formula is a
// comparison, then a masked_fill).
Tensor relu_backward(const Tensor& grad, const Tensor& output) {
  CPPGRAD_PROFILE_SCOPE("relu_backward");
  CPPGRAD_CHECK(grad.shape() == output.shape() && grad.dtype() == output.dtype(),
                "relu_backward: grad {} {} and output {} {} differ", shape_str(grad.shape()), dtype_name(grad.dtype()),
                shape_str(output.shape()), dtype_name(output.dtype()));
  Tensor out = empty(grad.shape(), grad.dtype());
  dispatch_floating(grad.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    fast::zip_into<T, T>(out, grad, output, [](T g, T y) { return y <= T(0) ? T(0) : g; });
  });
  return out;
}

// tanh: dA = dC·(1 − C²); sigmoid: dA = dC·C·(1 − C), in one pass each, rounded as the formula
// (its tensor ops, in float32 or float64 throughout) rounds them: the same bits.
Tensor output_backward(Unary op, const Tensor& grad, const Tensor& output) {
  if (grad.shape() != output.shape() || grad.dtype() != output.dtype()) return {};
  Tensor out = empty(grad.shape(), grad.dtype());
  dispatch_floating(grad.dtype(), "unary_backward", [&](auto tag) {
    using T = decltype(tag);
    if (op == Unary::Tanh) {
      CPPGRAD_PROFILE_SCOPE("tanh_backward");
      fast::zip_into<T, T>(out, grad, output, [](T g, T y) { return g * (T(1) - y * y); });
    } else {
      CPPGRAD_PROFILE_SCOPE("sigmoid_backward");
      fast::zip_into<T, T>(out, grad, output, [](T g, T y) { return g * y * (T(1) - y); });
    }
  });
  return out;
}
}  // namespace

Tensor unary_backward_fast(Unary op, const Tensor& grad, const Tensor& saved) {
  if (op == Unary::Relu) return relu_backward(grad, saved);
  if (op == Unary::Tanh || op == Unary::Sigmoid) return output_backward(op, grad, saved);
  return fast::unary_backward_floats(op, grad, saved);
}

}  // namespace cppgrad::kernels
