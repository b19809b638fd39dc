// The decoder of today's small language models (Llama, Mistral): pre-norm blocks of
//
//   h = x + Attention(RMSNorm(x))      causal, rotary positions on queries and keys, g key/value heads
//   y = h + SwiGLU(RMSNorm(h))
//
// and a decoder-only stack: token embeddings (no position vector: RoPE carries positions), the
// blocks, a final RMSNorm and a bias-free output projection to the vocabulary. Against the 2017
// layer (transformer.h): RMSNorm for LayerNorm, the norm before each block rather than after,
// SwiGLU for ReLU's two matrices, RoPE for added sinusoids, and shared key/value heads.
//
//   nn::Decoder lm(nn::DecoderOptions(vocab, 256, 4, 8).num_kv_heads(2));
//   Tensor logits = lm.forward(tokens);                      // (B, T) -> (B, T, vocab)
//   std::vector<nn::KVCache> caches(4);                      // one per layer, empty at first
//   Tensor next = lm.forward_step(prompt, caches);           // then one token at a time
//   lm.forward_step(left_padded_prompts, caches, padding);   // a batch of prompts of different lengths
//
// Parameter names follow Meta's Llama code: tok_embeddings.weight, layers.0.attention_norm.weight,
// layers.0.attention.q_proj_weight (MultiheadAttention's names), layers.0.ffn_norm.weight,
// layers.0.feed_forward.w1.weight, norm.weight, output.weight.
#pragma once

#include "attention.h"
#include "rmsnorm.h"
#include "swiglu.h"

namespace cppgrad::nn {

struct DecoderBlockOptions {
  DecoderBlockOptions(int64_t d_model, int64_t num_heads) : d_model_(d_model), num_heads_(num_heads) {}
  CPPGRAD_ARG(int64_t, d_model, 0)
  CPPGRAD_ARG(int64_t, num_heads, 1)
  CPPGRAD_ARG(int64_t, num_kv_heads, 0)  // 0: num_heads; 1: multi-query; a divisor: grouped-query
  CPPGRAD_ARG(int64_t, head_dim, 0)      // each head's width; 0: d_model / num_heads (MultiheadAttentionOptions)
  CPPGRAD_ARG(int64_t, hidden_dim, 0)    // SwiGLU's; 0: 8·d_model/3 rounded up to a multiple of 8
  CPPGRAD_ARG(double, rope_base, 10000.0)
  CPPGRAD_ARG(RotaryLayout, rope_layout, RotaryLayout::Halves)  // the library's default, Hugging Face's (rotary.h)
  CPPGRAD_ARG(std::optional<double>, norm_eps, 1e-5)
  CPPGRAD_ARG(std::optional<int64_t>, window, std::nullopt)  // sliding-window attention, as Mistral's
  CPPGRAD_ARG(double, dropout, 0.0)  // on the attention weights and each block's output, while training
  CPPGRAD_ARG(bool, bias, false)     // biases in the projections (Llama has none)
  int64_t swiglu_hidden_dim() const;
};

class DecoderBlock : public Module {
 public:
  explicit DecoderBlock(const DecoderBlockOptions& options);
  // x (B, T, d_model), causal self-attention; key_padding_mask (B, T), true = padding.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = {});
  // Incremental decoding: x (B, T_new, d_model) are the newest positions; equals the last T_new
  // rows of forward(prefix). key_padding_mask (B, T_new), true = padding: left-padded prompts,
  // remembered by the cache (KVCache, attention.h).
  Tensor forward_step(const Tensor& x, KVCache& cache, const Tensor& key_padding_mask = {});
  std::string type_name() const override { return "DecoderBlock"; }

  const DecoderBlockOptions options;
  std::shared_ptr<RMSNorm> attention_norm, ffn_norm;
  std::shared_ptr<MultiheadAttention> attention;
  std::shared_ptr<SwiGLU> feed_forward;
  std::shared_ptr<Dropout> dropout;

 private:
  Tensor run(const Tensor& x, const Tensor& key_padding_mask, KVCache* cache);
};

struct DecoderOptions {
  DecoderOptions(int64_t vocab_size, int64_t d_model, int64_t num_layers, int64_t num_heads)
      : vocab_size_(vocab_size), d_model_(d_model), num_layers_(num_layers), num_heads_(num_heads) {}
  CPPGRAD_ARG(int64_t, vocab_size, 0)
  CPPGRAD_ARG(int64_t, d_model, 0)
  CPPGRAD_ARG(int64_t, num_layers, 1)
  CPPGRAD_ARG(int64_t, num_heads, 1)
  CPPGRAD_ARG(int64_t, num_kv_heads, 0)
  CPPGRAD_ARG(int64_t, head_dim, 0)  // 0: d_model / num_heads; Hugging Face's config.json head_dim
  CPPGRAD_ARG(int64_t, hidden_dim, 0)
  CPPGRAD_ARG(double, rope_base, 10000.0)
  CPPGRAD_ARG(RotaryLayout, rope_layout, RotaryLayout::Halves)
  CPPGRAD_ARG(std::optional<double>, norm_eps, 1e-5)
  CPPGRAD_ARG(std::optional<int64_t>, window, std::nullopt)
  CPPGRAD_ARG(double, dropout, 0.0)
  CPPGRAD_ARG(bool, tie_embeddings, false)  // the logits use tok_embeddings.weight; no output Linear
  DecoderBlockOptions block_options() const;
};

class Decoder : public Module {
 public:
  explicit Decoder(const DecoderOptions& options);
  // tokens (B, T) int64 -> logits (B, T, vocab_size); key_padding_mask (B, T), true = padding.
  Tensor forward(const Tensor& tokens, const Tensor& key_padding_mask = {});
  // The newest tokens (B, T_new) -> their logits (B, T_new, vocab_size), with one KVCache per
  // layer in `caches` (empty at the start): equals the last T_new rows of forward(prefix).
  // Batched prompts of different lengths go left-padded, key_padding_mask (B, T_new) marking the
  // padding (true); the caches remember it and each sequence's rotary positions start at its
  // first real token, so every sequence decodes as it would alone. Later steps need no mask.
  Tensor forward_step(const Tensor& tokens, std::vector<KVCache>& caches, const Tensor& key_padding_mask = {});
  std::string type_name() const override { return "Decoder"; }

  const DecoderOptions options;
  std::shared_ptr<Embedding> tok_embeddings;
  std::shared_ptr<ModuleList<DecoderBlock>> layers;
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<Linear> output;  // null with tie_embeddings

 private:
  Tensor logits(const Tensor& h);  // final norm, then the output projection
};

}  // namespace cppgrad::nn
