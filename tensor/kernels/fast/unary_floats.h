// The vectorised float32 forms of the transcendental unary rows and of their backwards
// (unary_floats.cpp says how and how exactly). A first reading skips this file.
#pragma once

#include "tensor/kernels.h"

namespace cppgrad::kernels::fast {

// Whether the row has a vectorised float32 form: exp, log, tanh, sigmoid, silu, erf, gelu, gelu_tanh.
bool has_vector_form(Unary op);

// out = op(in) by the vectorised form; false (nothing written) when the row has none or the
// tensors are not contiguous float32 of one shape.
bool unary_floats(Unary op, const Tensor& in, const Tensor& out);

// dA = grad · op'(input) in one vectorised pass, for the rows whose backward saves the input and
// has a transcendental derivative (erf, silu, gelu, gelu_tanh); undefined for the others, or
// when the tensors are not contiguous float32 of one shape.
Tensor unary_backward_floats(Unary op, const Tensor& grad, const Tensor& input);

}  // namespace cppgrad::kernels::fast
