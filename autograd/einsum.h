// einsum, as torch.einsum: a sum of products of the operands' elements, their dims named by
// letters,
//
//   einsum("bhqd,bhkd->bhqk", {q, k})[b,h,q,k] = Σ_d q[b,h,q,d] · k[b,h,k,d].
//
// The grammar is PyTorch's: one term of letters (a-z, A-Z) per operand, separated by commas;
// "->" then the output's letters, or no arrow for the implicit output (the letters that appear
// once, in alphabetical order); "..." for the dims no letter names (broadcast across operands,
// first in an implicit output, summed when an explicit output leaves them out); a letter
// repeated within a term takes a diagonal ("ii->i"), or a trace ("ii->"); spaces are ignored.
// Dims of size 1 broadcast, as in PyTorch. A letter in no output is summed over.
//
// Lowered to differentiable ops (permute, reshape, matmul, sum), so autograd gives the
// gradients (and their gradients) with no formula of its own: each pair of operands becomes one
// batched matmul, (batch, rows, summed) @ (batch, summed, columns), and the attention subscripts
// run as the matmul written by hand does, on views of the same layouts.
#pragma once

#include <string_view>
#include <vector>

#include "../tensor/tensor.h"

namespace cppgrad {

// Operands of one floating dtype. Throws cppgrad::Error naming the equation, the shapes and what
// is wrong: "einsum: 'ij,jk->ik' with [2,3] and [4,5]: index j has sizes 3 and 4".
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);

}  // namespace cppgrad
