// Parity of the modern decoder's pieces with their formulas written out in PyTorch 1.13
// (scripts/make_parity_refs.py; the files in tests/data are described in tests/data/README.md):
// RMSNorm, rotary embeddings in both layouts, SwiGLU, grouped-query scaled_dot_product_attention (with
// masks, causal, padding, a window and ALiBi) on both attention paths, MultiheadAttention with
// num_kv_heads, rotary positions and a head_dim of its own (Hugging Face's LlamaAttention), and a
// Llama built by hand from the modules with the default rotary layout against Hugging Face
// twins (tests/data/hf_llama_*). Outputs and every gradient of L = sum(out ⊙ G), in
// float64 to 1e-10 relative and in float32 to 1e-5 (float32's rounding, 6e-8 an operation, over
// sums of a few dozen terms; any wrong term moves far more).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "cppgrad.h"
#include "parity_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using namespace cppgrad::paritytest;
namespace F = cppgrad::nn::functional;

namespace {

struct Case {
  SafetensorsContents file;
  double tolerance;
  DType dtype;
};

Case open_case(const std::string& name) {
  Case c{load_safetensors(kData + "/" + name + ".safetensors"), kRelTol, kFloat64};
  if (meta(c.file, "float_dtype") == "F32") c.tolerance = 1e-5, c.dtype = kFloat32;
  return c;
}

double expect_near(const Tensor& got, const Case& c, const std::string& name) {
  INFO(name);
  REQUIRE(got.defined());
  const Tensor& want = c.file.at(name);
  REQUIRE(got.shape() == want.shape());
  CHECK(got.dtype() == c.dtype);
  const double rel = nntest::max_rel_diff(got, want);
  CHECK(rel < c.tolerance);
  return rel;
}

void backward_with_G(const Tensor& out, const Case& c) { (out * c.file.at("in.G")).sum().backward(); }

RotaryLayout layout_of(const std::string& name) {
  REQUIRE((name == "halves" || name == "interleaved"));
  return name == "halves" ? RotaryLayout::Halves : RotaryLayout::Interleaved;
}

struct BackendGuard {
  explicit BackendGuard(F::AttentionBackend b) : previous(F::attention_backend()) { F::set_attention_backend(b); }
  ~BackendGuard() { F::set_attention_backend(previous); }
  F::AttentionBackend previous;
};

}  // namespace

TEST_CASE("parity with PyTorch: RMSNorm, float64 and float32, eps given and None, with and without weight") {
  for (const char* name : {"rmsnorm_f64", "rmsnorm_eps_none_f64", "rmsnorm_f32", "rmsnorm_noaffine_f32"}) {
    INFO(name);
    Case c = open_case(name);
    CHECK(meta(c.file, "kind") == "RMSNorm");
    const std::string eps = meta(c.file, "eps");
    RMSNorm norm({8}, eps == "none" ? std::nullopt : std::optional<double>(std::stod(eps)),
                 meta_flag(c.file, "elementwise_affine"));
    norm.to(c.dtype);
    norm.load_state_dict(params_of(c.file));
    Tensor x = input(c.file, "x");
    Tensor y = norm.forward(x);
    backward_with_G(y, c);
    expect_near(y, c, "out.output");
    expect_near(x.grad(), c, "grad.x");
    if (norm.weight.defined()) expect_near(norm.weight.grad(), c, "grad.param.weight");
  }
}

TEST_CASE("parity with PyTorch: rotary embeddings, Meta's interleaved pairs and Hugging Face's halves") {
  for (const char* name : {"rope_interleaved_f64", "rope_halves_f64", "rope_interleaved_f32", "rope_halves_f32"}) {
    INFO(name);
    Case c = open_case(name);
    RotaryEmbedding rope(RotaryEmbeddingOptions(meta_int(c.file, "dim"))
                             .base(std::stod(meta(c.file, "base")))
                             .layout(layout_of(meta(c.file, "layout"))));
    Tensor x = input(c.file, "x");
    Tensor y = rope.forward(x, meta_int(c.file, "position_offset"));
    backward_with_G(y, c);
    expect_near(y, c, "out.output");
    expect_near(x.grad(), c, "grad.x");
  }
}

