#include "seq2seq/model.h"

#include <cmath>

#include "seq2seq/tasks.h"

using namespace cppgrad;

namespace seq2seq {

Seq2SeqModel::Seq2SeqModel(const ModelConfig& c) : config(c) {
  transformer = register_module("transformer", std::make_shared<nn::Transformer>(nn::TransformerOptions(c.d_model, c.heads)
                                                                                     .num_encoder_layers(c.layers)
                                                                                     .num_decoder_layers(c.layers)
                                                                                     .dim_feedforward(c.ff)
                                                                                     .dropout(c.dropout)));
  embed = register_module("embed", std::make_shared<nn::Embedding>(c.vocab, c.d_model, PAD));
  // N(0, 1/d_model): after the √d_model scaling below, token vectors and the sinusoidal
  // positions have comparable size. With N(0, 1) the positions are drowned and copy does not learn.
  nn::init::normal_(embed->weight, 0.0, 1.0 / std::sqrt(static_cast<double>(c.d_model)));
  {
    NoGradGuard no_grad;
    embed->weight.select(0, PAD).zero_();
  }
  positions = register_module("positions", std::make_shared<nn::PositionalEncoding>(c.d_model, c.dropout, c.max_len));
  generator = register_module("generator", std::make_shared<nn::Linear>(c.d_model, c.vocab));
}

Tensor Seq2SeqModel::embed_tokens(const Tensor& tokens, int64_t start) {
  // (B, L) -> (B, L, d_model), scaled by √d_model as in the paper (§3.4), at positions start...
  return positions->forward(embed->forward(tokens) * std::sqrt(static_cast<double>(config.d_model)), start);
}

Tensor Seq2SeqModel::encode(const Tensor& src, const Tensor& src_pad) {
  return transformer->encoder->forward(embed_tokens(src), {}, src_pad);  // (B, S, d_model)
}

Tensor Seq2SeqModel::decode(const Tensor& tgt_in, const Tensor& memory, const Tensor& src_pad, const Tensor& tgt_pad) {
  // Causal self-attention: position t sees the target tokens up to t only.
  Tensor y = transformer->decoder->forward(embed_tokens(tgt_in), memory, {}, {}, tgt_pad, src_pad,
                                           /*tgt_is_causal=*/true);
  return generator->forward(y);  // (B, T, vocab)
}

Tensor Seq2SeqModel::forward(const Tensor& src, const Tensor& tgt_in, const Tensor& src_pad, const Tensor& tgt_pad) {
  return decode(tgt_in, encode(src, src_pad), src_pad, tgt_pad);
}

Tensor Seq2SeqModel::greedy_decode(const Tensor& src, const Tensor& src_pad, int64_t max_len, bool cached) {
  NoGradGuard no_grad;
  Tensor memory = encode(src, src_pad);
  std::vector<Tensor> tokens = {full({src.size(0), 1}, BOS, kInt64)};
  std::vector<nn::DecoderLayerCache> cache;  // per decoder layer: past self-attention keys and
                                             // values, and the memory's, projected once
  for (int64_t t = 0; t < max_len; ++t) {
    Tensor scores;  // (B, vocab): the next token's
    if (cached) {
      Tensor y = transformer->decoder->forward_step(embed_tokens(tokens.back(), t), memory, cache, src_pad);
      scores = generator->forward(y).select(1, 0);   // (B, 1, vocab) -> (B, vocab)
    } else {
      scores = decode(cat(tokens, 1), memory, src_pad, {}).select(1, t);  // (B, t+1, vocab) -> (B, vocab)
    }
    tokens.push_back(scores.argmax(-1, /*keepdim=*/true));                  // (B, 1)
  }
  return cat(std::vector<Tensor>(tokens.begin() + 1, tokens.end()), 1);  // (B, max_len), without <start>
}

}  // namespace seq2seq
