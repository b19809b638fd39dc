// Parity of the modern decoder's pieces with their formulas written out in PyTorch 1.13
// (scripts/make_parity_refs.py; the files in tests/data are described in tests/data/README.md):
// RMSNorm, rotary embeddings in both layouts, SwiGLU, grouped-query scaled_dot_product_attention (with
// masks, causal, padding, a window and ALiBi) on both attention paths, and MultiheadAttention
// with num_kv_heads and rotary positions. Outputs and every gradient of L = sum(out ⊙ G), in
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
