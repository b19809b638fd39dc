#include "nn/transformer.h"

#include <cmath>

#include "autograd/checkpoint.h"
#include "nn/init.h"
#include "runtime/allocator.h"

namespace cppgrad::nn {

namespace {
// The feed-forward block's activation, then its dropout (after ReLU, as one op: relu_forward).
Tensor activate_and_drop(Activation a, const Tensor& x, Dropout& dropout) {
  switch (a) {
    case Activation::ReLU: return dropout.relu_forward(x);  // = dropout.forward(x.relu())
    case Activation::GELU: return dropout.forward(x.gelu());
    case Activation::GELUTanh: return dropout.forward(x.gelu("tanh"));
  }
  throw Error("TransformerLayer: unknown activation");
}

void check_layer_options(const TransformerLayerOptions& o, std::string_view who) {
  CPPGRAD_CHECK(o.d_model() > 0 && o.nhead() > 0 && o.dim_feedforward() > 0,
        "{}: d_model {}, nhead {} and dim_feedforward {} must be positive", who, o.d_model(), o.nhead(),
        o.dim_feedforward());
}
}  // namespace

// ---- encoder layer ----------------------------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerOptions& o) : options(o) {
  check_layer_options(o, "TransformerEncoderLayer");
  self_attn = register_module(
      "self_attn", std::make_shared<MultiheadAttention>(MultiheadAttentionOptions(o.d_model(), o.nhead()).dropout(o.dropout())));
  linear1 = register_module("linear1", std::make_shared<Linear>(o.d_model(), o.dim_feedforward()));
  dropout = register_module("dropout", std::make_shared<Dropout>(o.dropout()));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward(), o.d_model()));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(Shape{o.d_model()}, o.layer_norm_eps()));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(Shape{o.d_model()}, o.layer_norm_eps()));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout()));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout()));
}

Tensor TransformerEncoderLayer::self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& padding,
                                                     bool is_causal, KVCache* cache) {
  if (cache) return dropout1->forward(self_attn->forward_step(x, *cache, padding));
  AttentionOutput attended = self_attn->forward(
      x, x, x, {.key_padding_mask = padding, .need_weights = false, .attn_mask = mask, .is_causal = is_causal});
  return dropout1->forward(attended.output);
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  // (B, S, d_model) -> (B, S, dim_feedforward) -> (B, S, d_model)
  return dropout2->forward(linear2->forward(activate_and_drop(options.activation(), linear1->forward(x), *dropout)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                        bool is_causal) {
  return run(src, src_mask, src_key_padding_mask, is_causal, nullptr);
}

Tensor TransformerEncoderLayer::forward_step(const Tensor& x, KVCache& cache, const Tensor& key_padding_mask) {
  return run(x, {}, key_padding_mask, true, &cache);
}

Tensor TransformerEncoderLayer::run(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                    bool is_causal, KVCache* cache) {
  // The body works batch first; a sequence-first layer swaps the two dims on the way in and out.
  Tensor x = swap_batch_and_sequence(src, options.batch_first());
  if (options.norm_first()) {
    x = x + self_attention_block(norm1->forward(x), src_mask, src_key_padding_mask, is_causal, cache);
    x = x + feed_forward_block(norm2->forward(x));
  } else {
    x = norm1->forward(x + self_attention_block(x, src_mask, src_key_padding_mask, is_causal, cache));
    x = norm2->forward(x + feed_forward_block(x));
  }
  return swap_batch_and_sequence(x, options.batch_first());
}

// ---- decoder layer ----------------------------------------------------------------------------

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerOptions& o) : options(o) {
  check_layer_options(o, "TransformerDecoderLayer");
  auto attention = MultiheadAttentionOptions(o.d_model(), o.nhead()).dropout(o.dropout());
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(attention));
  multihead_attn = register_module("multihead_attn", std::make_shared<MultiheadAttention>(attention));
  linear1 = register_module("linear1", std::make_shared<Linear>(o.d_model(), o.dim_feedforward()));
  dropout = register_module("dropout", std::make_shared<Dropout>(o.dropout()));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward(), o.d_model()));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(Shape{o.d_model()}, o.layer_norm_eps()));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(Shape{o.d_model()}, o.layer_norm_eps()));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(Shape{o.d_model()}, o.layer_norm_eps()));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout()));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout()));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(o.dropout()));
}