TEST_CASE("parity with PyTorch: SwiGLU, w2(silu(w1 x) * w3 x), with and without biases, float64 and float32") {
  for (const char* name : {"swiglu_f64", "swiglu_bias_f64", "swiglu_f32"}) {
    INFO(name);
    Case c = open_case(name);
    SwiGLU block(meta_int(c.file, "dim"), meta_int(c.file, "hidden_dim"), meta_flag(c.file, "bias"));
    block.to(c.dtype);
    block.load_state_dict(params_of(c.file));
    Tensor x = input(c.file, "x");
    Tensor y = block.forward(x);
    backward_with_G(y, c);
    expect_near(y, c, "out.output");
    expect_near(x.grad(), c, "grad.x");
    for (const auto& [pname, p] : block.named_parameters()) expect_near(p.grad(), c, "grad.param." + pname);
    CHECK(block.named_parameters().size() == params_of(c.file).size());
  }
}

TEST_CASE("parity with PyTorch: grouped-query attention by repeat_interleave, masks, causal, window, ALiBi, both paths") {
  for (const char* name : {"gqa_h4g4_bool_f64", "gqa_h4g2_float4d_f64", "gqa_h4g1_causal_padding_f64",
                           "gqa_h8g2_causal_f32", "gqa_h4g1_padding_f32", "gqa_h6g2_window_alibi_f64"}) {
    for (auto backend : {F::AttentionBackend::Materialize, F::AttentionBackend::Fused}) {
      INFO(name, ", fused ", backend == F::AttentionBackend::Fused);
      BackendGuard guard(backend);
      Case c = open_case(name);
      Tensor q = input(c.file, "q"), k = input(c.file, "k"), v = input(c.file, "v");
      auto options = F::AttentionOptions()
                         .enable_gqa(true)
                         .attn_mask(optional_input(c.file, "attn_mask"))
                         .is_causal(meta_flag(c.file, "is_causal"));
      if (meta(c.file, "window") != "none") options.window(std::stoll(meta(c.file, "window")));
      if (meta_flag(c.file, "alibi")) options.alibi_slopes(F::alibi_slopes(meta_int(c.file, "num_heads")));
      Tensor out = F::scaled_dot_product_attention(q, k, v, options).output;
      backward_with_G(out, c);
      expect_near(out, c, "out.output");
      expect_near(q.grad(), c, "grad.q");
      expect_near(k.grad(), c, "grad.k");
      expect_near(v.grad(), c, "grad.v");
    }
  }
}

TEST_CASE("parity with PyTorch: MultiheadAttention with num_kv_heads, padding, causal and rotary positions") {
  for (const char* name : {"mha_gqa_h4g2_kpm_f64", "mha_mqa_causal_rope_f64", "mha_gqa_rope_interleaved_kpm_f32"}) {
    INFO(name);
    Case c = open_case(name);
    auto options = MultiheadAttentionOptions(meta_int(c.file, "embed_dim"), meta_int(c.file, "num_heads"))
                       .num_kv_heads(meta_int(c.file, "num_kv_heads"));
    if (meta(c.file, "rotary") != "none") options.rotary(true).rotary_layout(layout_of(meta(c.file, "rotary")));
    MultiheadAttention mha(options);
    mha.to(c.dtype);
    mha.load_state_dict(params_of(c.file));  // strict: q/k/v_proj_weight, in_proj_bias, out_proj.*
    const bool self = meta_flag(c.file, "self_attention");
    Tensor query = input(c.file, "query");
    Tensor key = self ? query : input(c.file, "key"), value = self ? query : input(c.file, "value");
    Tensor out = mha.forward(query, key, value,
                             {.key_padding_mask = optional_input(c.file, "key_padding_mask"),
                              .need_weights = false,
                              .is_causal = meta_flag(c.file, "is_causal")})
                     .output;
    backward_with_G(out, c);
    expect_near(out, c, "out.output");
    expect_near(query.grad(), c, "grad.query");
    if (!self) {
      expect_near(key.grad(), c, "grad.key");
      expect_near(value.grad(), c, "grad.value");
    }
    size_t compared = 0;
    for (const auto& [pname, p] : mha.named_parameters()) {
      expect_near(p.grad(), c, "grad.param." + pname);
      ++compared;
    }
    CHECK(compared == params_of(c.file).size());
  }
}

