// The Transformer of "Attention Is All You Need", with torch.nn.Transformer's structure and
// parameter names, batch first: src (B, S, d_model), tgt (B, T, d_model); with
// batch_first(false), sequence first as PyTorch's default: src (S, B, d_model), tgt (T, B, d_model).
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
  CPPGRAD_ARG(bool, batch_first, true)  // false: (S, B, d_model), PyTorch's default
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;
using TransformerDecoderLayerOptions = TransformerLayerOptions;

class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerLayerOptions& options);
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  // Incremental decoding with causal self-attention (a decoder-only block): x (B, T_new, E) are
  // the newest positions; equals the last T_new rows of forward(prefix, {}, {}, true).
  // key_padding_mask (B, T_new), true = padding: left-padded prompts (KVCache, attention.h).
  Tensor forward_step(const Tensor& x, KVCache& cache, const Tensor& key_padding_mask = {});
  std::string type_name() const override { return "TransformerEncoderLayer"; }

  const TransformerLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  // One body for forward and forward_step: with a cache, the self-attention is incremental.
  Tensor run(const Tensor& src, const Tensor& mask, const Tensor& padding, bool is_causal, KVCache* cache);
  Tensor self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& padding, bool is_causal,
                              KVCache* cache);
  Tensor feed_forward_block(const Tensor& x);
};

// What incremental decoding keeps for one decoder layer.
struct DecoderLayerCache {
  KVCache self_attn, cross_attn;
};

class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(const TransformerLayerOptions& options);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false);
  // Incremental decoding: x (B, T_new, E) are the newest target positions (causal); equals the
  // last T_new rows of forward(prefix, memory, {}, {}, {}, memory_key_padding_mask, true).
  Tensor forward_step(const Tensor& x, const Tensor& memory, DecoderLayerCache& cache,
                      const Tensor& memory_key_padding_mask = {});
  std::string type_name() const override { return "TransformerDecoderLayer"; }

  const TransformerLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2, dropout3;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;

 private:
  Tensor run(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask, const Tensor& memory_mask,
             const Tensor& tgt_padding, const Tensor& memory_padding, bool tgt_is_causal, DecoderLayerCache* cache);
  Tensor self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& padding, bool is_causal,
                              KVCache* cache);
  Tensor cross_attention_block(const Tensor& x, const Tensor& memory, const Tensor& mask, const Tensor& padding,
                               KVCache* cache);
  Tensor feed_forward_block(const Tensor& x);
};

// N encoder layers ("layers.0", ...), then an optional final LayerNorm ("norm").
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerLayerOptions& layer_options, int64_t num_layers, bool final_norm = true);
  Tensor forward(const Tensor& src, const Tensor& mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  // Incremental causal decoding through every layer (then the final norm): `cache` holds one
  // KVCache per layer, empty at the start. key_padding_mask (B, T_new), true = padding: which new
  // positions are padding (left-padded prompts), remembered by the caches for later steps.
  Tensor forward_step(const Tensor& x, std::vector<KVCache>& cache, const Tensor& key_padding_mask = {});
  std::string type_name() const override { return "TransformerEncoder"; }
  // Checkpoint each layer (autograd::checkpoint): its activations are recomputed in backward
  // instead of kept, so training holds one layer's activations at a time. Off by default.
  void set_checkpoint_layers(bool enabled) { checkpoint_layers_ = enabled; }
  bool checkpoint_layers() const { return checkpoint_layers_; }

  std::shared_ptr<ModuleList<TransformerEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // null without final_norm

 private:
  bool checkpoint_layers_ = false;
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerLayerOptions& layer_options, int64_t num_layers, bool final_norm = true);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false);
  // Incremental decoding through every layer (then the final norm), one cache per layer.
  Tensor forward_step(const Tensor& x, const Tensor& memory, std::vector<DecoderLayerCache>& cache,
                      const Tensor& memory_key_padding_mask = {});
  std::string type_name() const override { return "TransformerDecoder"; }
  void set_checkpoint_layers(bool enabled) { checkpoint_layers_ = enabled; }  // as TransformerEncoder's
  bool checkpoint_layers() const { return checkpoint_layers_; }

  std::shared_ptr<ModuleList<TransformerDecoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;

 private:
  bool checkpoint_layers_ = false;
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
  CPPGRAD_ARG(bool, batch_first, true)  // false: (S, B, d_model), PyTorch's default
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
  // Checkpoint every encoder and decoder layer (see TransformerEncoder::set_checkpoint_layers).
  void set_checkpoint_layers(bool enabled) {
    encoder->set_checkpoint_layers(enabled);
    decoder->set_checkpoint_layers(enabled);
  }

  const TransformerOptions options;
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
};

// Adds the paper's sinusoidal positions to (B, T, d_model) inputs, then dropout:
//   PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))
// batch_first = false takes (T, B, d_model), the layout of the Transformer modules'
// batch_first(false) (and of PyTorch's tutorial PositionalEncoding), with the same semantics.
class PositionalEncoding : public UnaryModule {
 public:
  PositionalEncoding(int64_t d_model, double dropout = 0.1, int64_t max_len = 5000, bool batch_first = true);
  Tensor forward(const Tensor& x) override;
  // The positions start, start + 1, ... instead of 0, 1, ...: the newest tokens of a sequence
  // decoded one step at a time (forward_step), whose earlier positions are already cached.
  Tensor forward(const Tensor& x, int64_t start);
  std::string type_name() const override { return "PositionalEncoding"; }

  bool batch_first;
  Buffer pe;  // (max_len, d_model), a non-persistent buffer: computed, never saved
  std::shared_ptr<Dropout> dropout;
};

// The float causal mask of torch.nn.Transformer.generate_square_subsequent_mask.
inline Tensor generate_square_subsequent_mask(int64_t size, DType dtype = kFloat32) {
  return functional::generate_square_subsequent_mask(size, dtype);
}

}  // namespace cppgrad::nn
