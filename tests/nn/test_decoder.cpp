// The modern decoder block and the decoder-only stack: the parameter count against its closed
// form (printed), Meta's Llama names, causality, cached decoding equal to the full forward with
// grouped heads and a window, gradchecks in float64, a few training steps, bad arguments.
#include <doctest/doctest.h>

#include <fmt/core.h>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using namespace nntest;  // the helpers of nn_helpers.h

TEST_CASE("the decoder's parameter count equals the closed form 2d^2(1 + g/h) + 3 d f + 2d per layer, plus the rest") {
  const int64_t V = 100, d = 64, L = 3, h = 8;
  for (int64_t g : {8, 4, 2, 1}) {
    for (bool tied : {false, true}) {
      Decoder lm(DecoderOptions(V, d, L, h).num_kv_heads(g).tie_embeddings(tied));
      const int64_t f = lm.options.block_options().swiglu_hidden_dim();  // ⌈8·64/3⌉ = 171 -> 176
      CHECK(f == 176);
      // attention: W_Q and W_O d² each, W_K and W_V d·(g·d/h) each; SwiGLU 3·d·f; two RMSNorm d;
      // embeddings V·d, final norm d, output V·d unless tied.
      const int64_t attention = 2 * d * d + 2 * d * (g * d / h);
      CHECK(attention * h == 2 * d * d * (h + g));  // = 2·d²·(1 + g/h)
      const int64_t closed = V * d + L * (attention + 3 * d * f + 2 * d) + d + (tied ? 0 : V * d);
      fmt::print("decoder V={} d={} layers={} h={} g={} tied={}: {} parameters, closed form {}\n", V, d, L, h, g, tied,
                 lm.parameter_count(), closed);
      CHECK(lm.parameter_count() == closed);
    }
  }
  auto names = Decoder(DecoderOptions(10, 8, 1, 2).num_kv_heads(1)).named_parameters();
  std::vector<std::string> expected{"tok_embeddings.weight", "layers.0.attention_norm.weight",
                                    "layers.0.attention.q_proj_weight", "layers.0.attention.k_proj_weight",
                                    "layers.0.attention.v_proj_weight", "layers.0.attention.out_proj.weight",
                                    "layers.0.ffn_norm.weight", "layers.0.feed_forward.w1.weight",
                                    "layers.0.feed_forward.w2.weight", "layers.0.feed_forward.w3.weight",
                                    "norm.weight", "output.weight"};
  REQUIRE(names.size() == expected.size());
  for (size_t i = 0; i < names.size(); ++i) CHECK(names[i].first == expected[i]);
}

TEST_CASE("the decoder is causal, and forward_step with caches equals the full forward") {
  for (auto options : {DecoderOptions(20, 16, 2, 4).num_kv_heads(2), DecoderOptions(20, 16, 2, 4).num_kv_heads(1).window(3),
                       DecoderOptions(20, 16, 2, 4).rope_layout(RotaryLayout::Interleaved),
                       DecoderOptions(20, 16, 2, 8).num_kv_heads(2).head_dim(4)}) {  // 8 heads of 4 on d 16
    manual_seed(7601);
    Decoder lm(options);
    lm.to(kFloat64);
    lm.eval();
    Generator gen(7602);
    Tensor tokens = randint(0, 20, {2, 9}, gen);
    Tensor logits = lm.forward(tokens);
    CHECK(logits.shape() == Shape{2, 9, 20});
    // Changing the last token leaves the logits of the positions before it as they were.
    Tensor changed = tokens.clone();
    changed.narrow(1, 8, 1).fill_(static_cast<double>((tokens.select(0, 0).select(0, 8).item<int64_t>() + 1) % 20));
    CHECK(max_abs_diff(lm.forward(changed).narrow(1, 0, 8), logits.narrow(1, 0, 8)) < 1e-12);
    std::vector<KVCache> caches(2);
    std::vector<Tensor> steps{lm.forward_step(tokens.narrow(1, 0, 5), caches)};
    for (int64_t t = 5; t < 9; ++t) steps.push_back(lm.forward_step(tokens.narrow(1, t, 1), caches));
    CHECK(max_abs_diff(cat(steps, 1), logits) < 1e-12);
    CHECK(caches[0].key.size(1) == (options.num_kv_heads() > 0 ? options.num_kv_heads() : 4));  // the cache's heads
    CHECK(caches[0].key.size(3) == (options.head_dim() > 0 ? options.head_dim() : 4));
  }
}

