// Incremental decoding with cached keys and values: each step's output equals the matching
// rows of a full forward over the whole prefix, for attention, decoder layers and stacks, and
// decoder-only (causal encoder) stacks. The two paths multiply the same numbers in different
// groupings (a (1, L) score row against a (T, L) block), so they agree to rounding: 1e-12 in
// float64, 1e-5 in float32 with values of order 1.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../common/check.h"
#include "cppgrad.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using cppgrad::check::max_abs_diff;  // NaN-safe: a NaN anywhere is an infinite difference


TEST_CASE("cached decoding: MultiheadAttention steps of 1 and 3 positions equal the causal forward") {
  manual_seed(1);
  MultiheadAttention attn(8, 2);
  attn.to(kFloat64);
  attn.eval();
  Generator gen(2);
  Tensor x = randn({2, 7, 8}, kFloat64, gen);
  NoGradGuard no_grad;
  Tensor full = attn.forward(x, x, x, {.need_weights = false, .is_causal = true}).output;

  KVCache one_by_one;
  for (int64_t t = 0; t < 7; ++t)
    CHECK(max_abs_diff(attn.forward_step(x.narrow(1, t, 1), one_by_one), full.narrow(1, t, 1)) < 1e-12);
  CHECK(one_by_one.length() == 7);

  KVCache chunks;  // a prompt of 3, then 1, then 3: causal inside each chunk too
  CHECK(max_abs_diff(attn.forward_step(x.narrow(1, 0, 3), chunks), full.narrow(1, 0, 3)) < 1e-12);
  CHECK(max_abs_diff(attn.forward_step(x.narrow(1, 3, 1), chunks), full.narrow(1, 3, 1)) < 1e-12);
  CHECK(max_abs_diff(attn.forward_step(x.narrow(1, 4, 3), chunks), full.narrow(1, 4, 3)) < 1e-12);
}

TEST_CASE("cached decoding: a decoder stack with memory padding, post-norm and pre-norm, float64 and float32") {
  for (bool norm_first : {false, true}) {
    for (DType dtype : {kFloat64, kFloat32}) {
      manual_seed(3);
      TransformerDecoder decoder(TransformerLayerOptions(8, 2).dim_feedforward(16).norm_first(norm_first), 2);
      decoder.to(dtype);
      decoder.eval();
      Generator gen(4);
      Tensor memory = randn({2, 5, 8}, dtype, gen), tgt = randn({2, 6, 8}, dtype, gen);
      Tensor padding = zeros({2, 5}, kBool);
      padding.select(0, 1).narrow(0, 3, 2).fill_(1.0);  // the second source has 3 tokens
      NoGradGuard no_grad;
      Tensor full = decoder.forward(tgt, memory, {}, {}, {}, padding, /*tgt_is_causal=*/true);
      std::vector<DecoderLayerCache> cache;
      const double tolerance = dtype == kFloat64 ? 1e-12 : 1e-5;
      for (int64_t t = 0; t < 6; ++t) {
        INFO("norm_first ", norm_first, ", ", dtype_name(dtype), ", step ", t);
        CHECK(max_abs_diff(decoder.forward_step(tgt.narrow(1, t, 1), memory, cache, padding), full.narrow(1, t, 1)) <
              tolerance);
      }
      CHECK(cache.size() == 2);
      CHECK(cache[0].self_attn.length() == 6);
      CHECK(cache[0].cross_attn.length() == 5);  // memory projected once
    }
  }
}

TEST_CASE("cached decoding: a decoder-only (causal encoder) stack") {
  manual_seed(5);
  TransformerEncoder stack(TransformerLayerOptions(8, 2).dim_feedforward(16), 3);
  stack.to(kFloat64);
  stack.eval();
  Generator gen(6);
  Tensor x = randn({3, 9, 8}, kFloat64, gen);
  NoGradGuard no_grad;
  Tensor full = stack.forward(x, {}, {}, /*is_causal=*/true);
  std::vector<KVCache> cache;
  CHECK(max_abs_diff(stack.forward_step(x.narrow(1, 0, 4), cache), full.narrow(1, 0, 4)) < 1e-12);  // the prompt
  for (int64_t t = 4; t < 9; ++t) CHECK(max_abs_diff(stack.forward_step(x.narrow(1, t, 1), cache), full.narrow(1, t, 1)) < 1e-12);
}

TEST_CASE("cached decoding: a step that does not continue its cache is refused") {
  MultiheadAttention attn(8, 2);
  KVCache cache;
  NoGradGuard no_grad;
  attn.forward_step(randn({2, 1, 8}), cache);
  std::string message;
  try {
    attn.forward_step(randn({3, 1, 8}), cache);  // another batch size
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("forward_step") != std::string::npos);
  CHECK(message.find("[3,1,8]") != std::string::npos);
}
