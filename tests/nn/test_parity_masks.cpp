// Parity with PyTorch 1.13 for every mask kind and option of MultiheadAttention and the
// Transformer family. Each reference file in tests/data was written by
// scripts/make_parity_refs.py: its __metadata__ names the module's options and masks, and
// the test builds the same cppgrad module from them, loads the `param.*` entries by name, runs
// it in float64 on the stored inputs and masks, and compares the output, the attention
// weights when asked for, and every gradient of L = sum(output * G) to 1e-10 relative.
//
// PyTorch 1.13 has no is_causal argument: its causal cases pass the causal mask. cppgrad runs
// those cases three ways, all against the same reference: with the mask alone, with the mask
// and is_causal (as later PyTorch versions require), and with is_causal alone.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cppgrad.h"
#include "parity_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using namespace cppgrad::paritytest;

namespace {

SafetensorsContents load_case(const std::string& name) {
  return load_safetensors(kData + "/" + name + ".safetensors");
}

// How a causal case is run: the stored causal mask, is_causal, or both.
struct CausalRun {
  bool pass_mask;
  bool is_causal;
};

// One run for a case: as PyTorch was called, and for a causal case the two other ways.
std::vector<CausalRun> runs_for(bool causal_case) {
  if (!causal_case) return {{true, false}};
  return {{true, false}, {true, true}, {false, true}};
}

// ---- MultiheadAttention -----------------------------------------------------------------------

// The inputs of one forward: fresh leaves, with the self-attention cases' one input used as
// query, key and value (which takes cppgrad's fused Q/K/V projection).
struct MhaInputs {
  Tensor query, key, value;
};

MhaInputs mha_inputs(const SafetensorsContents& file) {
  MhaInputs in;
  in.query = input(file, "query");
  const bool self = meta_flag(file, "self_attention");
  in.key = self ? in.query : input(file, "key");
  in.value = self ? in.query : input(file, "value");
  return in;
}

// Compares output, weights and the input gradients of one MultiheadAttention-like forward.
double expect_attention(const AttentionOutput& out, const MhaInputs& in, const SafetensorsContents& file) {
  double worst = expect_close(out.output, file, "out.output");
  if (file.contains("out.weights")) {
    worst = std::max(worst, expect_close(out.weights, file, "out.weights"));
  } else {
    CHECK_FALSE(out.weights.defined());
  }
  worst = std::max(worst, expect_close(in.query.grad(), file, "grad.query"));
  if (!meta_flag(file, "self_attention")) {
    worst = std::max(worst, expect_close(in.key.grad(), file, "grad.key"));
    worst = std::max(worst, expect_close(in.value.grad(), file, "grad.value"));
  }
  return worst;
}

// Runs one MultiheadAttention case; returns the worst relative error over every comparison.
double run_mha_case(const std::string& name) {
  SafetensorsContents file = load_case(name);
  REQUIRE(meta(file, "kind") == "MultiheadAttention");
  const int64_t E = meta_int(file, "embed_dim"), H = meta_int(file, "num_heads");
  const bool bias = meta_flag(file, "bias");
  MultiheadAttention mha(MultiheadAttentionOptions(E, H)
                             .bias(bias)
                             .kdim(meta_int(file, "kdim"))
                             .vdim(meta_int(file, "vdim"))
                             .dropout(0.0));
  mha.to(kFloat64);
  mha.eval();
  mha.load_state_dict(params_of(file));  // strict: every name must match

  const Tensor attn_mask = optional_input(file, "attn_mask");
  const Tensor padding = optional_input(file, "key_padding_mask");
  const bool need_weights = meta_flag(file, "need_weights");
  const bool average = meta_flag(file, "average_attn_weights");
  const Tensor& G = file.at("in.G");

  double worst = 0.0;
  for (CausalRun run : runs_for(meta_flag(file, "is_causal"))) {
    INFO("attn_mask passed: " << run.pass_mask << ", is_causal: " << run.is_causal);
    const Tensor mask = run.pass_mask ? attn_mask : Tensor();
    mha.zero_grad();
    MhaInputs in = mha_inputs(file);
    AttentionOutput out = mha.forward(in.query, in.key, in.value,
                                      {.key_padding_mask = padding,
                                       .need_weights = need_weights,
                                       .attn_mask = mask,
                                       .average_attn_weights = average,
                                       .is_causal = run.is_causal});
    (out.output * G).sum().backward();
    worst = std::max(worst, expect_attention(out, in, file));
    worst = std::max(worst, expect_param_grads(mha, file));

    // The per-head layer, loaded from the fused one, must match PyTorch too (it has the one
    // fused layout only: kdim = vdim = embed_dim).
    if (!mha.in_proj_weight.defined()) continue;
    PerHeadAttention per_head(E, H, bias);
    per_head.to(kFloat64);
    per_head.load_from(mha);
    MhaInputs in2 = mha_inputs(file);
    AttentionOutput split = per_head.forward(in2.query, in2.key, in2.value,
                                             {.key_padding_mask = padding,
                                              .need_weights = need_weights,
                                              .attn_mask = mask,
                                              .average_attn_weights = average,
                                              .is_causal = run.is_causal});
    (split.output * G).sum().backward();
    worst = std::max(worst, expect_attention(split, in2, file));
    worst = std::max(worst, expect_close(per_head.stacked_in_proj_weight(true), file, "grad.param.in_proj_weight"));
    if (bias) worst = std::max(worst, expect_close(per_head.stacked_in_proj_bias(true), file, "grad.param.in_proj_bias"));
    worst = std::max(worst, expect_close(per_head.out_proj->weight.grad(), file, "grad.param.out_proj.weight"));
  }
  return worst;
}

// ---- the Transformer family -------------------------------------------------------------------

Activation activation_of(const SafetensorsContents& file) {
  const std::string& name = meta(file, "activation");
  REQUIRE((name == "relu" || name == "gelu"));
  return name == "relu" ? Activation::ReLU : Activation::GELU;
}

TransformerLayerOptions layer_options_of(const SafetensorsContents& file) {
  return TransformerLayerOptions(meta_int(file, "d_model"), meta_int(file, "nhead"))
      .dim_feedforward(meta_int(file, "dim_feedforward"))
      .dropout(0.0)
      .activation(activation_of(file))
      .layer_norm_eps(std::stod(meta(file, "layer_norm_eps")))
      .norm_first(meta_flag(file, "norm_first"));
}

// The masks of a Transformer-family call; undefined where the case has none.
struct TransformerMasks {
  Tensor src_mask, tgt_mask, memory_mask, src_padding, tgt_padding, memory_padding;
  bool tgt_is_causal = false;
};

// One forward of the module on fresh leaves: the output and the leaves by input name.
struct TransformerRun {
  Tensor output;
  std::map<std::string, Tensor> inputs;
};
using Forward = std::function<TransformerRun(const TransformerMasks&)>;

// Builds the case's module (into `holder`) and the forward that calls it as PyTorch did.
Forward transformer_forward(const SafetensorsContents& file, std::shared_ptr<Module>& holder) {
  const std::string& kind = meta(file, "kind");
  const TransformerLayerOptions o = layer_options_of(file);
  if (kind == "TransformerEncoderLayer") {
    auto layer = std::make_shared<TransformerEncoderLayer>(o);
    holder = layer;
    return [layer, &file](const TransformerMasks& m) {
      Tensor src = input(file, "src");
      return TransformerRun{layer->forward(src, m.src_mask, m.src_padding), {{"src", src}}};
    };
  }
  if (kind == "TransformerEncoder") {
    auto encoder = std::make_shared<TransformerEncoder>(o, meta_int(file, "num_layers"), meta_flag(file, "final_norm"));
    holder = encoder;
    return [encoder, &file](const TransformerMasks& m) {
      Tensor src = input(file, "src");
      return TransformerRun{encoder->forward(src, m.src_mask, m.src_padding), {{"src", src}}};
    };
  }
  if (kind == "TransformerDecoderLayer") {
    auto layer = std::make_shared<TransformerDecoderLayer>(o);
    holder = layer;
    return [layer, &file](const TransformerMasks& m) {
      Tensor tgt = input(file, "tgt"), memory = input(file, "memory");
      Tensor out = layer->forward(tgt, memory, m.tgt_mask, m.memory_mask, m.tgt_padding, m.memory_padding,
                                  m.tgt_is_causal);
      return TransformerRun{out, {{"tgt", tgt}, {"memory", memory}}};
    };
  }
  if (kind == "TransformerDecoder") {
    auto decoder = std::make_shared<TransformerDecoder>(o, meta_int(file, "num_layers"), meta_flag(file, "final_norm"));
    holder = decoder;
    return [decoder, &file](const TransformerMasks& m) {
      Tensor tgt = input(file, "tgt"), memory = input(file, "memory");
      Tensor out = decoder->forward(tgt, memory, m.tgt_mask, m.memory_mask, m.tgt_padding, m.memory_padding,
                                    m.tgt_is_causal);
      return TransformerRun{out, {{"tgt", tgt}, {"memory", memory}}};
    };
  }
  REQUIRE(kind == "Transformer");
  REQUIRE(meta_flag(file, "final_norm"));  // torch.nn.Transformer always has them, as ours does
  auto model = std::make_shared<Transformer>(TransformerOptions(o.d_model(), o.nhead())
                                                 .num_encoder_layers(meta_int(file, "num_encoder_layers"))
                                                 .num_decoder_layers(meta_int(file, "num_decoder_layers"))
                                                 .dim_feedforward(o.dim_feedforward())
                                                 .dropout(0.0)
                                                 .activation(o.activation())
                                                 .layer_norm_eps(o.layer_norm_eps())
                                                 .norm_first(o.norm_first()));
  holder = model;
  return [model, &file](const TransformerMasks& m) {
    Tensor src = input(file, "src"), tgt = input(file, "tgt");
    Tensor out = model->forward(src, tgt, m.src_mask, m.tgt_mask, m.memory_mask, m.src_padding, m.tgt_padding,
                                m.memory_padding, /*src_is_causal=*/false, m.tgt_is_causal);
    return TransformerRun{out, {{"src", src}, {"tgt", tgt}}};
  };
}

// Runs one Transformer-family case; returns the worst relative error over every comparison.
double run_transformer_case(const std::string& name) {
  SafetensorsContents file = load_case(name);
  std::shared_ptr<Module> module;
  Forward forward = transformer_forward(file, module);
  module->to(kFloat64);
  module->eval();
  module->load_state_dict(params_of(file));  // strict: PyTorch's names are exactly ours

  TransformerMasks stored{optional_input(file, "src_mask"),
                          optional_input(file, "tgt_mask"),
                          optional_input(file, "memory_mask"),
                          optional_input(file, "src_key_padding_mask"),
                          optional_input(file, "tgt_key_padding_mask"),
                          optional_input(file, "memory_key_padding_mask")};
  const Tensor& G = file.at("in.G");

  double worst = 0.0;
  for (CausalRun run : runs_for(meta_flag(file, "tgt_is_causal"))) {
    INFO("tgt_mask passed: " << run.pass_mask << ", tgt_is_causal: " << run.is_causal);
    TransformerMasks masks = stored;
    if (!run.pass_mask) masks.tgt_mask = Tensor();
    masks.tgt_is_causal = run.is_causal;
    module->zero_grad();
    TransformerRun result = forward(masks);
    (result.output * G).sum().backward();
    worst = std::max(worst, expect_close(result.output, file, "out.output"));
    for (const auto& [input_name, leaf] : result.inputs)
      worst = std::max(worst, expect_close(leaf.grad(), file, "grad." + input_name));
    worst = std::max(worst, expect_param_grads(*module, file));
  }

  // The whole model also stores its encoder's output, to tell the two halves apart.
  if (auto* model = dynamic_cast<Transformer*>(module.get())) {
    NoGradGuard no_grad;
    Tensor memory = model->encoder->forward(file.at("in.src"), stored.src_mask, stored.src_padding);
    worst = std::max(worst, expect_close(memory, file, "out.memory"));
  }
  return worst;
}

}  // namespace

