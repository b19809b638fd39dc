// The layers' exporters (modules.h), each next to the forward it mirrors, in ONNX opset 17 ops.
#include "nn/onnx/modules.h"

#include <cmath>
#include <limits>

namespace cppgrad::onnx {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

Value ones_like_shape(Graph& g, const Shape& shape, DType dtype) { return g.constant(ones(shape, dtype)); }

// A bool mask becomes 0 / -inf in `dtype`; a float mask is added as it is (nn/attention.cpp's additive).
Value additive(Graph& g, const Value& mask, DType dtype) {
  if (mask.dtype == kBool) return g.where(mask, g.scalar(kNegInf, dtype), g.scalar(0.0, dtype));
  return g.cast(mask, dtype);
}

// (B, L, heads·d) -> (B, heads, L, d)
Value split_heads(Graph& g, const Value& x, int64_t heads, int64_t head_dim) {
  return g.transpose(g.reshape(x, {0, 0, heads, head_dim}), {0, 2, 1, 3});
}

// x · Wᵀ + b
Value affine(Graph& g, const Value& x, const Value& weight, const Value& bias) {
  Value y = g.matmul(x, g.transpose(weight, {1, 0}));
  return bias.defined() ? g.add(y, bias) : y;
}

// Key/value head j serves query heads j·r ... j·r + r − 1: (B, G, S, d) -> (B, G·r, S, d), as
// repeat_interleave on the head dim (what enable_gqa means).
Value repeat_kv_heads(Graph& g, const Value& x, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  if (heads == kv_heads) return x;
  Value expanded = g.op("Expand", {g.unsqueeze(x, {2}), g.ints({1, 1, heads / kv_heads, 1, 1})}, {}, std::nullopt, 5);  // (B, G, r, S, d)
  return g.reshape(expanded, {0, heads, -1, head_dim});  // (B, G·r, S, d)
}

// The causal mask (T, S) of a query length T and a key length S: -inf where key j > query i, else 0.
Value causal_mask(Graph& g, const Value& q, const Value& k, DType dtype) {
  Value shape = g.concat({g.size(q, 2), g.size(k, 2)}, 0);  // [T, S]
  Value fill = g.op("ConstantOfShape", {shape}, {{"value", full({1}, kNegInf, dtype)}}, dtype, 2);
  return g.op("Trilu", {fill, g.ints({1})}, {{"upper", int64_t{1}}}, std::nullopt, 2);  // keeps j ≥ i + 1
}

}  // namespace

// ---- the basic layers ---------------------------------------------------------------------------

Value linear(Graph& g, const nn::Linear& layer, const Value& x) {
  auto scope = g.scope(layer);
  return affine(g, x, g.parameter(layer.weight), layer.bias.defined() ? g.parameter(layer.bias) : Value());
}

Value embedding(Graph& g, const nn::Embedding& layer, const Value& indices) {
  auto scope = g.scope(layer);
  CPPGRAD_CHECK(indices.dtype == kInt64, "onnx export: Embedding '{}': indices must be int64, got {}",
                g.module_name(layer), dtype_name(indices.dtype));
  // Row i of the table for index i: padding_idx only matters to training (its row gets no gradient).
  return g.op("Gather", {g.parameter(layer.weight), indices}, {{"axis", int64_t{0}}}, layer.weight.dtype(),
              indices.rank < 0 ? -1 : indices.rank + 1);
}

Value layer_norm(Graph& g, const nn::LayerNorm& layer, const Value& x) {
  auto scope = g.scope(layer);
  const auto k = static_cast<int64_t>(layer.normalized_shape.size());
  // ONNX's LayerNormalization needs a scale: ones when the layer has no affine parameters.
  Value scale = layer.weight.defined() ? g.parameter(layer.weight) : ones_like_shape(g, layer.normalized_shape, x.dtype);
  std::vector<Value> inputs = {x, scale};
  if (layer.bias.defined()) inputs.push_back(g.parameter(layer.bias));
  return g.op("LayerNormalization", inputs, {{"axis", -k}, {"epsilon", layer.eps}}, std::nullopt, x.rank);
}

