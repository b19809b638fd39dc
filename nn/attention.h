// Multi-head attention (Vaswani et al. 2017, §3.2.2), batch first: (B, T, E).
//
//   MultiHead(Q, K, V) = Concat(head_1, ..., head_h) · W_O,
//   head_i = Attention(Q W_Q_i, K W_K_i, V W_V_i),   W_Q_i: (d_model, d_k), d_k = d_model / h
//
// (or another d_k, MultiheadAttentionOptions::head_dim, as Gemma's and some Llamas' heads are.)
//
// MultiheadAttention computes all heads' projections with one fused matrix, as PyTorch does:
// in_proj_weight (3E, E) stacks W_Q, W_K and W_V, and each of those stacks the h heads' W_*_i.
// PerHeadAttention computes the same thing the way the paper draws it, one small Linear per
// head: it is slower, and it is there to be read and compared.
#pragma once

#include "layers.h"
#include "options.h"
#include "rotary.h"

namespace cppgrad::nn {

struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads) : embed_dim_(embed_dim), num_heads_(num_heads) {}
  CPPGRAD_ARG(int64_t, embed_dim, 0)
  CPPGRAD_ARG(int64_t, num_heads, 1)
  CPPGRAD_ARG(double, dropout, 0.0)  // on the attention weights, while training
  CPPGRAD_ARG(bool, bias, true)
  CPPGRAD_ARG(int64_t, kdim, 0)  // 0: embed_dim
  CPPGRAD_ARG(int64_t, vdim, 0)  // 0: embed_dim
  // false: inputs and output are sequence first, (T, B, E), PyTorch's default layout. Here the
  // default is batch first (B, T, E); the weights returned are (B, T, S) either way.
  CPPGRAD_ARG(bool, batch_first, true)
  // ---- the modern decoder's options (none changes the layer unless set) ----
  // Key/value heads: 0 means num_heads (multi-head attention, the layer above exactly); 1 is
  // multi-query attention; any other divisor g of num_heads grouped-query attention, query head
  // i reading key/value head i / (num_heads / g). With g ≠ num_heads the layer keeps separate
  // weights, q_proj_weight (E, E), k_proj_weight (g·d_k, kdim), v_proj_weight (g·d_k, vdim),
  // in_proj_bias (E + 2·g·d_k) = [b_q, b_k, b_v]. In Hugging Face's Llama / Mistral / Qwen2
  // names these are self_attn.q_proj.weight, k_proj.weight, v_proj.weight (their biases, where a
  // model has them, are in_proj_bias's three parts), and out_proj.weight is o_proj.weight.
  CPPGRAD_ARG(int64_t, num_kv_heads, 0)
  // Each head's width d_k. 0 means embed_dim / num_heads (which must divide then), the paper's
  // and PyTorch's. Another width, as Hugging Face's config.json `head_dim` gives for Gemma and
  // some Llama / Mistral models, makes the heads wider or narrower than the embedding's share:
  // q_proj_weight (num_heads·d_k, E), k/v_proj_weight (g·d_k, kdim / vdim), in_proj_bias
  // (num_heads·d_k + 2·g·d_k), out_proj (num_heads·d_k -> E), scores scaled by 1/√d_k.
  CPPGRAD_ARG(int64_t, head_dim, 0)
  // Rotary position embeddings on each head's queries and keys (nn/rotary.h), positions counted
  // from 0 in forward and from the cache length in forward_step. The layout defaults to
  // Hugging Face's (RotaryLayout::Halves), as everywhere in the library; Meta's original
  // checkpoints need RotaryLayout::Interleaved.
  CPPGRAD_ARG(bool, rotary, false)
  CPPGRAD_ARG(double, rotary_base, 10000.0)
  CPPGRAD_ARG(RotaryLayout, rotary_layout, RotaryLayout::Halves)
  // A sliding window of keys (F::AttentionOptions::window), and ALiBi with the paper's slopes.
  CPPGRAD_ARG(std::optional<int64_t>, window, std::nullopt)
  CPPGRAD_ARG(bool, alibi, false)
};

