// layer_norm's row loops (kernels::layer_norm in tensor/kernels/norm.cpp calls them; the
// reference is the formula as tensor ops, autograd/ops_nn.cpp), over contiguous rows of `width`
// elements, for float and double. w and b may be null (no affine); the caller passes both or
// neither.
#pragma once

#include <cstdint>

namespace cppgrad::kernels::fast {

// y, mean and 1/std of each row.
template <class T>
void layer_norm_forward(int64_t rows, int64_t width, double eps, const T* x, const T* w, const T* b, T* y, T* mean,
                        T* rstd);
// dx of each row, with ĝ = dy ⊙ w (or dy when w is null).
template <class T>
void layer_norm_input_grad(int64_t rows, int64_t width, const T* x, const T* g, const T* w, const T* mean,
                           const T* rstd, T* dx);
// dw += Σ_rows dy ⊙ x̂ and db += Σ_rows dy, the rows added in order.
template <class T>
void layer_norm_affine_grads(int64_t rows, int64_t width, const T* x, const T* g, const T* mean, const T* rstd,
                             double* dw, double* db);

}  // namespace cppgrad::kernels::fast
