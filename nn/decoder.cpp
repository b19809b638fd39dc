#include "nn/decoder.h"

namespace cppgrad::nn {

int64_t DecoderBlockOptions::swiglu_hidden_dim() const {
  if (hidden_dim() > 0) return hidden_dim();
  const int64_t two_thirds_of_4d = (8 * d_model() + 2) / 3;  // ⌈8·d/3⌉
  return (two_thirds_of_4d + 7) / 8 * 8;
}

DecoderBlock::DecoderBlock(const DecoderBlockOptions& o) : options(o) {
  CPPGRAD_CHECK(o.d_model() > 0 && o.hidden_dim() >= 0, "DecoderBlock: d_model {} must be positive, hidden_dim {} not negative",
                o.d_model(), o.hidden_dim());
  attention_norm = register_module("attention_norm", std::make_shared<RMSNorm>(Shape{o.d_model()}, o.norm_eps()));
  auto heads = MultiheadAttentionOptions(o.d_model(), o.num_heads()).num_kv_heads(o.num_kv_heads()).head_dim(o.head_dim());
  heads.rotary(true).rotary_base(o.rope_base()).rotary_layout(o.rope_layout()).window(o.window());
  attention = register_module("attention", std::make_shared<MultiheadAttention>(heads.dropout(o.dropout()).bias(o.bias())));
  ffn_norm = register_module("ffn_norm", std::make_shared<RMSNorm>(Shape{o.d_model()}, o.norm_eps()));
  feed_forward = register_module("feed_forward", std::make_shared<SwiGLU>(o.d_model(), o.swiglu_hidden_dim(), o.bias()));
  dropout = register_module("dropout", std::make_shared<Dropout>(o.dropout()));
}

Tensor DecoderBlock::run(const Tensor& x, const Tensor& key_padding_mask, KVCache* cache) {
  Tensor normed = attention_norm->forward(x);
  const AttentionArgs causal{.key_padding_mask = key_padding_mask, .need_weights = false, .is_causal = true};
  Tensor attended =
      cache ? attention->forward_step(normed, *cache, key_padding_mask) : attention->forward(normed, normed, normed, causal).output;
  Tensor h = x + dropout->forward(attended);                               // h = x + Attention(RMSNorm(x))
  return h + dropout->forward(feed_forward->forward(ffn_norm->forward(h)));  // h + SwiGLU(RMSNorm(h))
}

Tensor DecoderBlock::forward(const Tensor& x, const Tensor& key_padding_mask) { return run(x, key_padding_mask, nullptr); }

Tensor DecoderBlock::forward_step(const Tensor& x, KVCache& cache, const Tensor& key_padding_mask) {
  return run(x, key_padding_mask, &cache);
}

DecoderBlockOptions DecoderOptions::block_options() const {
  return DecoderBlockOptions(d_model(), num_heads()).num_kv_heads(num_kv_heads()).head_dim(head_dim())
      .hidden_dim(hidden_dim()).rope_base(rope_base()).rope_layout(rope_layout()).norm_eps(norm_eps())
      .window(window()).dropout(dropout());
}

Decoder::Decoder(const DecoderOptions& o) : options(o) {
  CPPGRAD_CHECK(o.vocab_size() > 0 && o.num_layers() >= 1, "Decoder: vocab_size {} and num_layers {} must be positive",
                o.vocab_size(), o.num_layers());
  tok_embeddings = register_module("tok_embeddings", std::make_shared<Embedding>(o.vocab_size(), o.d_model()));
  layers = register_module("layers", std::make_shared<ModuleList<DecoderBlock>>());
  for (int64_t i = 0; i < o.num_layers(); ++i) layers->push_back(std::make_shared<DecoderBlock>(o.block_options()));
  norm = register_module("norm", std::make_shared<RMSNorm>(Shape{o.d_model()}, o.norm_eps()));
  if (!o.tie_embeddings()) output = register_module("output", std::make_shared<Linear>(o.d_model(), o.vocab_size(), false));
}

Tensor Decoder::logits(const Tensor& h) {
  Tensor normed = norm->forward(h);
  return output ? output->forward(normed) : functional::linear(normed, tok_embeddings->weight);  // (B, T, d) -> (B, T, vocab)
}

Tensor Decoder::forward(const Tensor& tokens, const Tensor& key_padding_mask) {
  CPPGRAD_CHECK(tokens.dim() == 2 && tokens.dtype() == kInt64, "Decoder: tokens {} ({}) must be int64 (B, T)",
                shape_str(tokens.shape()), dtype_name(tokens.dtype()));
  Tensor h = tok_embeddings->forward(tokens);  // (B, T) -> (B, T, d_model)
  for (const auto& layer : *layers) h = layer->forward(h, key_padding_mask);
  return logits(h);
}

Tensor Decoder::forward_step(const Tensor& tokens, std::vector<KVCache>& caches, const Tensor& key_padding_mask) {
  CPPGRAD_CHECK(tokens.dim() == 2 && tokens.dtype() == kInt64, "Decoder::forward_step: tokens {} ({}) must be int64 (B, T_new)",
                shape_str(tokens.shape()), dtype_name(tokens.dtype()));
  CPPGRAD_CHECK(caches.size() == layers->size(), "Decoder::forward_step: {} caches for {} layers", caches.size(),
                layers->size());
  CPPGRAD_CHECK(!key_padding_mask.defined() || key_padding_mask.shape() == tokens.shape(),
                "Decoder::forward_step: key_padding_mask {} must be (B, T_new) as tokens {}",
                shape_str(key_padding_mask.shape()), shape_str(tokens.shape()));
  Tensor h = tok_embeddings->forward(tokens);
  for (size_t i = 0; i < caches.size(); ++i) h = (*layers)[i]->forward_step(h, caches[i], key_padding_mask);
  return logits(h);
}

}  // namespace cppgrad::nn