TEST_CASE("gradcheck the modern decoder block with grouped heads, inputs and parameters") {
  DecoderBlock block(DecoderBlockOptions(8, 4).num_kv_heads(2).hidden_dim(6));
  block.to(kFloat64);
  Tensor x = randn64({2, 3, 8}, 7603, true);
  Tensor padding = zeros({2, 3}, kBool);
  padding.select(0, 1).select(0, 2).fill_(1.0);
  auto f = [&](const std::vector<Tensor>& in) { return block.forward(in[0], padding); };
  std::vector<Tensor> inputs{x};
  for (const Tensor& p : block.parameters()) inputs.push_back(p);
  CHECK(gradcheck(f, inputs, nntest::fast()));
  CHECK(gradgradcheck(f, {x, block.attention->k_proj_weight, block.feed_forward->w1->weight}, nntest::fast()));
}

TEST_CASE("a small modern decoder learns to continue a repeating sequence") {
  manual_seed(7604);
  Decoder lm(DecoderOptions(8, 32, 2, 4).num_kv_heads(2));
  optim::Adam opt(lm.parameters(), optim::AdamOptions(3e-3));
  Tensor sequence = tensor(std::vector<int64_t>{0, 3, 1, 4, 1, 5, 2, 6, 0, 3, 1, 4, 1, 5, 2, 6, 0}, Shape{1, 17});
  Tensor inputs = sequence.narrow(1, 0, 16), targets = sequence.narrow(1, 1, 16).reshape({-1});
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    Tensor loss = nn::functional::cross_entropy(lm.forward(inputs).reshape({-1, 8}), targets);
    if (step == 0) first = loss.item();
    last = loss.item();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  // From about ln 8 = 2.08 at the start; position 5 and 13 (after "1", "4", "1") need more than the last token.
  CHECK(first > 1.5);
  CHECK(last < 0.1);
}

TEST_CASE("the decoder refuses bad options and inputs, naming them") {
  CHECK(contains(error_message([] { Decoder(DecoderOptions(10, 24, 1, 8).num_kv_heads(3)); }),
                 "num_kv_heads 3 must divide num_heads 8"));
  CHECK(contains(error_message([] { Decoder(DecoderOptions(10, 12, 1, 4)); }), "even head_dim"));  // RoPE on d_k = 3
  CHECK(contains(error_message([] { Decoder(DecoderOptions(10, 16, 1, 4).head_dim(5)); }), "even head_dim, got head_dim 5"));
  CHECK(contains(error_message([] { Decoder(DecoderOptions(10, 16, 1, 4).head_dim(-2)); }), "head_dim -2 must be positive"));
  // The decoder's rotary layout is the library's one default, the modules' too.
  CHECK(DecoderOptions(10, 16, 1, 4).rope_layout() == MultiheadAttentionOptions(16, 4).rotary_layout());
  CHECK(RotaryEmbeddingOptions(4).layout() == RotaryLayout::Halves);
  CHECK(contains(error_message([] { Decoder(DecoderOptions(10, 16, 1, 4).window(0)); }), "window 0"));
  CHECK(contains(error_message([] { Decoder(DecoderOptions(0, 16, 1, 4)); }), "vocab_size 0"));
  Decoder lm(DecoderOptions(10, 16, 2, 4));
  CHECK(contains(error_message([&] { lm.forward(zeros({2, 3})); }), "Decoder: tokens [2,3] (float32)"));
  std::vector<KVCache> one(1);
  CHECK(contains(error_message([&] { lm.forward_step(zeros({1, 1}, kInt64), one); }), "1 caches for 2 layers"));
}
