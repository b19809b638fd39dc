// The Transformer of "Attention Is All You Need", with torch.nn.Transformer's structure and
// parameter names, batch first: src (B, S, d_model), tgt (B, T, d_model).
//
//   encoder layer:  x = Norm(x + Dropout(SelfAttention(x)))
//                   x = Norm(x + Dropout(FeedForward(x)))      FeedForward = Linear·act·Linear
//   decoder layer:  the same, with a cross-attention block over the encoder's output (memory)
//                   between the two.
// norm_first moves each Norm inside its residual branch (pre-norm): x = x + Block(Norm(x)).
#pragma once

#include "attention.h"

namespace cppgrad::nn {

// The feed-forward block's activation: ReLU, GELU (x·Φ(x)), or GELU's tanh approximation
// (what PyTorch gives with activation=lambda x: F.gelu(x, approximate="tanh")).
enum class Activation { ReLU, GELU, GELUTanh };

struct TransformerLayerOptions {
  TransformerLayerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  CPPGRAD_ARG(int64_t, d_model, 0)
  CPPGRAD_ARG(int64_t, nhead, 1)
  CPPGRAD_ARG(int64_t, dim_feedforward, 2048)
  CPPGRAD_ARG(double, dropout, 0.1)
  CPPGRAD_ARG(Activation, activation, Activation::ReLU)
  CPPGRAD_ARG(double, layer_norm_eps, 1e-5)
  CPPGRAD_ARG(bool, norm_first, false)
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;
using TransformerDecoderLayerOptions = TransformerLayerOptions;

class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerLayerOptions& options);
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  std::string type_name() const override { return "TransformerEncoderLayer"; }

  const TransformerLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  Tensor self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& padding, bool is_causal);
  Tensor feed_forward_block(const Tensor& x);
};

class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(const TransformerLayerOptions& options);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false);
  std::string type_name() const override { return "TransformerDecoderLayer"; }

  const TransformerLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2, dropout3;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;

 private:
  Tensor self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& padding, bool is_causal);
  Tensor cross_attention_block(const Tensor& x, const Tensor& memory, const Tensor& mask, const Tensor& padding);
  Tensor feed_forward_block(const Tensor& x);
};

// N encoder layers ("layers.0", ...), then an optional final LayerNorm ("norm").
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerLayerOptions& layer_options, int64_t num_layers, bool final_norm = true);
  Tensor forward(const Tensor& src, const Tensor& mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  std::string type_name() const override { return "TransformerEncoder"; }

  std::shared_ptr<ModuleList<TransformerEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // null without final_norm
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerLayerOptions& layer_options, int64_t num_layers, bool final_norm = true);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false);
  std::string type_name() const override { return "TransformerDecoder"; }

  std::shared_ptr<ModuleList<TransformerDecoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;
};

struct TransformerOptions {
  TransformerOptions(int64_t d_model = 512, int64_t nhead = 8) : d_model_(d_model), nhead_(nhead) {}
  CPPGRAD_ARG(int64_t, d_model, 512)
  CPPGRAD_ARG(int64_t, nhead, 8)
  CPPGRAD_ARG(int64_t, num_encoder_layers, 6)
  CPPGRAD_ARG(int64_t, num_decoder_layers, 6)
  CPPGRAD_ARG(int64_t, dim_feedforward, 2048)
  CPPGRAD_ARG(double, dropout, 0.1)
  CPPGRAD_ARG(Activation, activation, Activation::ReLU)
  CPPGRAD_ARG(double, layer_norm_eps, 1e-5)
  CPPGRAD_ARG(bool, norm_first, false)
  TransformerLayerOptions layer_options() const;
};

// Encoder and decoder, each with a final norm; every weight matrix Xavier-initialised, as
// torch.nn.Transformer does.
class Transformer : public Module {
 public:
  explicit Transformer(const TransformerOptions& options = {});
  // src (B, S, E), tgt (B, T, E) -> (B, T, E); unbatched (S, E), (T, E) -> (T, E) too.
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {}, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& src_key_padding_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool src_is_causal = false, bool tgt_is_causal = false);
  std::string type_name() const override { return "Transformer"; }

  const TransformerOptions options;
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
};

// Adds the paper's sinusoidal positions to (B, T, d_model) inputs, then dropout:
//   PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))
class PositionalEncoding : public UnaryModule {
 public:
  PositionalEncoding(int64_t d_model, double dropout = 0.1, int64_t max_len = 5000);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "PositionalEncoding"; }

  Tensor pe;  // (max_len, d_model), a non-persistent buffer: computed, never saved
  std::shared_ptr<Dropout> dropout;
};

// The float causal mask of torch.nn.Transformer.generate_square_subsequent_mask.
inline Tensor generate_square_subsequent_mask(int64_t size, DType dtype = kFloat32) {
  return functional::generate_square_subsequent_mask(size, dtype);
}

}  // namespace cppgrad::nn