// (T, B, E) <-> (B, T, E) for a layer that is not batch first; an unbatched (T, E) stays.
inline Tensor swap_batch_and_sequence(const Tensor& x, bool batch_first) {
  return !batch_first && x.defined() && x.dim() == 3 ? x.transpose(0, 1) : x;
}

using AttentionOutput = functional::AttentionOutput;

// What MultiheadAttention::forward takes besides query, key and value: PyTorch's keyword
// arguments, by the same names, in the same order. Written at the call with designated
// initializers, they read as PyTorch's keywords do:
//
//   attn.forward(x, x, x, {.key_padding_mask = pad, .need_weights = false, .is_causal = true});
//
// (C++ wants the names in the order declared here; any of them may be left out.)
struct AttentionArgs {
  // (B, S): bool, true = this key is padding, or float, added to the scores.
  Tensor key_padding_mask{};
  // Return the attention weights too.
  bool need_weights = true;
  // (T, S) or (B·H, T, S): bool, true = masked out, or float, added to the scores.
  Tensor attn_mask{};
  // The weights averaged over the heads, (B, T, S); false: per head, (B, H, T, S).
  bool average_attn_weights = true;
  // Hide key j from query i when j > i (with or without an attn_mask).
  bool is_causal = false;
};

// The attention masks of MultiheadAttention's forward as one float mask to add to the scores,
// (B, 1 or H, T, S), or undefined when there is none. Bool masks: true = masked out (-inf).
// key_padding_mask: (B, S); attn_mask: (T, S) or (B·H, T, S).
Tensor merge_attention_masks(const Tensor& key_padding_mask, const Tensor& attn_mask, int64_t batch, int64_t heads,
                             int64_t target_len, int64_t source_len, DType dtype);

// The keys and values of the positions attended to so far, per key/value head, for incremental
// decoding: (B, num_kv_heads, L, d_k) each, undefined before the first step. One per attention
// layer; with grouped-query heads it is num_heads / num_kv_heads times smaller.
//
// Batches of prompts of different lengths are left-padded, as Hugging Face's generate does: the
// step that feeds the prompts passes their key_padding_mask (B, T_new), bool, true = padding, and
// the cache keeps it for its L positions, so that every later step hides those keys too (later
// tokens are not padding: their steps need no mask). Positions then count per sequence: a
// sequence's first real token is position 0, however much padding stands before it.
struct KVCache {
  Tensor key, value;
  Tensor key_padding_mask;  // (B, L) bool, true = padding; undefined while no cached position is
  int64_t length() const { return key.defined() ? key.size(2) : 0; }
  // The positions (B, T_new) int64 of the next T_new tokens of a batch of `batch` sequences,
  // `new_padding` (B, T_new) marking those that are padding: each sequence counts from its
  // first real token. A padded position gets 0 (its keys are hidden, its output unused).
  Tensor positions(int64_t batch, int64_t T_new, const Tensor& new_padding = {}) const;
  // Whether positions are per sequence: some position, cached or new, is padding.
  bool padded(const Tensor& new_padding = {}) const { return key_padding_mask.defined() || new_padding.defined(); }
};