Tensor TransformerDecoderLayer::self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& padding,
                                                     bool is_causal, KVCache* cache) {
  if (cache) return dropout1->forward(self_attn->forward_step(x, *cache));
  AttentionOutput attended = self_attn->forward(
      x, x, x, {.key_padding_mask = padding, .need_weights = false, .attn_mask = mask, .is_causal = is_causal});
  return dropout1->forward(attended.output);
}

Tensor TransformerDecoderLayer::cross_attention_block(const Tensor& x, const Tensor& memory, const Tensor& mask,
                                                      const Tensor& padding, KVCache* cache) {
  // queries from the decoder, keys and values from the encoder's output (projected once when cached)
  if (cache) return dropout2->forward(multihead_attn->forward_step(x, memory, *cache, padding));
  AttentionOutput attended = multihead_attn->forward(
      x, memory, memory, {.key_padding_mask = padding, .need_weights = false, .attn_mask = mask});
  return dropout2->forward(attended.output);
}

Tensor TransformerDecoderLayer::feed_forward_block(const Tensor& x) {
  return dropout3->forward(linear2->forward(activate_and_drop(options.activation(), linear1->forward(x), *dropout)));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask, bool tgt_is_causal) {
  return run(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal, nullptr);
}

Tensor TransformerDecoderLayer::forward_step(const Tensor& x, const Tensor& memory, DecoderLayerCache& cache,
                                             const Tensor& memory_key_padding_mask) {
  return run(x, memory, {}, {}, {}, memory_key_padding_mask, true, &cache);
}

Tensor TransformerDecoderLayer::run(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                    const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                    const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                    DecoderLayerCache* cache) {
  KVCache* self_cache = cache ? &cache->self_attn : nullptr;
  KVCache* cross_cache = cache ? &cache->cross_attn : nullptr;
  Tensor x = swap_batch_and_sequence(tgt, options.batch_first());
  const Tensor memory_bf = swap_batch_and_sequence(memory, options.batch_first());
  if (options.norm_first()) {
    x = x + self_attention_block(norm1->forward(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal, self_cache);
    x = x + cross_attention_block(norm2->forward(x), memory_bf, memory_mask, memory_key_padding_mask, cross_cache);
    x = x + feed_forward_block(norm3->forward(x));
  } else {
    x = norm1->forward(x + self_attention_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal, self_cache));
    x = norm2->forward(x + cross_attention_block(x, memory_bf, memory_mask, memory_key_padding_mask, cross_cache));
    x = norm3->forward(x + feed_forward_block(x));
  }
  return swap_batch_and_sequence(x, options.batch_first());
}

// ---- stacks -----------------------------------------------------------------------------------

namespace {
// num_layers copies of the first layer's parameters must fit in memory: a count like 2^40 would
// otherwise build layers for hours, until the machine ran out, instead of being refused.
void check_layers_fit(const char* op, const Module& first, int64_t num_layers) {
  double bytes = 0;
  for (const Tensor& p : first.parameters()) bytes += static_cast<double>(p.numel() * dtype_size(p.dtype()));
  CPPGRAD_CHECK(bytes * static_cast<double>(num_layers) <= machine_memory_bytes(),
                "{}: {} layers of {:.3g} MB of parameters need {:.3g} GB, more than this machine's {:.3g} GB of memory",
                op, num_layers, bytes / 1e6, bytes * static_cast<double>(num_layers) / 1e9, machine_memory_bytes() / 1e9);
}
}  // namespace

