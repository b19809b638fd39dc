// The models Hugging Face's GPT-2 and Llama checkpoints load into (checkpoint.h): two decoder-only
// Transformers behind one interface, built from the library's modules.
//
//   gpt2   token + learned position embeddings, pre-norm blocks of LayerNorm, causal attention
//          and a GELU MLP (all with biases), a final LayerNorm, and the output scores from the
//          token embedding itself (tied: one tensor, one parameter).
//   llama  token embeddings only (rotary positions on queries and keys), pre-norm blocks of
//          RMSNorm, grouped-query attention and SwiGLU, no biases, a final RMSNorm and an
//          output projection of its own (nn::Decoder).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../decoder.h"
#include "../layers.h"
#include "../module.h"
#include "../transformer.h"

namespace cppgrad::hf {

enum class Arch { GPT2, Llama };
std::string arch_name(Arch arch);

struct ModelConfig {
  Arch arch = Arch::GPT2;
  int64_t vocab = 0;  // set from the tokenizer
  int64_t layers = 4, d_model = 128, heads = 4, kv_heads = 0, ff = 512;  // kv_heads 0: heads (llama only)
  int64_t head_dim = 0;  // llama's heads' width; 0: d_model / heads (a Hugging Face config.json's head_dim)
  int64_t seq_len = 128;  // the longest context; gpt2's learned positions have this many rows
  double dropout = 0.0;
  double norm_eps = 1e-5;        // the LayerNorms' (gpt2) or RMSNorms' (llama) epsilon
  double rope_theta = 10000.0;   // llama's rotary base θ
};

// The ranges of the constants, applied wherever one is read (a checkpoint's metadata, a Hugging
// Face config.json): a value outside is refused, never trained on. They are generous around what
// published models use (epsilons of 1e-12 to 1e-5; rotary bases of 1e4 to 1e6 or so). An epsilon
// of 0.01 or more outweighs the variance of small activations, so the norm no longer normalises;
// a base at or below 1 leaves no slowly turning pairs (each pair turns at θ^(-2i/d) radians a
// position); past 1e10 the slowest pairs barely turn, and a base of 1e-300 makes the rates
// overflow to infinity.
struct ConstantRange {
  const char* name;  // the setting's name, as the checkpoint's metadata spells it
  double min, max;
};
inline constexpr ConstantRange kNormEpsRange{"norm_eps", 1e-12, 1e-2};
inline constexpr ConstantRange kRopeThetaRange{"rope_theta", 2.0, 1e10};
// Throws cppgrad::Error "WHERE: NAME is VALUE, not in [MIN, MAX]" (NaN included) unless `value`
// lies in `range`; `name` is the setting as the source spells it ("layer_norm_epsilon").
void check_in_range(const std::string& where, const std::string& name, double value, const ConstantRange& range);

class LanguageModel : public cppgrad::nn::Module {
 public:
  // tokens (B, T) int64 -> logits (B, T, vocab): position t's scores for the token at t + 1.
  virtual cppgrad::Tensor forward(const cppgrad::Tensor& tokens) = 0;
  // The newest tokens (B, T_new) of a sequence whose earlier ones are in `caches` (one KVCache a
  // layer, empty at first) -> their logits (B, T_new, vocab): the last T_new rows of forward.
  // Prompts of different lengths go left-padded in one batch, key_padding_mask (B, T_new), bool,
  // marking the padding (true): the caches remember it, and each sequence's positions count from
  // its first real token, so its logits are those it would have alone. Later steps need no mask.
  virtual cppgrad::Tensor forward_step(const cppgrad::Tensor& tokens, std::vector<cppgrad::nn::KVCache>& caches,
                                       const cppgrad::Tensor& key_padding_mask = {}) = 0;
  // Activation checkpointing: each block's activations recomputed in backward, not kept.
  virtual void set_checkpoint_layers(bool enabled) = 0;
  int64_t layer_count() const { return config.layers; }

  explicit LanguageModel(const ModelConfig& c) : config(c) {}
  const ModelConfig config;
};

// The model of `config`, initialised as its architecture's reference code does: every weight
// matrix and embedding N(0, 0.02), biases 0, norms' gains 1; for gpt2, the projections that
// write into the residual stream (attention's output, the MLP's second layer) N(0, 0.02/√(2·layers)),
// so that the stream's variance does not grow with depth (GPT-2 paper, §2.3).
std::shared_ptr<LanguageModel> make_model(const ModelConfig& config);

class GPT2 : public LanguageModel {
 public:
  explicit GPT2(const ModelConfig& config);
  cppgrad::Tensor forward(const cppgrad::Tensor& tokens) override;
  cppgrad::Tensor forward_step(const cppgrad::Tensor& tokens, std::vector<cppgrad::nn::KVCache>& caches,
                               const cppgrad::Tensor& key_padding_mask = {}) override;
  void set_checkpoint_layers(bool enabled) override { blocks->set_checkpoint_layers(enabled); }
  std::string type_name() const override { return "GPT2"; }

  std::shared_ptr<cppgrad::nn::Embedding> wte, wpe;  // tokens, positions
  std::shared_ptr<cppgrad::nn::Dropout> drop;
  std::shared_ptr<cppgrad::nn::TransformerEncoder> blocks;  // pre-norm layers and the final LayerNorm
  std::shared_ptr<cppgrad::nn::Linear> lm_head;             // its weight is wte's

 private:
  cppgrad::Tensor embed(const cppgrad::Tensor& tokens, const cppgrad::Tensor& positions);  // positions (T) or (B, T)
};

class Llama : public LanguageModel {
 public:
  explicit Llama(const ModelConfig& config);
  cppgrad::Tensor forward(const cppgrad::Tensor& tokens) override;
  cppgrad::Tensor forward_step(const cppgrad::Tensor& tokens, std::vector<cppgrad::nn::KVCache>& caches,
                               const cppgrad::Tensor& key_padding_mask = {}) override;
  void set_checkpoint_layers(bool enabled) override { checkpoint_layers_ = enabled; }
  std::string type_name() const override { return "Llama"; }

  std::shared_ptr<cppgrad::nn::Decoder> decoder;

 private:
  bool checkpoint_layers_ = false;
};

}  // namespace cppgrad::hf
