// The model: token embeddings plus sinusoidal positions, an encoder-decoder Transformer, and a
// Linear layer that turns each decoder output into scores over the vocabulary.
#pragma once

#include "cppgrad.h"

namespace seq2seq {

struct ModelConfig {
  int64_t vocab = 16, d_model = 128, heads = 4, layers = 2, ff = 512;
  double dropout = 0.1;
  int64_t max_len = 256;
};

class Seq2SeqModel : public cppgrad::nn::Module {
 public:
  explicit Seq2SeqModel(const ModelConfig& config);

  // src (B, S), tgt_in (B, T) int64 -> logits (B, T, vocab)
  cppgrad::Tensor forward(const cppgrad::Tensor& src, const cppgrad::Tensor& tgt_in, const cppgrad::Tensor& src_pad,
                          const cppgrad::Tensor& tgt_pad);
  cppgrad::Tensor encode(const cppgrad::Tensor& src, const cppgrad::Tensor& src_pad);
  cppgrad::Tensor decode(const cppgrad::Tensor& tgt_in, const cppgrad::Tensor& memory, const cppgrad::Tensor& src_pad,
                         const cppgrad::Tensor& tgt_pad);
  // Greedy decoding: start from <start>, append the most likely next token, max_len times. Each
  // step feeds the newest token only, the earlier ones' keys and values kept per layer (cached
  // decoding, O(t) a step); cached(false) recomputes the whole prefix every step instead.
  cppgrad::Tensor greedy_decode(const cppgrad::Tensor& src, const cppgrad::Tensor& src_pad, int64_t max_len,
                                bool cached = true);

  std::string type_name() const override { return "Seq2SeqModel"; }

  const ModelConfig config;
  std::shared_ptr<cppgrad::nn::Embedding> embed;  // shared by source and target
  std::shared_ptr<cppgrad::nn::PositionalEncoding> positions;
  std::shared_ptr<cppgrad::nn::Transformer> transformer;
  std::shared_ptr<cppgrad::nn::Linear> generator;

 private:
  cppgrad::Tensor embed_tokens(const cppgrad::Tensor& tokens, int64_t start = 0);
};

// --export-onnx FILE (seq2seq/export_onnx.cpp, in the program alone): `model` with the averaged
// weights (those that decode) in eval mode as an ONNX file (cppgrad::onnx::export_module): inputs src (B, S), tgt_in (B, T) int64, src_pad (B, S),
// tgt_pad (B, T) bool (true = padding); output logits (B, T, vocab); B, S and T open.
void export_onnx_file(Seq2SeqModel& model, cppgrad::optim::ExponentialMovingAverage& average, const std::string& path);

}  // namespace seq2seq