// ---- the cases (scripts/make_parity_refs.py writes one file for each) --------------------------

TEST_CASE("parity with PyTorch MultiheadAttention: attn_mask bool (T x S)") {
  CHECK(run_mha_case("mha_attn_bool2d") < kRelTol);
}
TEST_CASE("parity with PyTorch MultiheadAttention: attn_mask float (T x S)") {
  CHECK(run_mha_case("mha_attn_float2d") < kRelTol);
}
TEST_CASE("parity with PyTorch MultiheadAttention: attn_mask bool (B.H x T x S) and per-head weights") {
  CHECK(run_mha_case("mha_attn_bool3d") < kRelTol);
}
TEST_CASE("parity with PyTorch MultiheadAttention: attn_mask float (B.H x T x S) and per-head weights") {
  CHECK(run_mha_case("mha_attn_float3d") < kRelTol);
}
TEST_CASE("parity with PyTorch MultiheadAttention: float key_padding_mask") {
  CHECK(run_mha_case("mha_kpm_float") < kRelTol);
}
TEST_CASE("parity with PyTorch MultiheadAttention: bool attn_mask and bool key_padding_mask together") {
  CHECK(run_mha_case("mha_both_bool") < kRelTol);
}
TEST_CASE("parity with PyTorch MultiheadAttention: float 3-D attn_mask and bool key_padding_mask together") {
  CHECK(run_mha_case("mha_both_float3d") < kRelTol);
}
TEST_CASE("parity with PyTorch MultiheadAttention: is_causal self-attention") {
  CHECK(run_mha_case("mha_causal") < kRelTol);
}
TEST_CASE("parity with PyTorch MultiheadAttention: is_causal with a key_padding_mask and per-head weights") {
  CHECK(run_mha_case("mha_causal_kpm") < kRelTol);
}
TEST_CASE("parity with PyTorch MultiheadAttention: bias=false with both masks") {
  CHECK(run_mha_case("mha_nobias") < kRelTol);
}
TEST_CASE("parity with PyTorch MultiheadAttention: kdim and vdim other than embed_dim with both masks") {
  CHECK(run_mha_case("mha_kvdim") < kRelTol);
}
TEST_CASE("parity with PyTorch MultiheadAttention: kdim and vdim other than embed_dim and bias=false") {
  CHECK(run_mha_case("mha_kvdim_nobias") < kRelTol);
}