TransformerEncoder::TransformerEncoder(const TransformerLayerOptions& o, int64_t num_layers, bool final_norm) {
  CPPGRAD_CHECK(num_layers >= 0, "TransformerEncoder: negative num_layers {}", num_layers);
  layers = register_module("layers", std::make_shared<ModuleList<TransformerEncoderLayer>>());
  for (int64_t i = 0; i < num_layers; ++i) {
    layers->push_back(std::make_shared<TransformerEncoderLayer>(o));
    if (i == 0) check_layers_fit("TransformerEncoder", *(*layers)[0], num_layers);
  }
  if (final_norm) norm = register_module("norm", std::make_shared<LayerNorm>(Shape{o.d_model()}, o.layer_norm_eps()));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                   bool is_causal) {
  Tensor x = src;
  for (const auto& layer : *layers) {
    if (!checkpoint_layers_) {
      x = layer->forward(x, mask, src_key_padding_mask, is_causal);
      continue;
    }
    // The layer is captured by value: the backward replays it after this loop has ended.
    auto replay = [layer, is_causal](const std::vector<Tensor>& in) { return layer->forward(in[0], in[1], in[2], is_causal); };
    x = autograd::checkpoint(replay, {x, mask, src_key_padding_mask});
  }
  return norm ? norm->forward(x) : x;
}

Tensor TransformerEncoder::forward_step(const Tensor& x, std::vector<KVCache>& cache, const Tensor& key_padding_mask) {
  if (cache.empty()) cache.resize(layers->size());
  CPPGRAD_CHECK(cache.size() == layers->size(), "TransformerEncoder::forward_step: {} caches for {} layers",
                cache.size(), layers->size());
  Tensor h = x;
  for (size_t i = 0; i < cache.size(); ++i) h = (*layers)[i]->forward_step(h, cache[i], key_padding_mask);
  return norm ? norm->forward(h) : h;
}

TransformerDecoder::TransformerDecoder(const TransformerLayerOptions& o, int64_t num_layers, bool final_norm) {
  CPPGRAD_CHECK(num_layers >= 0, "TransformerDecoder: negative num_layers {}", num_layers);
  layers = register_module("layers", std::make_shared<ModuleList<TransformerDecoderLayer>>());
  for (int64_t i = 0; i < num_layers; ++i) {
    layers->push_back(std::make_shared<TransformerDecoderLayer>(o));
    if (i == 0) check_layers_fit("TransformerDecoder", *(*layers)[0], num_layers);
  }
  if (final_norm) norm = register_module("norm", std::make_shared<LayerNorm>(Shape{o.d_model()}, o.layer_norm_eps()));
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask, bool tgt_is_causal) {
  Tensor x = tgt;
  for (const auto& layer : *layers) {
    if (!checkpoint_layers_) {
      x = layer->forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                         tgt_is_causal);
      continue;
    }
    auto replay = [layer, tgt_is_causal](const std::vector<Tensor>& in) {
      return layer->forward(in[0], in[1], in[2], in[3], in[4], in[5], tgt_is_causal);
    };
    x = autograd::checkpoint(replay, {x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask});
  }
  return norm ? norm->forward(x) : x;
}

Tensor TransformerDecoder::forward_step(const Tensor& x, const Tensor& memory, std::vector<DecoderLayerCache>& cache,
                                        const Tensor& memory_key_padding_mask) {
  if (cache.empty()) cache.resize(layers->size());
  CPPGRAD_CHECK(cache.size() == layers->size(), "TransformerDecoder::forward_step: {} caches for {} layers",
                cache.size(), layers->size());
  Tensor h = x;
  for (size_t i = 0; i < cache.size(); ++i) h = (*layers)[i]->forward_step(h, memory, cache[i], memory_key_padding_mask);
  return norm ? norm->forward(h) : h;
}

// ---- the whole model ------------------------------------------------------------------------

