// MultiheadAttention with fewer key/value heads (num_kv_heads), rotary positions, a window and
// ALiBi: the parameters' shapes and names, outputs and gradients equal to the multi-head layer
// whose key/value rows are repeated, cached decoding equal to the full causal forward, a KV cache
// of num_kv_heads heads, gradchecks in float64, bad arguments.
#include <doctest/doctest.h>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using namespace nntest;  // the helpers of nn_helpers.h

namespace {

// The rows of a (g·d, ·) projection, or a (g·d) bias, with each head's d rows repeated r times:
// what a multi-head layer needs to compute what the grouped one does.
Tensor repeat_head_rows(const Tensor& w, int64_t heads, int64_t r) {
  std::vector<Tensor> parts;
  for (const Tensor& head : w.chunk(heads, 0))
    for (int64_t i = 0; i < r; ++i) parts.push_back(head);
  return cat(parts, 0);
}

// The sum of the r repeated copies' gradients: (h·d, ·) -> (g·d, ·).
Tensor sum_head_rows(const Tensor& w, int64_t kv_heads, int64_t r) {
  std::vector<Tensor> groups;
  for (const Tensor& group : w.chunk(kv_heads, 0)) {
    auto copies = group.chunk(r, 0);
    Tensor total = copies[0];
    for (int64_t i = 1; i < r; ++i) total = total + copies[i];
    groups.push_back(total);
  }
  return cat(groups, 0);
}

}  // namespace

TEST_CASE("num_kv_heads: separate q/k/v weights of the grouped widths; the default is today's layer") {
  MultiheadAttention plain(MultiheadAttentionOptions(8, 4).num_kv_heads(4));
  CHECK(plain.in_proj_weight.defined());
  CHECK(plain.named_parameters().size() == 4);  // in_proj_weight, in_proj_bias, out_proj.{weight,bias}
  MultiheadAttention gqa(MultiheadAttentionOptions(8, 4).num_kv_heads(2));
  CHECK_FALSE(gqa.in_proj_weight.defined());
  CHECK(gqa.q_proj_weight.shape() == Shape{8, 8});
  CHECK(gqa.k_proj_weight.shape() == Shape{4, 8});  // 2 heads of d_k = 2
  CHECK(gqa.v_proj_weight.shape() == Shape{4, 8});
  CHECK(gqa.in_proj_bias.shape() == Shape{16});
  CHECK(gqa.extra_repr() == "embed_dim=8, num_heads=4, dropout=0, bias=true, num_kv_heads=2");
  MultiheadAttention mqa(MultiheadAttentionOptions(8, 4).num_kv_heads(1).bias(false));
  CHECK(mqa.k_proj_weight.shape() == Shape{2, 8});
  CHECK(mqa.named_parameters().size() == 4);  // q, k, v, out_proj.weight
}

TEST_CASE("grouped-query MultiheadAttention equals the multi-head layer with repeated key/value rows") {
  const int64_t E = 12, H = 6, B = 2, T = 4, S = 5;
  for (int64_t G : {3, 2, 1}) {
    INFO("num_kv_heads = ", G);
    const int64_t r = H / G;
    MultiheadAttention grouped(MultiheadAttentionOptions(E, H).num_kv_heads(G));
    grouped.to(kFloat64);
    {
      NoGradGuard no_grad;
      grouped.in_proj_bias.copy_(randn64({E + 2 * G * (E / H)}, 7400));
    }
    MultiheadAttention full(E, H);
    full.to(kFloat64);
    const int64_t kv = G * (E / H);
    {
      NoGradGuard no_grad;
      full.in_proj_weight.copy_(cat({grouped.q_proj_weight, repeat_head_rows(grouped.k_proj_weight, G, r),
                                     repeat_head_rows(grouped.v_proj_weight, G, r)}, 0));
      full.in_proj_bias.copy_(cat({grouped.in_proj_bias.narrow(0, 0, E),
                                   repeat_head_rows(grouped.in_proj_bias.narrow(0, E, kv), G, r),
                                   repeat_head_rows(grouped.in_proj_bias.narrow(0, E + kv, kv), G, r)}, 0));
      full.out_proj->weight.copy_(grouped.out_proj->weight);
      full.out_proj->bias.copy_(grouped.out_proj->bias);
    }
    Tensor query = randn64({B, T, E}, 7401), memory = randn64({B, S, E}, 7402);
    Tensor padding = zeros({B, S}, kBool);
    padding.select(0, 1).narrow(0, 3, 2).fill_(1.0);
    Tensor G_out = randn64({B, T, E}, 7403);
    auto a = grouped.forward(query, memory, memory, {.key_padding_mask = padding, .average_attn_weights = false});
    auto b = full.forward(query, memory, memory, {.key_padding_mask = padding, .average_attn_weights = false});
    CHECK(max_abs_diff(a.output, b.output) < 1e-12);
    CHECK(max_abs_diff(a.weights, b.weights) < 1e-12);  // (B, H, T, S): per query head
    (a.output * G_out).sum().backward();
    (b.output * G_out).sum().backward();
    Tensor full_grad = full.in_proj_weight.grad();
    CHECK(max_abs_diff(grouped.q_proj_weight.grad(), full_grad.narrow(0, 0, E)) < 1e-12);
    CHECK(max_abs_diff(grouped.k_proj_weight.grad(), sum_head_rows(full_grad.narrow(0, E, E), G, r)) < 1e-12);
    CHECK(max_abs_diff(grouped.v_proj_weight.grad(), sum_head_rows(full_grad.narrow(0, 2 * E, E), G, r)) < 1e-12);
    CHECK(max_abs_diff(grouped.out_proj->weight.grad(), full.out_proj->weight.grad()) < 1e-12);
  }
}

