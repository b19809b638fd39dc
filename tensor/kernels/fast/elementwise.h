// The fast form of the elementwise loops (tensor/kernels/elementwise.cpp holds the reference):
// the same scalar function on each element, with the common layouts (every operand contiguous,
// or the second operand one value for the whole run) as loops of unit stride, which the compiler
// vectorises. Each element is computed by the same expression as in the reference, and the
// library is built with -ffp-contract=off, so the two forms give the same bits
// (tests/tensor/test_elementwise_forms.cpp compares them). A first reading skips this file.
#pragma once

#include "tensor/iterate.h"
#include "tensor/tensor.h"

namespace cppgrad::kernels::fast {

// out = f(in), elementwise, out and in of the same shape.
template <class Out, class In, class F>
void map_into(const Tensor& out, const Tensor& in, F f) {
  StridedLoop<2> loop(out.shape(), {out.strides(), in.strides()});
  Out* o = out.data<Out>();
  const In* i = in.data<In>();
  parallel_runs(loop, [&](const auto& off, int64_t n, const auto& st) {
    Out* po = o + off[0];
    const In* pi = i + off[1];
    if (st[0] == 1 && st[1] == 1)
      for (int64_t k = 0; k < n; ++k) po[k] = f(pi[k]);
    else
      for (int64_t k = 0; k < n; ++k) po[k * st[0]] = f(pi[k * st[1]]);
  });
}

// out = f(a, b), elementwise; a and b already expanded to out's shape.
template <class Out, class In, class F>
void zip_into(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  StridedLoop<3> loop(out.shape(), {out.strides(), a.strides(), b.strides()});
  Out* o = out.data<Out>();
  const In* pa = a.data<In>();
  const In* pb = b.data<In>();
  parallel_runs(loop, [&](const auto& off, int64_t n, const auto& st) {
    Out* po = o + off[0];
    const In* x = pa + off[1];
    const In* y = pb + off[2];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1)
      for (int64_t k = 0; k < n; ++k) po[k] = f(x[k], y[k]);
    else if (st[0] == 1 && st[1] == 1 && st[2] == 0)
      for (int64_t k = 0; k < n; ++k) po[k] = f(x[k], y[0]);
    else
      for (int64_t k = 0; k < n; ++k) po[k * st[0]] = f(x[k * st[1]], y[k * st[2]]);
  });
}

}  // namespace cppgrad::kernels::fast
