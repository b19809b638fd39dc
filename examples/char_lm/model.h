// char_lm's model: a decoder-only Transformer over characters.
//
// Token embedding plus sinusoidal positions, N Transformer layers with causal self-attention, a
// final LayerNorm, and scores over the vocabulary from the embedding matrix itself. An encoder
// layer under a causal mask is exactly a decoder-only block: a decoder layer would add a
// cross-attention over an encoder's output, which a language model does not have.
#pragma once

#include <vector>

#include "cppgrad.h"

namespace char_lm {

struct ModelConfig {
  int64_t d_model = 128, heads = 4, layers = 2, ff = 512;
  double dropout = 0.1;
  int64_t seq_len = 64;  // the longest context: positions 0 .. seq_len - 1
};

class CharLM : public cppgrad::nn::Module {
 public:
  CharLM(int64_t vocab, const ModelConfig& config);

  // tokens (B, T) int64 -> logits (B, T, vocab): position t's scores for the character at t + 1.
  cppgrad::Tensor forward(const cppgrad::Tensor& tokens);
  // The same for the newest tokens (B, T_new) of a sequence whose `cache.size()` earlier ones
  // are cached (one KVCache per layer): their logits (B, T_new, vocab), each step O(length).
  cppgrad::Tensor forward_step(const cppgrad::Tensor& tokens, std::vector<cppgrad::nn::KVCache>& cache);
  std::string type_name() const override { return "CharLM"; }

  int64_t d_model;
  std::shared_ptr<cppgrad::nn::Embedding> embed;
  std::shared_ptr<cppgrad::nn::PositionalEncoding> positions;
  std::shared_ptr<cppgrad::nn::TransformerEncoder> transformer;
};

}  // namespace char_lm