TransformerLayerOptions TransformerOptions::layer_options() const {
  return TransformerLayerOptions(d_model(), nhead()).dim_feedforward(dim_feedforward()).dropout(dropout())
      .activation(activation()).layer_norm_eps(layer_norm_eps()).norm_first(norm_first()).batch_first(batch_first());
}

Transformer::Transformer(const TransformerOptions& o) : options(o) {
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(o.layer_options(), o.num_encoder_layers()));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(o.layer_options(), o.num_decoder_layers()));
  for (const Tensor& p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                            const Tensor& memory_mask, const Tensor& src_key_padding_mask,
                            const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask,
                            bool src_is_causal, bool tgt_is_causal) {
  // Batched (B, S, E) and (B, T, E) (or (S, B, E) and (T, B, E) sequence first), or unbatched
  // (S, E) and (T, E): only batched inputs share a batch dim.
  const bool same_rank = src.dim() == tgt.dim() && (src.dim() == 2 || src.dim() == 3);
  const int64_t batch_dim = options.batch_first() ? 0 : 1;
  CPPGRAD_CHECK(same_rank && (src.dim() == 2 || src.size(batch_dim) == tgt.size(batch_dim)) &&
                    src.size(-1) == options.d_model() && tgt.size(-1) == options.d_model(),
                "Transformer: src {} and tgt {} must be {}, or (S, d_model) and (T, d_model), with d_model {}",
                shape_str(src.shape()), shape_str(tgt.shape()),
                options.batch_first() ? "(B, S, d_model) and (B, T, d_model)" : "(S, B, d_model) and (T, B, d_model)",
                options.d_model());
  Tensor memory = encoder->forward(src, src_mask, src_key_padding_mask, src_is_causal);
  return decoder->forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                          tgt_is_causal);
}

// ---- positional encoding ----------------------------------------------------------------------

PositionalEncoding::PositionalEncoding(int64_t d_model, double p, int64_t max_len, bool batch_first_)
    : batch_first(batch_first_) {
  CPPGRAD_CHECK(d_model > 0 && max_len > 0, "PositionalEncoding: d_model {} and max_len {} must be positive", d_model, max_len);
  Tensor table = zeros({max_len, d_model});
  float* out = table.data<float>();
  for (int64_t pos = 0; pos < max_len; ++pos) {
    for (int64_t i = 0; 2 * i < d_model; ++i) {
      double angle = static_cast<double>(pos) / std::pow(10000.0, 2.0 * static_cast<double>(i) / d_model);
      out[pos * d_model + 2 * i] = static_cast<float>(std::sin(angle));
      if (2 * i + 1 < d_model) out[pos * d_model + 2 * i + 1] = static_cast<float>(std::cos(angle));
    }
  }
  pe = register_buffer("pe", table, /*persistent=*/false);
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
}

Tensor PositionalEncoding::forward(const Tensor& x) { return forward(x, 0); }

Tensor PositionalEncoding::forward(const Tensor& x, int64_t start) {
  const int64_t time_dim = batch_first ? 1 : 0;
  CPPGRAD_CHECK(x.dim() == 3 && x.size(2) == pe.size(1) && start >= 0 && x.size(time_dim) <= pe.size(0) - start,
                "PositionalEncoding: input {} from position {} must be {} with start + T ≤ {}", shape_str(x.shape()),
                start, batch_first ? fmt::format("(B, T, {})", pe.size(1)) : fmt::format("(T, B, {}) (batch_first false)", pe.size(1)),
                pe.size(0));
  Tensor positions = pe.narrow(0, start, x.size(time_dim)).to(x.dtype());  // (T, E)
  if (!batch_first) positions = positions.unsqueeze(1);                     // (T, 1, E)
  return dropout->forward(x + positions);  // (B, T, E) + (T, E), or (T, B, E) + (T, 1, E)
}

}  // namespace cppgrad::nn