Value rms_norm(Graph& g, const nn::RMSNorm& layer, const Value& x) {
  auto scope = g.scope(layer);
  const auto k = static_cast<int64_t>(layer.normalized_shape.size());
  std::vector<int64_t> axes;
  for (int64_t i = -k; i < 0; ++i) axes.push_back(i);
  // eps unset: the machine epsilon of x's dtype, as nn::functional::rms_norm
  const double eps = layer.eps.value_or(x.dtype == kFloat64 ? std::numeric_limits<double>::epsilon()
                                                            : std::numeric_limits<float>::epsilon());
  // y = x / √(mean(x²) + eps) ⊙ weight
  Value mean_square = g.op("ReduceMean", {g.mul(x, x)}, {{"axes", axes}, {"keepdims", int64_t{1}}}, std::nullopt, x.rank);
  Value y = g.div(x, g.unary("Sqrt", g.add(mean_square, g.scalar(eps, x.dtype))));
  return layer.weight.defined() ? g.mul(y, g.parameter(layer.weight)) : y;
}

Value relu(Graph& g, const Value& x) { return g.unary("Relu", x); }
Value tanh(Graph& g, const Value& x) { return g.unary("Tanh", x); }
Value sigmoid(Graph& g, const Value& x) { return g.unary("Sigmoid", x); }
Value silu(Graph& g, const Value& x) { return g.mul(x, g.unary("Sigmoid", x)); }  // x·σ(x)

Value gelu(Graph& g, const Value& x, const std::string& approximate) {
  const DType t = x.dtype;
  Value half_x = g.mul(x, g.scalar(0.5, t));
  if (approximate == "none") {  // x·Φ(x) = 0.5·x·(1 + erf(x/√2)); opset 17 has no Gelu op
    Value erf = g.unary("Erf", g.mul(x, g.scalar(1.0 / std::sqrt(2.0), t)));
    return g.mul(half_x, g.add(erf, g.scalar(1.0, t)));
  }
  CPPGRAD_CHECK(approximate == "tanh", "onnx export: gelu: approximate '{}' is neither 'none' nor 'tanh'", approximate);
  // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
  Value cube = g.mul(g.mul(x, x), x);
  Value inner = g.mul(g.add(x, g.mul(cube, g.scalar(0.044715, t))), g.scalar(std::sqrt(2.0 / M_PI), t));
  return g.mul(half_x, g.add(g.unary("Tanh", inner), g.scalar(1.0, t)));
}

Value activation(Graph& g, nn::Activation which, const Value& x) {
  switch (which) {
    case nn::Activation::ReLU: return relu(g, x);
    case nn::Activation::GELU: return gelu(g, x, "none");
    case nn::Activation::GELUTanh: return gelu(g, x, "tanh");
  }
  throw Error("onnx export: unknown activation");
}

Value swiglu(Graph& g, const nn::SwiGLU& layer, const Value& x) {
  auto scope = g.scope(layer);
  // W2 · (SiLU(W1·x) ⊙ W3·x)
  return linear(g, *layer.w2, g.mul(silu(g, linear(g, *layer.w1, x)), linear(g, *layer.w3, x)));
}

Value sequential(Graph& g, const nn::Sequential& layers, const Value& x) {
  auto scope = g.scope(layers);
  Value y = x;
  for (const auto& child : layers.children()) y = child->export_onnx(g, {y}).at(0);
  return y;
}

Value positional_encoding(Graph& g, const nn::PositionalEncoding& layer, const Value& x) {
  auto scope = g.scope(layer);
  // x (B, T, E) + pe[0:T]: T read from x, so any length up to max_len works.
  Value rows = g.slice(g.parameter(layer.pe), 0, 0, g.size(x, 1));  // (T, E)
  return g.add(x, g.cast(rows, x.dtype));
}