TEST_CASE("parity with PyTorch TransformerEncoderLayer: src_mask and src_key_padding_mask") {
  CHECK(run_transformer_case("encoder_layer_masks") < kRelTol);
}
TEST_CASE("parity with PyTorch TransformerEncoderLayer: norm_first and gelu and layer_norm_eps 1e-3") {
  CHECK(run_transformer_case("encoder_layer_prenorm_gelu") < kRelTol);
}
TEST_CASE("parity with PyTorch TransformerDecoderLayer: causal tgt_mask and memory_mask and both padding masks") {
  CHECK(run_transformer_case("decoder_layer_masks") < kRelTol);
}
TEST_CASE("parity with PyTorch TransformerDecoderLayer: norm_first and gelu and layer_norm_eps 1e-3") {
  CHECK(run_transformer_case("decoder_layer_prenorm_gelu") < kRelTol);
}
TEST_CASE("parity with PyTorch TransformerEncoder: two layers without a final norm") {
  CHECK(run_transformer_case("encoder_nonorm") < kRelTol);
}
TEST_CASE("parity with PyTorch TransformerEncoder: two pre-norm gelu layers with a final norm") {
  CHECK(run_transformer_case("encoder_norm_prenorm_gelu") < kRelTol);
}
TEST_CASE("parity with PyTorch TransformerDecoder: two layers without a final norm") {
  CHECK(run_transformer_case("decoder_nonorm") < kRelTol);
}
TEST_CASE("parity with PyTorch TransformerDecoder: two pre-norm gelu layers with a final norm") {
  CHECK(run_transformer_case("decoder_norm_prenorm_gelu") < kRelTol);
}
TEST_CASE("parity with PyTorch Transformer: all six masks") {
  CHECK(run_transformer_case("transformer_masks") < kRelTol);
}
TEST_CASE("parity with PyTorch Transformer: norm_first and gelu and layer_norm_eps 1e-6 with masks") {
  CHECK(run_transformer_case("transformer_prenorm_gelu") < kRelTol);
}