TEST_CASE("cached decoding with grouped heads, rotary positions, a window and ALiBi equals the full causal forward") {
  const int64_t E = 16, H = 4, B = 2, L = 9;
  for (auto layout : {RotaryLayout::Interleaved, RotaryLayout::Halves}) {
    for (int64_t G : {4, 2, 1}) {
      INFO("num_kv_heads = ", G);
      auto options = MultiheadAttentionOptions(E, H).num_kv_heads(G).rotary(true).rotary_layout(layout);
      for (auto extra : {MultiheadAttentionOptions(options), MultiheadAttentionOptions(options).window(3),
                         MultiheadAttentionOptions(options).alibi(true).window(4)}) {
        manual_seed(7410);
        MultiheadAttention mha(extra);
        mha.to(kFloat64);
        mha.eval();
        Tensor x = randn64({B, L, E}, 7411);
        Tensor whole = mha.forward(x, x, x, {.need_weights = false, .is_causal = true}).output;
        KVCache cache;
        std::vector<Tensor> steps{mha.forward_step(x.narrow(1, 0, 4), cache)};  // a prompt of 4, then one at a time
        for (int64_t t = 4; t < L; ++t) steps.push_back(mha.forward_step(x.narrow(1, t, 1), cache));
        CHECK(max_abs_diff(cat(steps, 1), whole) < 1e-12);
        CHECK(cache.key.shape() == Shape{B, G, L, E / H});  // num_heads / G times fewer bytes than H heads
      }
    }
  }
}

TEST_CASE("gradcheck grouped-query MultiheadAttention with rotary positions, inputs and parameters") {
  MultiheadAttention mha(MultiheadAttentionOptions(8, 4).num_kv_heads(2).rotary(true).alibi(true));
  mha.to(kFloat64);
  Tensor x = randn64({2, 3, 8}, 7420, true);
  auto f = [&](const std::vector<Tensor>& in) {
    return mha.forward(in[0], in[0], in[0], {.need_weights = false, .is_causal = true}).output;
  };
  CHECK(gradcheck(f, {x, mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight, mha.in_proj_bias}, nntest::fast()));
  CHECK(gradgradcheck(f, {x, mha.k_proj_weight}, nntest::fast()));
}

TEST_CASE("MultiheadAttention refuses key/value heads that do not divide the heads, odd rotary dims, window 0") {
  std::string msg = error_message([] { MultiheadAttention(MultiheadAttentionOptions(24, 8).num_kv_heads(3)); });
  CHECK(contains(msg, "MultiheadAttention: num_kv_heads 3 must divide num_heads 8"));
  msg = error_message([] { MultiheadAttention(MultiheadAttentionOptions(12, 4).rotary(true)); });
  CHECK(contains(msg, "even head_dim"));
  CHECK(contains(msg, "= 3"));
  msg = error_message([] { MultiheadAttention(MultiheadAttentionOptions(8, 2).window(0)); });
  CHECK(contains(msg, "window 0"));
  MultiheadAttention mha(MultiheadAttentionOptions(8, 4).num_kv_heads(2));
  KVCache cache;
  cache.key = zeros({1, 4, 3, 2});  // a cache of another layer's 4 heads
  cache.value = zeros({1, 4, 3, 2});
  CHECK(contains(error_message([&] { mha.forward_step(zeros({1, 1, 8}), cache); }), "[1,4,3,2]"));
}