Value rotary(Graph& g, const Value& x, int64_t dim, double base, nn::RotaryLayout layout) {
  // θ_i = base^(−2i/d) and positions m = 0 .. T−1, in float64 as nn::functional::rotary_angles
  Tensor theta = (arange(static_cast<double>(dim / 2), kFloat64) * (-2.0 * std::log(base) / static_cast<double>(dim)))
                     .exp()
                     .reshape({1, dim / 2});
  Value length = g.reshape(g.size(x, -2), {});  // T, a scalar
  Value positions = g.op("Range", {g.scalar(0.0, kFloat64), g.cast(length, kFloat64), g.scalar(1.0, kFloat64)},
                         {}, kFloat64, 1);
  Value angles = g.mul(g.unsqueeze(positions, {1}), g.constant(theta));  // (T, 1) · (1, d/2) -> (T, d/2)
  Value cos = g.cast(g.unary("Cos", angles), x.dtype), sin = g.cast(g.unary("Sin", angles), x.dtype);
  if (layout == nn::RotaryLayout::Halves) {
    std::vector<Value> halves = g.op_outputs("Split", {x, g.ints({dim / 2, dim / 2})}, 2, {{"axis", int64_t{-1}}}, x.rank);
    const Value &a = halves[0], &b = halves[1];  // (..., T, d/2) each
    return g.concat({g.sub(g.mul(a, cos), g.mul(b, sin)), g.add(g.mul(a, sin), g.mul(b, cos))}, -1);
  }
  // Interleaved: pairs (x_2i, x_2i+1): (B, H, T, d) -> (B, H, T, d/2, 2)
  CPPGRAD_CHECK(x.rank == 4, "onnx export: interleaved rotary positions are exported for (B, H, T, d) only");
  Value pairs = g.reshape(x, {0, 0, 0, dim / 2, 2});
  std::vector<Value> parts = g.op_outputs("Split", {pairs, g.ints({1, 1})}, 2, {{"axis", int64_t{-1}}}, 5);
  Value cos5 = g.unsqueeze(cos, {-1}), sin5 = g.unsqueeze(sin, {-1});  // (T, d/2, 1)
  const Value &a = parts[0], &b = parts[1];
  Value turned = g.concat({g.sub(g.mul(a, cos5), g.mul(b, sin5)), g.add(g.mul(a, sin5), g.mul(b, cos5))}, -1);
  return g.reshape(turned, {0, 0, 0, dim});
}

// ---- attention ----------------------------------------------------------------------------------

