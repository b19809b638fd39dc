// The exporters of nn/'s layers: each writes into the graph what the layer's forward computes, in
// eval mode (Dropout is the identity), with the layer's parameters as initializers. A model of
// one's own composes them in its Module::export_onnx, as its forward composes the layers:
//
//   std::vector<onnx::Value> Net::export_onnx(onnx::Graph& g, const std::vector<onnx::Value>& in) const {
//     return {onnx::linear(g, *fc2, onnx::relu(g, onnx::linear(g, *fc1, in[0])))};
//   }
//
// Each exporter checks what it cannot express (sliding windows, ALiBi) and refuses it with a
// cppgrad::Error naming the layer, rather than writing a graph that computes something else.
#pragma once

#include "../attention.h"
#include "../decoder.h"
#include "../transformer.h"
#include "graph.h"

namespace cppgrad::onnx {

Value linear(Graph& g, const nn::Linear& layer, const Value& x);             // (..., in) -> (..., out)
Value embedding(Graph& g, const nn::Embedding& layer, const Value& indices);  // (...) int64 -> (..., dim)
Value layer_norm(Graph& g, const nn::LayerNorm& layer, const Value& x);
Value rms_norm(Graph& g, const nn::RMSNorm& layer, const Value& x);
Value relu(Graph& g, const Value& x);
Value gelu(Graph& g, const Value& x, const std::string& approximate = "none");  // "none" (erf) or "tanh"
Value tanh(Graph& g, const Value& x);
Value sigmoid(Graph& g, const Value& x);
Value silu(Graph& g, const Value& x);
Value activation(Graph& g, nn::Activation which, const Value& x);
Value swiglu(Graph& g, const nn::SwiGLU& layer, const Value& x);
Value sequential(Graph& g, const nn::Sequential& layers, const Value& x);
// x (B, T, d_model) + the first T rows of the sinusoids.
Value positional_encoding(Graph& g, const nn::PositionalEncoding& layer, const Value& x);
// Rotary positions 0, 1, ... on x (..., T, d), as nn::functional::apply_rotary.
Value rotary(Graph& g, const Value& x, int64_t dim, double base, nn::RotaryLayout layout);

// MultiheadAttention's masks, as AttentionArgs names them: graph inputs (or none). attn_mask is
// (T, S) or (B·H, T, S), key_padding_mask (B, S); bool (true = masked out) or float (added).
struct AttentionMasks {
  Value attn_mask{};
  Value key_padding_mask{};
  bool is_causal = false;
};

// query (B, T, E), key and value (B, S, ·) (or sequence first, as the layer's batch_first says)
// -> (B, T, E). The attention weights are not an output.
Value multihead_attention(Graph& g, const nn::MultiheadAttention& layer, const Value& query, const Value& key,
                          const Value& value, const AttentionMasks& masks = {});
Value encoder_layer(Graph& g, const nn::TransformerEncoderLayer& layer, const Value& src,
                    const AttentionMasks& masks = {});
// `self` masks the target's self-attention, `cross` the memory (attn_mask = memory_mask).
Value decoder_layer(Graph& g, const nn::TransformerDecoderLayer& layer, const Value& tgt, const Value& memory,
                    const AttentionMasks& self = {}, const AttentionMasks& cross = {});
Value transformer_encoder(Graph& g, const nn::TransformerEncoder& encoder, const Value& src,
                          const AttentionMasks& masks = {});
Value transformer_decoder(Graph& g, const nn::TransformerDecoder& decoder, const Value& tgt, const Value& memory,
                          const AttentionMasks& self = {}, const AttentionMasks& cross = {});
// src_masks for the encoder, tgt_masks for the decoder's self-attention, memory_masks for its
// cross-attention: Transformer::forward's arguments grouped.
Value transformer(Graph& g, const nn::Transformer& model, const Value& src, const Value& tgt,
                  const AttentionMasks& src_masks = {}, const AttentionMasks& tgt_masks = {},
                  const AttentionMasks& memory_masks = {});
// The modern decoder (nn/decoder.h): causal, rotary, grouped key/value heads, SwiGLU, RMSNorm.
Value decoder_block(Graph& g, const nn::DecoderBlock& block, const Value& x, const Value& key_padding_mask = {});
Value decoder(Graph& g, const nn::Decoder& model, const Value& tokens, const Value& key_padding_mask = {});

}  // namespace cppgrad::onnx
