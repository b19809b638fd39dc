// The fast form of the attention op (skip it on a first reading): kernels::fast::fused_attention
// recorded on the graph, its backward rebuilding the weights block by block from the saved
// log-sum-exp. Its reference is cppgrad::fused_attention's reference-mode body
// (autograd/ops_attention.cpp), which holds the weights.
#pragma once

#include <cstdint>
#include <vector>

#include "../functions.h"

namespace cppgrad::fast {

// The streams of the dropout mask on the weights: one key (kernels::dropout_mask), or one per
// example (kernels::example_dropout_mask, inside a KeyedDropout scope).
struct DropoutKeys {
  uint64_t key = 0;
  std::vector<uint64_t> by_example;  // when not empty, the streams
};
// dropout_keys: unused when dropout_p is 0. k and v may have fewer heads than q (grouped-query
// attention), as cppgrad::fused_attention says.
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool is_causal,
                       double scale, double dropout_p, const DropoutKeys& dropout_keys,
                       const AttentionPositions& positions);

}  // namespace cppgrad::fast