Value multihead_attention(Graph& g, const nn::MultiheadAttention& layer, const Value& query, const Value& key,
                          const Value& value, const AttentionMasks& masks) {
  auto scope = g.scope(layer);
  const auto& o = layer.options;
  const std::string name = g.module_name(layer);
  CPPGRAD_CHECK(!o.window(), "onnx export: MultiheadAttention '{}': a sliding window (window={}) is not exported",
                name, o.window().value_or(0));
  CPPGRAD_CHECK(!o.alibi(), "onnx export: MultiheadAttention '{}': ALiBi is not exported", name);
  CPPGRAD_CHECK(query.rank == 3 && key.rank == 3 && value.rank == 3,
                "onnx export: MultiheadAttention '{}': query, key and value must be batched (rank 3), got ranks {}, {}, {}",
                name, query.rank, key.rank, value.rank);
  const int64_t E = o.embed_dim(), H = o.num_heads(), G = o.num_kv_heads(), d = layer.head_dim;
  const DType t = query.dtype;
  // Sequence first (T, B, E) -> (B, T, E), as the layer does.
  auto batch_first = [&](const Value& x) { return o.batch_first() ? x : g.transpose(x, {1, 0, 2}); };
  Value q_in = batch_first(query), k_in = batch_first(key), v_in = batch_first(value);

  // The projections' weights: row blocks of the fused (3E, E) matrix, or three of their own.
  Value w_q, w_k, w_v, b_q, b_k, b_v;
  if (layer.in_proj_weight.defined()) {
    auto w = g.op_outputs("Split", {g.parameter(layer.in_proj_weight), g.ints({E, E, E})}, 3, {{"axis", int64_t{0}}}, 2);
    w_q = w[0], w_k = w[1], w_v = w[2];
  } else {
    w_q = g.parameter(layer.q_proj_weight), w_k = g.parameter(layer.k_proj_weight), w_v = g.parameter(layer.v_proj_weight);
  }
  if (layer.in_proj_bias.defined()) {
    auto b = g.op_outputs("Split", {g.parameter(layer.in_proj_bias), g.ints({H * d, G * d, G * d})}, 3, {{"axis", int64_t{0}}}, 1);
    b_q = b[0], b_k = b[1], b_v = b[2];
  }
  Value q = split_heads(g, affine(g, q_in, w_q, b_q), H, d);  // (B, T, H·d) -> (B, H, T, d)
  Value k = split_heads(g, affine(g, k_in, w_k, b_k), G, d);  // (B, S, G·d) -> (B, G, S, d)
  Value v = split_heads(g, affine(g, v_in, w_v, b_v), G, d);
  if (o.rotary()) {
    q = rotary(g, q, d, o.rotary_base(), o.rotary_layout());
    k = rotary(g, k, d, o.rotary_base(), o.rotary_layout());
  }
  k = repeat_kv_heads(g, k, H, G, d);  // (B, H, S, d)
  v = repeat_kv_heads(g, v, H, G, d);

  // scores = Q·Kᵀ/√d + masks: (B, H, T, S)
  Value scores = g.mul(g.matmul(q, g.transpose(k, {0, 1, 3, 2})), g.scalar(1.0 / std::sqrt(static_cast<double>(d)), t));
  bool may_hide_a_row = false;  // a row whose every key is masked (causal alone never does that)
  if (masks.key_padding_mask.defined()) {
    scores = g.add(scores, g.unsqueeze(additive(g, masks.key_padding_mask, t), {1, 2}));  // (B, S) -> (B, 1, 1, S)
    may_hide_a_row = true;
  }
  if (masks.attn_mask.defined()) {
    Value m = additive(g, masks.attn_mask, t);
    if (masks.attn_mask.rank == 3) {  // (B·H, T, S) -> (B, H, T, S)
      m = g.op("Reshape", {m, g.concat({g.ints({-1, H}), g.op("Shape", {m}, {{"start", int64_t{1}}}, kInt64, 1)}, 0)},
               {}, std::nullopt, 4);
    }
    scores = g.add(scores, m);
    may_hide_a_row = true;
  }
  if (masks.is_causal) scores = g.add(scores, causal_mask(g, q, k, t));
  Value weights = g.softmax(scores, -1);
  if (may_hide_a_row) {
    // softmax of a row of -inf is NaN; cppgrad's attention gives such a query zero output.
    Value row_max = g.op("ReduceMax", {scores}, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}});
    Value hidden = g.op("IsInf", {row_max}, {{"detect_positive", int64_t{0}}}, kBool, 4);
    weights = g.where(hidden, g.scalar(0.0, t), weights);
  }
  Value heads = g.matmul(weights, v);                                   // (B, H, T, d)
  Value merged = g.reshape(g.transpose(heads, {0, 2, 1, 3}), {0, 0, H * d});  // (B, T, H·d); out_proj maps it to E
  Value out = linear(g, *layer.out_proj, merged);
  return o.batch_first() ? out : g.transpose(out, {1, 0, 2});
}

// ---- the Transformer ----------------------------------------------------------------------------

Value encoder_layer(Graph& g, const nn::TransformerEncoderLayer& layer, const Value& src, const AttentionMasks& masks) {
  auto scope = g.scope(layer);
  const bool batch_first = layer.options.batch_first();
  Value x = batch_first ? src : g.transpose(src, {1, 0, 2});
  auto self_attention = [&](const Value& h) { return multihead_attention(g, *layer.self_attn, h, h, h, masks); };
  auto feed_forward = [&](const Value& h) {
    return linear(g, *layer.linear2, activation(g, layer.options.activation(), linear(g, *layer.linear1, h)));
  };
  if (layer.options.norm_first()) {
    x = g.add(x, self_attention(layer_norm(g, *layer.norm1, x)));
    x = g.add(x, feed_forward(layer_norm(g, *layer.norm2, x)));
  } else {
    x = layer_norm(g, *layer.norm1, g.add(x, self_attention(x)));
    x = layer_norm(g, *layer.norm2, g.add(x, feed_forward(x)));
  }
  return batch_first ? x : g.transpose(x, {1, 0, 2});
}

