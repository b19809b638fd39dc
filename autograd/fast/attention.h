// The fast form of the attention op (skip it on a first reading): kernels::fast::fused_attention
// recorded on the graph, its backward rebuilding the weights block by block from the saved
// log-sum-exp. Its reference is cppgrad::fused_attention's reference-mode body
// (autograd/ops_attention.cpp), which holds the weights.
#pragma once

#include <cstdint>

#include "../functions.h"

namespace cppgrad::fast {

// dropout_key: the stream of the dropout mask on the weights (unused when dropout_p is 0). k and
// v may have fewer heads than q (grouped-query attention), as cppgrad::fused_attention says.
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool is_causal,
                       double scale, double dropout_p, uint64_t dropout_key, const AttentionPositions& positions);

}  // namespace cppgrad::fast
