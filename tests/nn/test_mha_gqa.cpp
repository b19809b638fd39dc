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

TEST_CASE("num_kv_heads: separate q/k/v weights of the grouped widths, the default is today's layer") {
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

TEST_CASE("head_dim: heads wider or narrower than embed_dim / num_heads, their shapes and their cached decoding") {
  // 8 heads of 4 on 16 features, on 2 key/value heads (wider: 32 query features); 4 heads of 2 (narrower).
  for (auto [H, G, d] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 4}, {4, 4, 2}, {4, 2, 6}}) {
    INFO("heads ", H, ", key/value heads ", G, ", head_dim ", d);
    const int64_t E = 16, B = 2, L = 7;
    MultiheadAttention mha(MultiheadAttentionOptions(E, H).num_kv_heads(G).head_dim(d).rotary(true));
    CHECK(mha.head_dim == d);
    CHECK(mha.options.head_dim() == d);
    CHECK(!mha.in_proj_weight.defined());  // H·d ≠ E: three matrices of their own widths
    CHECK(mha.q_proj_weight.shape() == Shape{H * d, E});
    CHECK(mha.k_proj_weight.shape() == Shape{G * d, E});
    CHECK(mha.v_proj_weight.shape() == Shape{G * d, E});
    CHECK(mha.in_proj_bias.shape() == Shape{H * d + 2 * G * d});
    CHECK(mha.out_proj->weight.shape() == Shape{E, H * d});
    CHECK(contains(mha.extra_repr(), fmt::format("head_dim={}", d)));
    manual_seed(7430);
    mha.reset_parameters();
    mha.to(kFloat64);
    Tensor x = randn64({B, L, E}, 7431);
    AttentionOutput whole = mha.forward(x, x, x, {.need_weights = true, .average_attn_weights = false, .is_causal = true});
    CHECK(whole.output.shape() == Shape{B, L, E});
    CHECK(whole.weights.shape() == Shape{B, H, L, L});
    KVCache cache;
    std::vector<Tensor> steps{mha.forward_step(x.narrow(1, 0, 3), cache)};
    for (int64_t t = 3; t < L; ++t) steps.push_back(mha.forward_step(x.narrow(1, t, 1), cache));
    CHECK(max_abs_diff(cat(steps, 1), whole.output) < 1e-12);
    CHECK(cache.key.shape() == Shape{B, G, L, d});
  }
  // head_dim equal to embed_dim / num_heads is the default layer: one fused matrix, the same names.
  MultiheadAttention same(MultiheadAttentionOptions(16, 4).head_dim(4));
  CHECK(same.in_proj_weight.shape() == Shape{48, 16});
  CHECK(!contains(same.extra_repr(), "head_dim"));
  // A width of its own lifts the need for num_heads to divide embed_dim.
  MultiheadAttention odd(MultiheadAttentionOptions(10, 4).head_dim(6));
  CHECK(odd.q_proj_weight.shape() == Shape{24, 10});
}

TEST_CASE("head_dim scales the scores by 1/sqrt(head_dim): the layer equals its formula written out") {
  const int64_t E = 6, H = 2, G = 1, d = 5, B = 2, T = 3;
  MultiheadAttention mha(MultiheadAttentionOptions(E, H).num_kv_heads(G).head_dim(d));
  manual_seed(7432);
  mha.reset_parameters();
  mha.to(kFloat64);
  {
    NoGradGuard no_grad;
    mha.in_proj_bias.copy_(randn64({H * d + 2 * G * d}, 7433));
  }
  Tensor x = randn64({B, T, E}, 7434);
  Tensor b = mha.in_proj_bias;
  Tensor q = functional::linear(x, mha.q_proj_weight, b.narrow(0, 0, H * d)).reshape({B, T, H, d}).transpose(1, 2);
  Tensor k = functional::linear(x, mha.k_proj_weight, b.narrow(0, H * d, G * d)).reshape({B, T, 1, d}).transpose(1, 2);
  Tensor v = functional::linear(x, mha.v_proj_weight, b.narrow(0, H * d + G * d, G * d)).reshape({B, T, 1, d}).transpose(1, 2);
  Tensor weights = (q.matmul(k.mT()) / std::sqrt(static_cast<double>(d))).softmax(-1);  // (B, H, T, T), k shared
  Tensor heads = weights.matmul(v).transpose(1, 2).reshape({B, T, H * d});
  Tensor want = mha.out_proj->forward(heads);
  CHECK(max_abs_diff(mha.forward(x, x, x, {.need_weights = false}).output, want) < 1e-13);
}

TEST_CASE("gradcheck MultiheadAttention whose head_dim is not embed_dim / num_heads, grouped, rotary, inputs and parameters") {
  MultiheadAttention mha(MultiheadAttentionOptions(8, 4).num_kv_heads(2).head_dim(4).rotary(true));
  mha.to(kFloat64);
  Tensor x = randn64({2, 3, 8}, 7435, true);
  auto f = [&](const std::vector<Tensor>& in) {
    return mha.forward(in[0], in[0], in[0], {.need_weights = false, .is_causal = true}).output;
  };
  CHECK(gradcheck(f, {x, mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight, mha.in_proj_bias, mha.out_proj->weight},
                  nntest::fast()));
  CHECK(gradgradcheck(f, {x, mha.q_proj_weight}, nntest::fast()));
  // Cross-attention with keys and values of other widths, heads narrower than E / H.
  MultiheadAttention cross(MultiheadAttentionOptions(8, 2).kdim(5).vdim(3).head_dim(3));
  cross.to(kFloat64);
  Tensor query = randn64({2, 3, 8}, 7436, true), key = randn64({2, 4, 5}, 7437, true), value = randn64({2, 4, 3}, 7438, true);
  auto g = [&](const std::vector<Tensor>& in) { return cross.forward(in[0], in[1], in[2], {.need_weights = false}).output; };
  CHECK(gradcheck(g, {query, key, value, cross.q_proj_weight, cross.out_proj->weight}, nntest::fast()));
}

TEST_CASE("MultiheadAttention refuses a negative head_dim, an odd one with rotary positions, and says when to give one") {
  std::string msg = error_message([] { MultiheadAttention(MultiheadAttentionOptions(16, 8).head_dim(-4)); });
  CHECK(contains(msg, "MultiheadAttention: head_dim -4 must be positive"));
  msg = error_message([] { MultiheadAttention(MultiheadAttentionOptions(16, 8).head_dim(3).rotary(true)); });
  CHECK(contains(msg, "MultiheadAttention: rotary positions need an even head_dim, got head_dim 3"));
  msg = error_message([] { MultiheadAttention(MultiheadAttentionOptions(10, 4)); });
  CHECK(contains(msg, "embed_dim 10 is not divisible by num_heads 4"));
  CHECK(contains(msg, "or give head_dim"));
}
