// Incremental decoding with cached keys and values: each step's output equals the matching
// rows of a full forward over the whole prefix, for attention, decoder layers and stacks, and
// decoder-only (causal encoder) stacks. The two paths multiply the same numbers in different
// groupings (a (1, L) score row against a (T, L) block), so they agree to rounding: 1e-12 in
// float64, 1e-5 in float32 with values of order 1. Left-padded batches of prompts of different
// lengths, decoded together, give each prompt the tokens and logits it gets alone.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../common/check.h"
#include "cppgrad.h"

using namespace cppgrad;
using namespace cppgrad::nn;
namespace F = cppgrad::nn::functional;
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

// ---- batched prompts of different lengths, left-padded -----------------------------------------
namespace {

// The tokens of `prompts` right-aligned in one (B, T) batch, as Hugging Face's generate pads
// them, and the mask of the padding (true) before each.
struct LeftPadded {
  Tensor tokens, padding;
};
LeftPadded left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_token) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  std::vector<int64_t> tokens, padding;
  for (const auto& p : prompts) {
    for (size_t i = 0; i < longest - p.size(); ++i) tokens.push_back(pad_token), padding.push_back(1);
    for (int64_t t : p) tokens.push_back(t), padding.push_back(0);
  }
  const Shape shape{static_cast<int64_t>(prompts.size()), static_cast<int64_t>(longest)};
  return {tensor(tokens, shape), tensor(padding, shape).to(kBool)};
}

// Greedy decoding, each step's last-position logits (vocab) and the tokens chosen.
struct Greedy {
  std::vector<Tensor> logits;
  std::vector<int64_t> tokens;
};

// One prompt alone, recomputing the whole sequence at every step (no cache, no padding).
template <class Full>
Greedy greedy_alone(Full full, std::vector<int64_t> sequence, int64_t steps) {
  Greedy out;
  for (int64_t s = 0; s < steps; ++s) {
    const auto T = static_cast<int64_t>(sequence.size());
    Tensor last = full(tensor(sequence, {1, T})).select(0, 0).select(0, T - 1);  // (vocab)
    out.logits.push_back(last);
    out.tokens.push_back(last.argmax().item<int64_t>());
    sequence.push_back(out.tokens.back());
  }
  return out;
}

// All prompts at once, left-padded, through the cache: the prompts in one step with their
// padding mask, then one token per sequence a step with none.
template <class Step>
std::vector<Greedy> greedy_batched(Step step, const std::vector<std::vector<int64_t>>& prompts, int64_t steps) {
  const auto B = static_cast<int64_t>(prompts.size());
  LeftPadded batch = left_pad(prompts, /*pad_token=*/3);
  std::vector<KVCache> caches;
  Tensor logits = step(batch.tokens, caches, batch.padding);  // (B, T, vocab)
  std::vector<Greedy> out(static_cast<size_t>(B));
  for (int64_t s = 0; s < steps; ++s) {
    Tensor last = logits.select(1, logits.size(1) - 1);  // (B, vocab)
    std::vector<int64_t> next = last.argmax(1).to_vector<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
      out[b].logits.push_back(last.select(0, b));
      out[b].tokens.push_back(next[b]);
    }
    if (s + 1 < steps) logits = step(tensor(next, {B, 1}), caches, Tensor());
  }
  return out;
}

// Three prompts of 2, 7 and 4 tokens, 6 greedy tokens each: every sequence of the padded batch
// gets the tokens and logits it gets alone, to `tolerance`.
template <class Full, class Step>
void check_padded_generation(Full full, Step step, double tolerance) {
  const std::vector<std::vector<int64_t>> prompts = {{5, 1}, {2, 9, 4, 4, 7, 0, 8}, {6, 6, 1, 10}};
  const int64_t steps = 6;
  const std::vector<Greedy> batched = greedy_batched(step, prompts, steps);
  for (size_t b = 0; b < prompts.size(); ++b) {
    const Greedy alone = greedy_alone(full, prompts[b], steps);
    CAPTURE(b);
    CHECK(batched[b].tokens == alone.tokens);
    for (int64_t s = 0; s < steps; ++s) {
      CAPTURE(s);
      CHECK(max_abs_diff(batched[b].logits[s], alone.logits[s]) < tolerance);
    }
  }
}

}  // namespace

