// The fast forms of dropout (skip them on a first reading: the reference is tensor/kernels/
// dropout.cpp, and for relu_dropout, dropout(relu(x))). One pass over memory each, shared
// between the threads, vectorised; the same mask, bit for bit, as the reference's.
#pragma once

#include <cstdint>
#include <vector>

#include "../../kernels.h"
#include "../../tensor.h"

namespace cppgrad::kernels::fast {

// Fills `mask` (contiguous, floating) with the mask of the stream `key`, and returns it.
Tensor fill_dropout_mask(const Tensor& mask, double p, uint64_t key);
// Fills `mask` with the mask keyed by example (kernels::example_dropout_mask), and returns it.
Tensor fill_example_dropout_mask(const Tensor& mask, double p, const std::vector<uint64_t>& keys,
                                 const ExampleLayout& layout);
// x ⊙ that mask without making it: dropout's forward, and on the gradient its backward.
Tensor dropout(const Tensor& x, double p, uint64_t key);
// dropout(relu(x)) in one pass, the mask that of the stream `key`; and its gradient, dy ⊙ mask
// where x > 0, else 0, the mask made again from the key rather than kept.
Tensor relu_dropout(const Tensor& x, double p, uint64_t key);
Tensor relu_dropout_backward(const Tensor& grad, const Tensor& x, double p, uint64_t key);
// out[i] = dropout's factor (0 or keep) of word first + i of the stream `key`, for i in [0, n): a
// row of weights whose words are consecutive, as the fused attention's are.
void dropout_factors(int64_t n, uint64_t first, uint64_t key, uint64_t threshold, float keep, float* out);
void dropout_factors(int64_t n, uint64_t first, uint64_t key, uint64_t threshold, double keep, double* out);

}  // namespace cppgrad::kernels::fast
