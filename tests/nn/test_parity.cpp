// Parity with PyTorch 1.13: the reference files in tests/data (described in
// tests/data/README.md) hold a module's parameters, its inputs, its outputs and every
// gradient of L = sum(output * G). Each file's parameters are loaded by name into the cppgrad
// module, which is run in float64 on the same inputs; outputs and gradients must agree to
// 1e-10 relative (the files were made to agree to ~1e-12; summation order moves the last bits).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "cppgrad.h"
#include "parity_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using namespace cppgrad::paritytest;

namespace {

// Runs a reference MultiheadAttention case: (key_padding_mask, weights) present or not.
double run_mha_case(const std::string& path, bool with_padding) {
  SafetensorsContents file = load_safetensors(path);
  CHECK(file.metadata.at("kind") == "MultiheadAttention");
  MultiheadAttention mha(8, 2);
  mha.to(kFloat64);
  mha.eval();
  mha.load_state_dict(params_of(file));  // strict: every name must match
  Tensor q = input(file, "query"), k = input(file, "key"), v = input(file, "value");
  Tensor padding = with_padding ? file.at("in.key_padding_mask") : Tensor();
  if (with_padding) CHECK(padding.dtype() == kBool);
  auto out = mha.forward(q, k, v, {.key_padding_mask = padding, .need_weights = with_padding});
  (out.output * file.at("in.G")).sum().backward();

  double worst = expect_close(out.output, file, "out.output");
  if (with_padding) worst = std::max(worst, expect_close(out.weights, file, "out.weights"));
  worst = std::max(worst, expect_close(q.grad(), file, "grad.query"));
  worst = std::max(worst, expect_close(k.grad(), file, "grad.key"));
  worst = std::max(worst, expect_close(v.grad(), file, "grad.value"));
  worst = std::max(worst, expect_param_grads(mha, file));

  // The per-head layer, loaded from the fused one, matches PyTorch as well.
  PerHeadAttention per_head(8, 2);
  per_head.to(kFloat64);
  per_head.load_from(mha);
  Tensor q2 = input(file, "query"), k2 = input(file, "key"), v2 = input(file, "value");
  auto split = per_head.forward(q2, k2, v2, {.key_padding_mask = padding, .need_weights = with_padding});
  (split.output * file.at("in.G")).sum().backward();
  worst = std::max(worst, expect_close(split.output, file, "out.output"));
  worst = std::max(worst, expect_close(q2.grad(), file, "grad.query"));
  worst = std::max(worst, expect_close(per_head.stacked_in_proj_weight(true), file, "grad.param.in_proj_weight"));
  worst = std::max(worst, expect_close(per_head.stacked_in_proj_bias(true), file, "grad.param.in_proj_bias"));
  return worst;
}

}  // namespace

TEST_CASE("parity with PyTorch MultiheadAttention without masks") {
  double worst = run_mha_case(kData + "/mha_e8h2_nomask.safetensors", false);
  CHECK(worst < kRelTol);
}

TEST_CASE("parity with PyTorch MultiheadAttention with a key_padding_mask and weights") {
  double worst = run_mha_case(kData + "/mha_e8h2_kpm.safetensors", true);
  CHECK(worst < kRelTol);
}

TEST_CASE("parity with PyTorch Transformer") {
  SafetensorsContents file = load_safetensors(kData + "/transformer_nomask.safetensors");
  CHECK(file.metadata.at("kind") == "Transformer");
  Transformer model(TransformerOptions(16, 2)
                        .num_encoder_layers(2)
                        .num_decoder_layers(1)
                        .dim_feedforward(32)
                        .dropout(0.0)
                        .activation(Activation::ReLU)
                        .norm_first(false));
  model.to(kFloat64);
  model.eval();
  NamedTensors params = params_of(file);
  CHECK(params.size() == 46);
  model.load_state_dict(params);  // strict: PyTorch's 46 names are exactly ours
  Tensor src = input(file, "src"), tgt = input(file, "tgt");
  Tensor out = model.forward(src, tgt);
  (out * file.at("in.G")).sum().backward();

  double worst = expect_close(out, file, "out.output");
  {
    NoGradGuard no_grad;
    worst = std::max(worst, expect_close(model.encoder->forward(src), file, "out.memory"));
  }
  worst = std::max(worst, expect_close(src.grad(), file, "grad.src"));
  worst = std::max(worst, expect_close(tgt.grad(), file, "grad.tgt"));
  worst = std::max(worst, expect_param_grads(model, file));
  CHECK(worst < kRelTol);
}
