// The reductions over a list of dims, one row each, as the elementwise ops are (op_tables.h):
// adding a reduction is adding a row, and everything else is made from the rows:
//   tensor/kernels.h                  the enum                 kernels::Reduction::Logsumexp
//   tensor/kernels/reduce.cpp         the name, and the kernel: the shift, term, combine and
//                                     finish columns, per dtype
//   tensor/tensor.h                   the methods and the free functions: t.amax({0, 2}), t.amax(1),
//                                     t.amax(), amax(t, 1, true)
//   autograd/ops_reduce.cpp           the differentiable op: what backward saves, the derivative
//   tests/autograd/test_reduction_table.cpp: every row's forward, gradcheck and name
//
// Each output element reduces its set (the input's elements at one index of the kept dims) in
// one thread and in row-major order, so the result has the same bits on any thread count:
//   m = the set's max when the row shifts by it (shift: Max; NaN skipped, 0 where the max is
//       infinite, so that a set of -inf or one holding +inf gives log 0 or +inf, as in PyTorch)
//   s = the terms t(x) combined: Add sums them from 0, pairwise and in double (int64 for integer
//       sums; kernels/pairwise_sum.h); Max and Min keep the largest or smallest from the first
//       element on (a NaN wins, as torch.amax's), and refuse an empty set
//   y = finish(s, n, m), n the set's size
//
// The columns of a row:
//   name, Enum  as for the elementwise rows
//   dtypes      summable (floats keep their dtype, integers and bools sum to int64, as PyTorch's
//               sum), floating (float32 and float64 only), to_float (integers and bools are
//               converted to float32 first, as torch.logsumexp) or numeric (every dtype but bool,
//               kept)
//   shift, term, combine, finish   the kernel's steps above
//   saves       Nothing, or Both: the input A and the output C
//   dA          the input's gradient, from g = dC and C given back their reduced dims as size 1
//               (so they broadcast against A), N the set's size and dims the reduced dims; with
//               the differentiable Tensor ops, so that create_graph=true gives second derivatives
// max and min along one dim, which also give the indices, and var, with its correction, are
// written out in autograd/ops_reduce.cpp.
#pragma once

// clang-format off
#define CPPGRAD_REDUCTION_OPS(ROW) \
/*  name       Enum       dtypes    shift term: t(x)      combine finish: y(s, n, m) saves    dA (g = dC) */ \
/*  dA = dC broadcast back over the summed dims */ \
ROW(sum,       Sum,       summable, None, x,              Add,    s,                 Nothing, g) \
ROW(mean,      Mean,      floating, None, x,              Add,    s / n,             Nothing, g / N) \
/*  dA = dC ⊙ exp(A - C) = dC ⊙ softmax(A) over the set; 0 where C = -inf, a set of -inf (PyTorch gives NaN) */ \
ROW(logsumexp, Logsumexp, to_float, Max,  std::exp(x - m), Add,   std::log(s) + m,   Both,    g * (A - C).exp().masked_fill(C == -inf, 0.0)) \
/*  dA = dC shared evenly among the elements equal to C (the NaNs when C is NaN), as torch.amax's */ \
ROW(amax,      Amax,      numeric,  None, x,              Max,    s,                 Both,    g * picked(A, C) / picked(A, C).sum(dims, true)) \
ROW(amin,      Amin,      numeric,  None, x,              Min,    s,                 Both,    g * picked(A, C) / picked(A, C).sum(dims, true))
// clang-format on
