// Hugging Face checkpoints: a GPT-2's or a Llama's model.safetensors (and config.json) loaded into
// the models of model.h, and the models saved back under the same names. The hf component
// (cppgrad::hf; docs/hugging-face.md):
//
//   auto file = hf::read_hf_checkpoint("gpt2/model.safetensors");   // and config.json beside it
//   hf::ModelConfig config = hf::hf_model_config(file);            // sizes from the shapes
//   auto model = hf::make_model(config);
//   hf::load_hf_checkpoint(*model, file);                           // every name and shape checked
//   hf::save_hf_checkpoint(*model, file.layout, "tuned/model.safetensors");
//   hf::save_hf_directory(*model, file.layout, "tuned");           // and tuned/config.json
//
// The names, against the models' own (model.h):
//
//   GPT-2 (GPT2LMHeadModel)                    gpt2 (GPT2)
//   transformer.wte.weight / wpe.weight        wte.weight / wpe.weight
//   transformer.h.{i}.ln_1.weight, .bias       blocks.layers.{i}.norm1
//   transformer.h.{i}.attn.c_attn.weight (d, 3d), .bias   self_attn.in_proj_weight (3d, d)ᵀ, in_proj_bias
//   transformer.h.{i}.attn.c_proj.weight (d, d), .bias    self_attn.out_proj (transposed)
//   transformer.h.{i}.ln_2                     norm2
//   transformer.h.{i}.mlp.c_fc.weight (d, ff)  linear1 (transposed)
//   transformer.h.{i}.mlp.c_proj.weight (ff, d)  linear2 (transposed)
//   transformer.ln_f                           blocks.norm
//   lm_head.weight (optional: tied)            wte.weight
//
// GPT-2's Conv1D keeps its weight as (in, out), the transpose of a Linear's, hence the
// transposes. Files on the Hub often lack the "transformer." prefix (GPT2Model saved on its own)
// and lm_head.weight (the tied copy is dropped), and may carry each layer's attn.bias (the causal
// mask, [1, 1, n, n]) and attn.masked_bias: the loader accepts all of them, as Hugging Face's does,
// and saving writes the same names back (the buffers as they were read).
//
//   Llama (LlamaForCausalLM)                     llama (Llama)
//   model.embed_tokens.weight                    decoder.tok_embeddings.weight
//   model.layers.{i}.input_layernorm.weight      decoder.layers.{i}.attention_norm.weight
//   model.layers.{i}.self_attn.q_proj.weight     decoder.layers.{i}.attention.q_proj_weight, or
//   .k_proj.weight, .v_proj.weight                 rows of in_proj_weight when there are as many
//                                                  key/value heads as query heads (one fused matrix)
//   model.layers.{i}.self_attn.o_proj.weight     attention.out_proj.weight
//   model.layers.{i}.post_attention_layernorm    ffn_norm
//   model.layers.{i}.mlp.gate_proj / up_proj / down_proj   feed_forward.w1 / w3 / w2
//   model.norm.weight, lm_head.weight            decoder.norm.weight, decoder.output.weight
//
// Hugging Face's q_proj and k_proj rotate feature j with feature j + d_k/2 (rotate_half): the
// llama model uses that layout (nn::RotaryLayout::Halves, the library's default), so rows load
// unpermuted. (Meta's original files pair adjacent features instead; they are not read here.)
#pragma once

#include <optional>
#include <string>

#include "model.h"

namespace cppgrad::hf {

// What a file holds besides the weights, so that saving writes back the names it was read with.
struct HFLayout {
  Arch arch = Arch::GPT2;
  std::string prefix;       // gpt2: "transformer." or ""; llama: "model."
  bool lm_head = true;      // gpt2: whether the file had the tied lm_head.weight
  cppgrad::nn::NamedTensors buffers;  // gpt2: the attn.bias / attn.masked_bias entries, as read
};

// A model.safetensors and, when a config.json lies in the same directory, the sizes and
// constants it gives (those that the shapes do not tell: the heads, the norms' epsilon, the
// rotary base).
struct HFCheckpoint {
  std::string path;
  cppgrad::nn::NamedTensors tensors;
  HFLayout layout;
  struct Config {
    std::optional<int64_t> heads, kv_heads, layers, d_model, ff, vocab, positions;
    std::optional<double> norm_eps, rope_theta;
    std::optional<int64_t> head_dim;  // llama's heads' width, when not d_model / heads
  } config;
};

// Reads `path` (a model.safetensors, or a directory holding one) and its config.json, if any.
// The architecture is told by the names: `expected` that differs from the file's is an Error
// naming both ("a Llama checkpoint (model.embed_tokens.weight), not gpt2").
HFCheckpoint read_hf_checkpoint(const std::string& path, std::optional<Arch> expected = std::nullopt);
// The same from a file already parsed, and config.json's text (nullopt: none); `path` names the
// file in messages.
HFCheckpoint hf_checkpoint_of(cppgrad::nn::SafetensorsContents contents, const std::string& path,
                              const std::optional<std::string>& config_json, std::optional<Arch> expected = std::nullopt);

// The model the file holds: its sizes read off the shapes, the heads from config.json (or
// `heads`, when given; a value contradicting config.json is an Error). gpt2's seq_len is the
// number of learned positions. llama's head width is config.json's head_dim when it has one
// (Gemma-like heads wider or narrower than d_model / heads), else q_proj's rows / heads.
ModelConfig hf_model_config(const HFCheckpoint& file, std::optional<int64_t> heads = std::nullopt);

// Copies the file's weights into `model` (converted to the model's dtype). A file that does not
// fit is refused in one Error that lists every missing name, unexpected name and wrong shape,
// in the file's names; gpt2's lm_head.weight, when present, must equal wte's (the model ties them).
void load_hf_checkpoint(LanguageModel& model, const HFCheckpoint& file);

// The model's weights under the layout's names, in the model's dtype; and written to a file.
cppgrad::nn::NamedTensors hf_state_dict(const LanguageModel& model, const HFLayout& layout);
void save_hf_checkpoint(const LanguageModel& model, const HFLayout& layout, const std::string& path);

// As save_pretrained leaves a model: DIR/model.safetensors and DIR/config.json (the sizes and
// constants under transformers' keys), DIR created if need be.
void save_hf_directory(const LanguageModel& model, const HFLayout& layout, const std::string& dir);

// The layout for a model that was not read from a file, as transformers' save_pretrained
// writes one: gpt2's names under "transformer." without the tied lm_head.weight; llama's.
HFLayout default_hf_layout(Arch arch);

}  // namespace cppgrad::hf
