#include "char_lm/model.h"

#include <cmath>

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace char_lm {

// The choices below (the embedding's scale, pre-norm, ReLU) were each tried against the
// alternative: bench/README.md, "char_lm's model".
CharLM::CharLM(int64_t vocab, const ModelConfig& c) : d_model(c.d_model) {
  embed = register_module("embed", std::make_shared<nn::Embedding>(vocab, c.d_model));
  // N(0, 1/(4·d_model)): scaled by √d_model on the way in, a token vector's entries are half
  // the size of the positions'. Larger, the residual stream is mostly the current character,
  // and the tied output scores that character far above the rest: the first loss lies far
  // above ln(vocab), and training is slower.
  nn::init::normal_(embed->weight, 0.0, 0.5 / std::sqrt(static_cast<double>(c.d_model)));
  positions = register_module("positions", std::make_shared<nn::PositionalEncoding>(c.d_model, c.dropout, c.seq_len));
  // Pre-norm (norm_first) with the encoder's final LayerNorm, as GPT-2 has it: the residual path
  // stays a plain sum from the embedding to the last norm. ReLU, not GELU: the two learn alike,
  // and GELU's erf, forward and backward, makes a step longer.
  const auto layer =
      nn::TransformerLayerOptions(c.d_model, c.heads).dim_feedforward(c.ff).dropout(c.dropout).norm_first(true);
  transformer = register_module("transformer", std::make_shared<nn::TransformerEncoder>(layer, c.layers, /*final_norm=*/true));
}

Tensor CharLM::forward(const Tensor& tokens) {
  Tensor x = positions->forward(embed->forward(tokens) * std::sqrt(static_cast<double>(d_model)));  // (B, T, d)
  Tensor h = transformer->forward(x, {}, {}, /*is_causal=*/true);                                  // (B, T, d)
  // Tied output (Press & Wolf 2017): logits = h · Eᵀ with the embedding's own tensor, so its
  // gradient is the sum of both uses and the optimizer holds it once.
  return F::linear(h, embed->weight);  // (B, T, d) · (vocab, d)ᵀ -> (B, T, vocab)
}

Tensor CharLM::forward_step(const Tensor& tokens, std::vector<nn::KVCache>& cache) {
  const int64_t start = cache.empty() ? 0 : cache.front().length();
  Tensor x = positions->forward(embed->forward(tokens) * std::sqrt(static_cast<double>(d_model)), start);
  return F::linear(transformer->forward_step(x, cache), embed->weight);
}

}  // namespace char_lm