Value decoder_layer(Graph& g, const nn::TransformerDecoderLayer& layer, const Value& tgt, const Value& memory,
                    const AttentionMasks& self, const AttentionMasks& cross) {
  auto scope = g.scope(layer);
  const bool batch_first = layer.options.batch_first();
  Value x = batch_first ? tgt : g.transpose(tgt, {1, 0, 2});
  Value mem = batch_first ? memory : g.transpose(memory, {1, 0, 2});
  auto self_attention = [&](const Value& h) { return multihead_attention(g, *layer.self_attn, h, h, h, self); };
  AttentionMasks cross_masks = cross;
  cross_masks.is_causal = false;  // the layer never masks the memory causally
  auto cross_attention = [&](const Value& h) {
    return multihead_attention(g, *layer.multihead_attn, h, mem, mem, cross_masks);
  };
  auto feed_forward = [&](const Value& h) {
    return linear(g, *layer.linear2, activation(g, layer.options.activation(), linear(g, *layer.linear1, h)));
  };
  if (layer.options.norm_first()) {
    x = g.add(x, self_attention(layer_norm(g, *layer.norm1, x)));
    x = g.add(x, cross_attention(layer_norm(g, *layer.norm2, x)));
    x = g.add(x, feed_forward(layer_norm(g, *layer.norm3, x)));
  } else {
    x = layer_norm(g, *layer.norm1, g.add(x, self_attention(x)));
    x = layer_norm(g, *layer.norm2, g.add(x, cross_attention(x)));
    x = layer_norm(g, *layer.norm3, g.add(x, feed_forward(x)));
  }
  return batch_first ? x : g.transpose(x, {1, 0, 2});
}

Value transformer_encoder(Graph& g, const nn::TransformerEncoder& encoder, const Value& src, const AttentionMasks& masks) {
  auto scope = g.scope(encoder);
  Value x = src;
  for (const auto& layer : *encoder.layers) x = encoder_layer(g, *layer, x, masks);
  return encoder.norm ? layer_norm(g, *encoder.norm, x) : x;
}

Value transformer_decoder(Graph& g, const nn::TransformerDecoder& decoder, const Value& tgt, const Value& memory,
                          const AttentionMasks& self, const AttentionMasks& cross) {
  auto scope = g.scope(decoder);
  Value x = tgt;
  for (const auto& layer : *decoder.layers) x = decoder_layer(g, *layer, x, memory, self, cross);
  return decoder.norm ? layer_norm(g, *decoder.norm, x) : x;
}

Value transformer(Graph& g, const nn::Transformer& model, const Value& src, const Value& tgt,
                  const AttentionMasks& src_masks, const AttentionMasks& tgt_masks, const AttentionMasks& memory_masks) {
  auto scope = g.scope(model);
  Value memory = transformer_encoder(g, *model.encoder, src, src_masks);
  return transformer_decoder(g, *model.decoder, tgt, memory, tgt_masks, memory_masks);
}

Value decoder_block(Graph& g, const nn::DecoderBlock& block, const Value& x, const Value& key_padding_mask) {
  auto scope = g.scope(block);
  Value normed = rms_norm(g, *block.attention_norm, x);
  AttentionMasks causal;  // (assigned, not designated: GCC 12 warns of the defaulted member otherwise)
  causal.key_padding_mask = key_padding_mask;
  causal.is_causal = true;
  Value h = g.add(x, multihead_attention(g, *block.attention, normed, normed, normed, causal));  // x + Attention(RMSNorm(x))
  return g.add(h, swiglu(g, *block.feed_forward, rms_norm(g, *block.ffn_norm, h)));             // h + SwiGLU(RMSNorm(h))
}

Value decoder(Graph& g, const nn::Decoder& model, const Value& tokens, const Value& key_padding_mask) {
  auto scope = g.scope(model);
  Value h = embedding(g, *model.tok_embeddings, tokens);  // (B, T) -> (B, T, d_model)
  for (const auto& block : *model.layers) h = decoder_block(g, *block, h, key_padding_mask);
  Value normed = rms_norm(g, *model.norm, h);
  if (model.output) return linear(g, *model.output, normed);
  return affine(g, normed, g.parameter(model.tok_embeddings->weight), {});  // tied: the embedding table
}

}  // namespace cppgrad::onnx
