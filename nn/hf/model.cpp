#include "nn/hf/model.h"

#include <cmath>

#include "cppgrad.h"

using namespace cppgrad;

namespace cppgrad::hf {

std::string arch_name(Arch arch) { return arch == Arch::GPT2 ? "gpt2" : "llama"; }

void check_in_range(const std::string& where, const std::string& name, double value, const ConstantRange& range) {
  CPPGRAD_CHECK(value >= range.min && value <= range.max, "{}: {} is {}, not in [{}, {}]", where, name, value, range.min,
                range.max);  // NaN fails both comparisons
}

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void initialise(LanguageModel& model) {
  const double std = 0.02;
  const double residual_std = std / std::sqrt(2.0 * static_cast<double>(model.config.layers));
  for (auto& [name, p] : model.named_parameters()) {
    if (ends_with(name, "bias") || ends_with(name, "in_proj_bias")) {
      nn::init::zeros_(p);
    } else if (p.dim() >= 2) {
      const bool writes_residual = ends_with(name, "self_attn.out_proj.weight") || ends_with(name, "linear2.weight");
      nn::init::normal_(p, 0.0, model.config.arch == Arch::GPT2 && writes_residual ? residual_std : std);
    }  // the norms' gains stay 1
  }
}

}  // namespace

std::shared_ptr<LanguageModel> make_model(const ModelConfig& config) {
  std::shared_ptr<LanguageModel> model;
  if (config.arch == Arch::GPT2)
    model = std::make_shared<GPT2>(config);
  else
    model = std::make_shared<Llama>(config);
  initialise(*model);
  return model;
}

GPT2::GPT2(const ModelConfig& c) : LanguageModel(c) {
  CPPGRAD_CHECK(c.kv_heads == 0 || c.kv_heads == c.heads, "GPT2: kv_heads {}: gpt2 has one key/value head per query "
                "head ({} here); grouped-query attention is llama's (Arch::Llama)", c.kv_heads, c.heads);
  CPPGRAD_CHECK(c.head_dim == 0 || c.head_dim * c.heads == c.d_model, "GPT2: heads of {} features on d_model {} and {} "
                "heads: GPT-2's heads share d_model out (head_dim is llama's)", c.head_dim, c.d_model, c.heads);
  wte = register_module("wte", std::make_shared<nn::Embedding>(c.vocab, c.d_model));
  wpe = register_module("wpe", std::make_shared<nn::Embedding>(c.seq_len, c.d_model));
  drop = register_module("drop", std::make_shared<nn::Dropout>(c.dropout));
  // GPT-2's block is the pre-norm Transformer layer with GELU (tanh form, as GPT-2's code has it).
  const auto layer = nn::TransformerLayerOptions(c.d_model, c.heads)
                         .dim_feedforward(c.ff)
                         .dropout(c.dropout)
                         .activation(nn::Activation::GELUTanh)
                         .layer_norm_eps(c.norm_eps)
                         .norm_first(true);
  blocks = register_module("blocks", std::make_shared<nn::TransformerEncoder>(layer, c.layers, /*final_norm=*/true));
  lm_head = register_module("lm_head", std::make_shared<nn::Linear>(c.d_model, c.vocab, /*bias=*/false));
  // Tied (Press & Wolf 2017), PyTorch's way: the head's member now names the embedding's tensor,
  // one parameter (listed and saved once, under "wte.weight") whose gradient sums both uses.
  lm_head->weight = wte->weight;
}

Tensor GPT2::embed(const Tensor& tokens, const Tensor& positions) {
  const int64_t last = positions.numel() > 0 ? positions.max().item<int64_t>() : 0;
  CPPGRAD_CHECK(last < config.seq_len, "GPT2: position {} beyond the {} the model has learnt", last, config.seq_len);
  return drop->forward(wte->forward(tokens) + wpe->forward(positions));  // (B, T, d) + (T, d) or (B, T, d)
}

Tensor GPT2::forward(const Tensor& tokens) {
  Tensor positions = arange(0.0, static_cast<double>(tokens.size(1)), 1.0, TensorOptions(kInt64));  // (T)
  return lm_head->forward(blocks->forward(embed(tokens, positions), {}, {}, /*is_causal=*/true));  // (B, T, vocab)
}

Tensor GPT2::forward_step(const Tensor& tokens, std::vector<nn::KVCache>& caches, const Tensor& key_padding_mask) {
  if (caches.empty()) caches.resize(static_cast<size_t>(config.layers));
  CPPGRAD_CHECK(tokens.dim() == 2 && (!key_padding_mask.defined() || key_padding_mask.shape() == tokens.shape()),
                "GPT2::forward_step: key_padding_mask {} must be (B, T_new) as tokens {}",
                shape_str(key_padding_mask.shape()), shape_str(tokens.shape()));
  // Every layer's cache holds the same positions; the first one's say where each sequence stands.
  const nn::KVCache& first = caches.front();
  const int64_t start = first.length(), T = tokens.size(1);
  Tensor positions = first.padded(key_padding_mask) ? first.positions(tokens.size(0), T, key_padding_mask)  // (B, T)
                                                    : arange(static_cast<double>(start), static_cast<double>(start + T), 1.0, kInt64);
  return lm_head->forward(blocks->forward_step(embed(tokens, positions), caches, key_padding_mask));
}

Llama::Llama(const ModelConfig& c) : LanguageModel(c) {
  decoder = register_module("decoder", std::make_shared<nn::Decoder>(nn::DecoderOptions(c.vocab, c.d_model, c.layers, c.heads)
                                                                         .num_kv_heads(c.kv_heads)
                                                                         .head_dim(c.head_dim)
                                                                         .hidden_dim(c.ff)
                                                                         .norm_eps(c.norm_eps)
                                                                         .rope_base(c.rope_theta)
                                                                         .dropout(c.dropout)));
}

Tensor Llama::forward(const Tensor& tokens) {
  if (!checkpoint_layers_) return decoder->forward(tokens);
  // nn::Decoder::forward, each block under autograd::checkpoint.
  Tensor h = decoder->tok_embeddings->forward(tokens);  // (B, T) -> (B, T, d)
  for (const auto& block : *decoder->layers)
    h = autograd::checkpoint([&block](const std::vector<Tensor>& in) { return block->forward(in[0]); }, {h});
  return decoder->output->forward(decoder->norm->forward(h));  // (B, T, d) -> (B, T, vocab)
}

Tensor Llama::forward_step(const Tensor& tokens, std::vector<nn::KVCache>& caches, const Tensor& key_padding_mask) {
  if (caches.empty()) caches.resize(static_cast<size_t>(config.layers));
  return decoder->forward_step(tokens, caches, key_padding_mask);
}

}  // namespace cppgrad::hf
