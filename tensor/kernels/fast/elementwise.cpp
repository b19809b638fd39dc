// The fast form of the elementwise rows (tensor/op_tables.h; elementwise.cpp holds the reference
// loops): their forward in loops the compiler vectorises, run by kernels::unary and
// kernels::binary (dispatch.cpp) unless reference mode is on; and some unary rows' backward
// (the vectorised float32 ones are in unary_floats.cpp) in one pass over the elements where the
// formula, written with tensor ops, makes several, used by autograd when no graph is being
// recorded. A first reading skips this file.
#include <cmath>

#include "runtime/profile.h"
#include "tensor/kernels.h"
#include "tensor/kernels/fast/elementwise.h"
#include "tensor/kernels/fast/unary_floats.h"
#include "tensor/kernels/impl.h"

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

// ---- the rows' forward: the same scalar expressions as the reference (elementwise.cpp), in
// fast::map_into's and fast::zip_into's loops; the transcendental float32 rows vectorised
// (unary_floats.h: within an ulp or two of the row's expression, not the same bits).
namespace cppgrad::kernels::fast {

Tensor unary(Unary op, const Tensor& t) {
  Tensor out = empty(t.shape(), t.dtype());
  if (unary_floats(op, t, out)) return out;
  switch (op) { CPPGRAD_UNARY_OPS(CPPGRAD_UNARY_LOOP) }  // the rows' cases, with fast::map_into
  return out;
}

namespace {
template <class T>
void binary_loop(Binary op, const Tensor& out, const Tensor& a, const Tensor& b) {
  switch (op) { CPPGRAD_BINARY_OPS(CPPGRAD_BINARY_LOOP) }  // with fast::zip_into
}
}  // namespace

Tensor binary(Binary op, const Tensor& a, const Tensor& b) {
  Operands ops = binary_operands(op, a, b);
  Tensor out = empty(ops.shape, ops.dtype);
  dispatch_numeric(ops.dtype, binary_name(op), [&](auto tag) { binary_loop<decltype(tag)>(op, out, ops.a, ops.b); });
  return out;
}

void binary_(Binary op, const Tensor& a, const Tensor& b) {
  Operands ops = in_place_operands(op, a, b);
  dispatch_numeric(a.dtype(), binary_name(op), [&](auto tag) { binary_loop<decltype(tag)>(op, a, a, ops.b); });
  a.bump_version();
}

}  // namespace cppgrad::kernels::fast