TEST_CASE("parity with PyTorch: Hugging Face's LlamaAttention with head_dim 4, not d / heads = 2 (8 heads on 2)") {
  Case c = open_case("llama_attention_head_dim_f64");
  CHECK(meta(c.file, "kind") == "LlamaAttention");
  CHECK(meta(c.file, "rotary") == "halves");
  // No layout named: the default is the one Hugging Face's weights are written for.
  MultiheadAttention mha(MultiheadAttentionOptions(meta_int(c.file, "embed_dim"), meta_int(c.file, "num_heads"))
                             .num_kv_heads(meta_int(c.file, "num_kv_heads"))
                             .head_dim(meta_int(c.file, "head_dim"))
                             .rotary(true)
                             .bias(false));
  CHECK(mha.head_dim == 4);
  CHECK(mha.q_proj_weight.shape() == Shape{32, 16});  // 8 heads of 4
  CHECK(mha.k_proj_weight.shape() == Shape{8, 16});   // 2 key/value heads of 4
  CHECK(mha.out_proj->weight.shape() == Shape{16, 32});
  mha.to(kFloat64);
  mha.load_state_dict(params_of(c.file));  // strict
  Tensor x = input(c.file, "x");
  Tensor out = mha.forward(x, x, x, {.need_weights = false, .is_causal = true}).output;
  backward_with_G(out, c);
  // The same sums in float64 in another order: ~1e-15 relative; 1e-12 leaves room and no more.
  c.tolerance = 1e-12;
  expect_near(out, c, "out.output");
  expect_near(x.grad(), c, "grad.x");
  size_t compared = 0;
  for (const auto& [pname, p] : mha.named_parameters()) {
    expect_near(p.grad(), c, "grad.param." + pname);
    ++compared;
  }
  CHECK(compared == params_of(c.file).size());
}

namespace {

// A Llama put together by hand from the modules, as a user writes one: no rotary layout named.
struct HandBuiltLlama {
  std::shared_ptr<Embedding> embed;
  std::vector<std::shared_ptr<RMSNorm>> attention_norms, mlp_norms;
  std::vector<std::shared_ptr<MultiheadAttention>> attentions;
  std::vector<std::shared_ptr<SwiGLU>> mlps;
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<Linear> lm_head;