TEST_CASE("cached decoding: left-padded prompts of different lengths decode as each alone (Llama decoder)") {
  for (RotaryLayout layout : {RotaryLayout::Halves, RotaryLayout::Interleaved}) {
    for (DType dtype : {kFloat64, kFloat32}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(layout == RotaryLayout::Halves);
      manual_seed(7);
      Decoder lm(DecoderOptions(11, 16, 2, 4).num_kv_heads(2).rope_layout(layout));
      lm.to(dtype);
      lm.eval();
      NoGradGuard no_grad;
      // float64: the same sums in other groupings, to rounding. float32: logits of order 1 to 1e-4.
      check_padded_generation([&](const Tensor& tokens) { return lm.forward(tokens); },
                              [&](const Tensor& tokens, std::vector<KVCache>& caches, const Tensor& padding) {
                                if (caches.empty()) caches.resize(2);
                                return lm.forward_step(tokens, caches, padding);
                              },
                              dtype == kFloat64 ? 1e-10 : 1e-4);
    }
  }
}

TEST_CASE("cached decoding: the cache remembers its padding and each sequence's positions") {
  manual_seed(8);
  MultiheadAttention attn(MultiheadAttentionOptions(8, 2).rotary(true));
  NoGradGuard no_grad;
  KVCache cache;
  Tensor padding = tensor(std::vector<int64_t>{1, 1, 0, 0, 0, 0}, {2, 3}).to(kBool);  // 1 and 3 real tokens
  attn.forward_step(randn({2, 3, 8}), cache, padding);
  REQUIRE(cache.key_padding_mask.defined());
  CHECK(cache.key_padding_mask.to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0, 0, 0, 0});
  CHECK(cache.positions(2, 2).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4});
  attn.forward_step(randn({2, 1, 8}), cache);  // a new token is never padding
  CHECK(cache.key_padding_mask.to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0, 0, 0, 0, 0, 0});
  CHECK(cache.positions(2, 1).to_vector<int64_t>() == std::vector<int64_t>{2, 4});
}

TEST_CASE("cached decoding: rotary positions per sequence equal the offset form row by row") {
  Generator gen(9);
  Tensor x = randn({2, 3, 4, 8}, kFloat64, gen);  // (B, H, T, d)
  Tensor positions = tensor(std::vector<int64_t>{0, 1, 2, 3, 5, 6, 7, 8}, {2, 4});
  for (RotaryLayout layout : {RotaryLayout::Halves, RotaryLayout::Interleaved}) {
    Tensor rotated = F::apply_rotary(x, positions, 10000.0, layout);
    CHECK(max_abs_diff(rotated.select(0, 0), F::apply_rotary(x.select(0, 0), 0, 10000.0, layout)) < 1e-15);
    CHECK(max_abs_diff(rotated.select(0, 1), F::apply_rotary(x.select(0, 1), 5, 10000.0, layout)) < 1e-15);
  }
}

TEST_CASE("cached decoding: a padding mask that does not fit the new tokens is refused, naming both") {
  MultiheadAttention attn(8, 2);
  Decoder lm(DecoderOptions(11, 8, 1, 2));
  NoGradGuard no_grad;
  auto message_of = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  KVCache cache;
  std::string wrong_length = message_of([&] { attn.forward_step(randn({2, 3, 8}), cache, zeros({2, 4}, kBool)); });
  CHECK(wrong_length.find("MultiheadAttention::forward_step") != std::string::npos);
  CHECK(wrong_length.find("[2,4]") != std::string::npos);
  CHECK(wrong_length.find("[2,3,8]") != std::string::npos);
  std::string not_bool = message_of([&] { attn.forward_step(randn({2, 3, 8}), cache, zeros({2, 3})); });
  CHECK(not_bool.find("bool") != std::string::npos);
  std::vector<KVCache> caches(1);
  std::string decoder = message_of([&] { lm.forward_step(zeros({2, 3}, kInt64), caches, zeros({3, 3}, kBool)); });
  CHECK(decoder.find("Decoder::forward_step") != std::string::npos);
  CHECK(decoder.find("[3,3]") != std::string::npos);
  CHECK(decoder.find("[2,3]") != std::string::npos);
}