class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(const MultiheadAttentionOptions& options);
  MultiheadAttention(int64_t embed_dim, int64_t num_heads) : MultiheadAttention(MultiheadAttentionOptions(embed_dim, num_heads)) {}

  // query (B, T, E), key (B, S, kdim), value (B, S, vdim) -> output (B, T, E) and, if
  // need_weights, the attention weights: (B, T, S) averaged over heads, or (B, H, T, S).
  // With batch_first(false): query (T, B, E), key and value (S, B, ·), output (T, B, E).
  // Unbatched (T, E) inputs work too.
  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionArgs& args = {});

  // Incremental decoding. Causal self-attention one step at a time: x (B, T_new, E) are the
  // newest positions; their keys and values are appended to `cache`, and each attends to every
  // cached position before it and to itself. The output equals the last T_new rows of
  // forward(prefix, prefix, prefix, {.is_causal = true}) on the whole prefix, but a step costs
  // O(L), not O(L²): the past keys and values are not projected again.
  // key_padding_mask (B, T_new), bool, true = padding, marks which new positions are padding
  // (left-padded prompts); the cache remembers it (KVCache above). With padding, the output's
  // real rows equal each sequence's own unpadded decoding; padded rows are zero-attention rows.
  Tensor forward_step(const Tensor& x, KVCache& cache, const Tensor& key_padding_mask = {});
  // Cross-attention over a fixed memory (B, S, kdim): its keys and values are projected on the
  // first call and kept in `cache`; later calls reuse them.
  Tensor forward_step(const Tensor& query, const Tensor& memory, KVCache& cache, const Tensor& key_padding_mask = {});

  std::string type_name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;
  void reset_parameters(Generator& gen = default_generator());

  const MultiheadAttentionOptions options;  // kdim, vdim, num_kv_heads and head_dim filled in
  const int64_t head_dim;  // d_k: options.head_dim(), embed_dim / num_heads unless set
  // Same-size inputs: one fused (3E, E) projection. kdim/vdim differing from E, fewer key/value
  // heads, or heads whose widths do not add up to E: three.
  Parameter in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight;
  Parameter in_proj_bias;  // (3E), or (H·d_k + 2·num_kv_heads·d_k); undefined without bias
  std::shared_ptr<Linear> out_proj;

  // For inspection (heat maps, lessons): when set, every forward keeps its per-head attention
  // weights, detached, in last_attention (B, H, T, S), whatever need_weights says.
  bool store_attention = false;
  Tensor last_attention;

 private:
  bool fused() const { return in_proj_weight.defined(); }
  // x · W_ᵀ + b_ for which = 0 (Q), 1 (K), 2 (V): a row block of the fused matrix, or its own.
  Tensor project(const Tensor& x, int which) const;
  // Rows of in_proj_bias (and of the fused weight) where part `which` starts, and its width.
  int64_t part_start(int which) const;
  int64_t part_width(int which) const;
  // Rotary positions on (B, heads, L, d_k) from position `offset`, when the options ask.
  Tensor rotate(const Tensor& x, int64_t offset) const;
  Tensor rotate(const Tensor& x, const Tensor& positions) const;  // positions (B, L), per sequence
  // The sdpa options every forward shares: GQA, window, ALiBi.
  functional::AttentionOptions attention_options() const;
};

// The same layer written head by head: h separate Linear(E, d_k) for each of Q, K and V,
// an explicit loop over the heads, and the output projection.
class PerHeadAttention : public Module {
 public:
  PerHeadAttention(int64_t embed_dim, int64_t num_heads, bool bias = true);

  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionArgs& args = {});

  // Copies a fused MultiheadAttention's weights: head i's W_Q_i is rows [i·d_k, (i+1)·d_k) of
  // in_proj_weight's first E rows, and so on for K and V.
  void load_from(const MultiheadAttention& fused);
  // The per-head weights (or their gradients) stacked back into the fused layout (3E, E) / (3E).
  Tensor stacked_in_proj_weight(bool gradients = false) const { return stacked(&Linear::weight, gradients); }
  Tensor stacked_in_proj_bias(bool gradients = false) const { return stacked(&Linear::bias, gradients); }

  std::string type_name() const override { return "PerHeadAttention"; }

  const int64_t embed_dim, num_heads, head_dim;
  std::shared_ptr<ModuleList<Linear>> q_heads, k_heads, v_heads;
  std::shared_ptr<Linear> out_proj;

 private:
  Tensor stacked(Parameter Linear::*member, bool gradients) const;
};

}  // namespace cppgrad::nn