  // The twin's model.safetensors under transformers' names; heads, key/value heads and head_dim
  // from its config.json; `layout` unset leaves the options' default.
  HandBuiltLlama(const SafetensorsContents& file, int64_t heads, int64_t kv_heads, int64_t head_dim,
                 std::optional<RotaryLayout> layout, DType dtype) {
    const Tensor& table = file.at("model.embed_tokens.weight");
    const int64_t vocab = table.size(0), d = table.size(1);
    const int64_t ff = file.at("model.layers.0.mlp.gate_proj.weight").size(0);
    NoGradGuard no_grad;
    auto copy = [&](Tensor& into, const std::string& name) { into.copy_(file.at(name).to(dtype)); };
    embed = std::make_shared<Embedding>(vocab, d);
    embed->to(dtype);
    copy(embed->weight, "model.embed_tokens.weight");
    for (int64_t i = 0; file.contains(fmt::format("model.layers.{}.input_layernorm.weight", i)); ++i) {
      const std::string h = fmt::format("model.layers.{}.", i);
      auto options = MultiheadAttentionOptions(d, heads).num_kv_heads(kv_heads).head_dim(head_dim).rotary(true).bias(false);
      if (layout) options.rotary_layout(*layout);
      auto attention = std::make_shared<MultiheadAttention>(options);
      auto attention_norm = std::make_shared<RMSNorm>(Shape{d}, 1e-6), mlp_norm = std::make_shared<RMSNorm>(Shape{d}, 1e-6);
      auto mlp = std::make_shared<SwiGLU>(d, ff);
      for (Module* m : std::initializer_list<Module*>{attention.get(), attention_norm.get(), mlp_norm.get(), mlp.get()})
        m->to(dtype);
      copy(attention_norm->weight, h + "input_layernorm.weight");
      copy(mlp_norm->weight, h + "post_attention_layernorm.weight");
      if (attention->in_proj_weight.defined()) {  // as many key/value heads as heads, E wide: one fused matrix
        attention->in_proj_weight.copy_(cat({file.at(h + "self_attn.q_proj.weight"), file.at(h + "self_attn.k_proj.weight"),
                                             file.at(h + "self_attn.v_proj.weight")}, 0).to(dtype));
      } else {
        copy(attention->q_proj_weight, h + "self_attn.q_proj.weight");
        copy(attention->k_proj_weight, h + "self_attn.k_proj.weight");
        copy(attention->v_proj_weight, h + "self_attn.v_proj.weight");
      }
      copy(attention->out_proj->weight, h + "self_attn.o_proj.weight");
      copy(mlp->w1->weight, h + "mlp.gate_proj.weight");
      copy(mlp->w3->weight, h + "mlp.up_proj.weight");
      copy(mlp->w2->weight, h + "mlp.down_proj.weight");
      attentions.push_back(attention), attention_norms.push_back(attention_norm), mlp_norms.push_back(mlp_norm);
      mlps.push_back(mlp);
    }
    norm = std::make_shared<RMSNorm>(Shape{d}, 1e-6);
    lm_head = std::make_shared<Linear>(d, vocab, false);
    norm->to(dtype), lm_head->to(dtype);
    copy(norm->weight, "model.norm.weight");
    copy(lm_head->weight, "lm_head.weight");
  }

  Tensor forward(const Tensor& tokens) {
    Tensor h = embed->forward(tokens);  // (B, T) -> (B, T, d)
    for (size_t i = 0; i < attentions.size(); ++i) {
      Tensor normed = attention_norms[i]->forward(h);
      h = h + attentions[i]->forward(normed, normed, normed, {.need_weights = false, .is_causal = true}).output;
      h = h + mlps[i]->forward(mlp_norms[i]->forward(h));
    }
    return lm_head->forward(norm->forward(h));  // (B, T, vocab)
  }
};

}  // namespace

TEST_CASE("a Llama built by hand from the modules, no rotary layout named, gives Hugging Face's logits from its weights") {
  struct Twin {
    const char* name;
    int64_t heads, kv_heads, head_dim;  // config.json's (head_dim 0: not given, hidden_size / heads)
    DType dtype;
  };
  for (const Twin& t : {Twin{"hf_llama_f32", 4, 2, 0, kFloat32}, Twin{"hf_llama_f64", 4, 4, 0, kFloat64},
                        Twin{"hf_llama_head_dim_f64", 8, 2, 4, kFloat64}}) {
    INFO(t.name);
    const std::string dir = kData + "/" + t.name;
    const SafetensorsContents weights = load_safetensors(dir + "/model.safetensors");
    const SafetensorsContents twin = load_safetensors(dir + "/twin_logits.safetensors");
    const Tensor& tokens = twin.at("in.tokens");
    const Tensor& expected = twin.at("out.logits");
    NoGradGuard no_grad;
    HandBuiltLlama model(weights, t.heads, t.kv_heads, t.head_dim, std::nullopt, t.dtype);
    // float32: a few units in the last place of logits of order 1-10; float64: rounding only.
    const double scale = std::max(1.0, expected.abs().max().item<double>());
    const double tolerance = (t.dtype == kFloat32 ? 1e-5 : 1e-10) * scale;
    CHECK(nntest::max_abs_diff(model.forward(tokens), expected) < tolerance);
    // Meta's layout on the same weights computes another model, and nothing says so: this is
    // what the single default spares the user.
    HandBuiltLlama meta_layout(weights, t.heads, t.kv_heads, t.head_dim, RotaryLayout::Interleaved, t.dtype);
    CHECK(nntest::max_abs_diff(meta_layout.forward(tokens), expected) > 1e-3 * scale);
  }
}
