// The fused attention kernel with grouped key/value heads (GQA, MQA), sliding windows, ALiBi and
// a decoding offset, against the materialising path (the reference: scores, bias, softmax),
// outputs and the gradients of q, k and v: lengths spanning several of the kernel's 128 × 256
// tiles, so that the tiles a window or the diagonal excludes are skipped; (h, g) pairs from
// multi-head (g = h) to multi-query (g = 1); gradcheck and gradgradcheck through the fused path;
// the op's fast form against its reference form; and the memory it holds. Both sides sum the
// same float64 products of order-1 values in other groupings, so they agree to rounding, some
// 1e-15 per term over a few hundred terms: 1e-12.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;
using namespace nntest;  // the helpers of nn_helpers.h

namespace {

using BackendGuard = nntest::AttentionBackendGuard;

struct Result {
  Tensor out, dq, dk, dv;
  std::string grad_fn;
};

// Output and gradients of sum(out ⊙ G) on fresh leaves with the given backend.
Result attend(F::AttentionBackend backend, const Tensor& q0, const Tensor& k0, const Tensor& v0,
              const F::AttentionOptions& options, uint64_t seed = 0) {
  BackendGuard guard(backend);
  Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(), v = v0.detach().requires_grad_();
  Generator gen(seed);
  Tensor out = F::scaled_dot_product_attention(q, k, v, options, gen).output;
  const std::string name = out.grad_fn()->name();
  Generator g_gen(99);
  (out * randn(out.shape(), out.dtype(), g_gen)).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad(), name};
}

void check_same(const Result& a, const Result& b, double tolerance = 1e-12) {
  CHECK(max_abs_diff(a.out, b.out) < tolerance);
  CHECK(max_abs_diff(a.dq, b.dq) < tolerance);
  CHECK(max_abs_diff(a.dk, b.dk) < tolerance);
  CHECK(max_abs_diff(a.dv, b.dv) < tolerance);
}

}  // namespace

TEST_CASE("fused grouped attention equals the materialising path: (h, g) pairs, masks, causal, padding, windows, "
          "ALiBi, offsets") {
  const int64_t B = 2, H = 4, d = 8, dv = 5;
  for (const auto& [T, S] : {std::pair<int64_t, int64_t>{150, 300}, {300, 300}}) {
    Tensor q = randn64({B, H, T, d}, 8101);
    Tensor bool_2d = randn64({T, S}, 8102).gt(full({}, 1.0, kFloat64));
    Tensor per_head = randn64({B, H, T, S}, 8103);
    Tensor padding = zeros({B, 1, 1, S}, kBool);
    padding.select(0, 1).narrow(-1, 200, S - 200).fill_(1.0);  // the second sequence has 200 keys
    const Tensor slopes = F::alibi_slopes(H);
    const int64_t offset = S - T;  // the queries are the last T of the S positions, as in decoding
    const std::vector<std::pair<std::string, F::AttentionOptions>> cases{
        {"no mask", F::AttentionOptions()},
        {"bool (T, S)", F::AttentionOptions().attn_mask(bool_2d)},
        {"float (B, H, T, S)", F::AttentionOptions().attn_mask(per_head)},
        {"padding", F::AttentionOptions().attn_mask(padding)},
        {"causal", F::AttentionOptions().is_causal(true)},
        {"causal and padding", F::AttentionOptions().is_causal(true).attn_mask(padding)},
        {"causal with the offset", F::AttentionOptions().is_causal(true).query_offset(offset)},
        {"window 40, not causal", F::AttentionOptions().window(40)},
        {"causal window 40 with the offset", F::AttentionOptions().is_causal(true).window(40).query_offset(offset)},
        {"causal window 300 (wider than a tile)", F::AttentionOptions().is_causal(true).window(300)},
        {"ALiBi", F::AttentionOptions().alibi_slopes(slopes)},
        {"causal ALiBi, window 70, padding, offset",
         F::AttentionOptions().is_causal(true).alibi_slopes(slopes).window(70).attn_mask(padding).query_offset(offset)},
    };
    for (int64_t g : {4, 2, 1}) {
      Tensor k = randn64({B, g, S, d}, 8110 + g), v = randn64({B, g, S, dv}, 8120 + g);
      for (const auto& [name, options] : cases) {
        INFO("T = ", T, ", S = ", S, ", h = ", H, ", g = ", g, ": ", name);
        const F::AttentionOptions grouped = F::AttentionOptions(options).enable_gqa(g != H);
        const Result fused = attend(F::AttentionBackend::Fused, q, k, v, grouped);
        CHECK(fused.grad_fn == "FusedAttentionBackward");  // the fused kernel ran, not a fallback
        check_same(fused, attend(F::AttentionBackend::Materialize, q, k, v, grouped));
      }
    }
  }
}

TEST_CASE("fused grouped attention: h = 6 over g = 3 and 2, dropout draws the materialising path's mask") {
  const int64_t B = 1, H = 6, T = 140, S = 270;
  Tensor q = randn64({B, H, T, 4}, 8130);
  for (int64_t g : {3, 2}) {
    INFO("g = ", g);
    Tensor k = randn64({B, g, S, 4}, 8131), v = randn64({B, g, S, 3}, 8132);
    const auto options = F::AttentionOptions().enable_gqa(true).is_causal(true).window(100).dropout_p(0.2);
    check_same(attend(F::AttentionBackend::Fused, q, k, v, options, 5),
               attend(F::AttentionBackend::Materialize, q, k, v, options, 5));
  }
}

TEST_CASE("fused grouped attention: float32 agrees with float64 to float32 rounding") {
  Tensor q = randn64({1, 8, 300, 16}, 8140), k = randn64({1, 2, 300, 16}, 8141), v = randn64({1, 2, 300, 16}, 8142);
  const auto options = F::AttentionOptions().enable_gqa(true).is_causal(true).window(64).alibi_slopes(F::alibi_slopes(8));
  const Result exact = attend(F::AttentionBackend::Materialize, q, k, v, options);
  const Result single = attend(F::AttentionBackend::Fused, q.to(kFloat32), k.to(kFloat32), v.to(kFloat32), options);
  // Sums of at most ~300 products of order-1 float32 values (dK, dV sum 4 heads of them): a few
  // ulps of 1e-7 each, well under 1e-4.
  check_same(single, exact, 1e-4);
}

TEST_CASE("gradcheck and gradgradcheck the fused path with grouped heads, a window, ALiBi and an offset") {
  BackendGuard fused(F::AttentionBackend::Fused);
  Tensor q = randn64({1, 4, 3, 2}, 8150, true);
  for (int64_t g : {4, 2, 1}) {
    INFO("g = ", g);
    Tensor k = randn64({1, g, 6, 2}, 8151 + g, true), vg = randn64({1, g, 6, 3}, 8155 + g, true);
    auto f = [g](const std::vector<Tensor>& in) {
      return F::scaled_dot_product_attention(in[0], in[1], in[2],
                                             F::AttentionOptions()
                                                 .enable_gqa(g != 4)
                                                 .is_causal(true)
                                                 .window(2)
                                                 .query_offset(3)
                                                 .alibi_slopes(F::alibi_slopes(4)))
          .output;
    };
    CHECK(f({q, k, vg}).grad_fn()->name() == "FusedAttentionBackward");
    CHECK(gradcheck(f, {q, k, vg}));
    CHECK(gradgradcheck(f, {q, k, vg}));
  }
}

TEST_CASE("fused attention op with grouped heads and positions: the fast form equals its reference form") {
  Tensor q = randn64({2, 4, 150, 8}, 8160), k = randn64({2, 2, 270, 8}, 8161), v = randn64({2, 2, 270, 6}, 8162);
  Tensor mask = randn64({150, 270}, 8163).gt(full({}, 1.2, kFloat64));
  const AttentionPositions positions{.query_offset = 120, .window = 90, .alibi_slopes = F::alibi_slopes(4)};
  auto run = [&](bool reference, double dropout) {
    ReferenceModeGuard mode(reference);
    Tensor ql = q.detach().requires_grad_(), kl = k.detach().requires_grad_(), vl = v.detach().requires_grad_();
    Generator gen(7);
    Tensor out = fused_attention(ql, kl, vl, mask, true, 0.3, dropout, gen, positions);
    Generator g_gen(99);
    (out * randn(out.shape(), out.dtype(), g_gen)).sum().backward();
    return Result{out.detach(), ql.grad(), kl.grad(), vl.grad(), ""};
  };
  for (const double dropout : {0.0, 0.25}) {
    INFO("dropout ", dropout);
    check_same(run(false, dropout), run(true, dropout));
  }
  // The reference repeats each key/value head; the op refuses heads that do not group.
  Tensor k3 = randn64({2, 3, 270, 8}, 8164);
  CHECK(nntest::contains(nntest::error_message([&] { fused_attention(q, k3, k3, {}, false, 0.3); }), "[2,3,270,8]"));
}

TEST_CASE("fused grouped attention holds neither the weights nor repeated keys and values") {
  BackendGuard fused(F::AttentionBackend::Fused);
  const int64_t H = 8, g = 2, T = 1024, d = 16;
  Generator gen(8170);
  Tensor q = randn({1, H, T, d}, kFloat32, gen).requires_grad_();
  Tensor k = randn({1, g, T, d}, kFloat32, gen).requires_grad_(), v = randn({1, g, T, d}, kFloat32, gen).requires_grad_();
  reset_peak_allocated();
  const int64_t held = allocator_stats().in_use_bytes;
  F::scaled_dot_product_attention(q, k, v, F::AttentionOptions().enable_gqa(true).is_causal(true)).output.sum().backward();
  const int64_t peak = allocator_stats().peak_bytes - held;
  // One head's (T, S) weights alone are 4 MB in float32, all heads' 33.5 MB; the fused path holds
  // its inputs' sizes (q, the output, their gradients: 0.5 MB each; k, v and theirs 1/4 of that)
  // and a few 128 × 256 tiles per thread.
  INFO("peak of live bytes ", peak);
  CHECK(peak < T * T * 4);
  CHECK(k.grad().shape() == Shape{1, g, T, d});
}

TEST_CASE("cached decoding on the fused path (grouped heads, RoPE, window, ALiBi) equals the materialised full forward") {
  const int64_t E = 16, H = 4, B = 2, L = 9;
  for (int64_t G : {4, 2, 1}) {
    INFO("num_kv_heads = ", G);
    manual_seed(8180);
    nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(E, H).num_kv_heads(G).rotary(true).alibi(true).window(4));
    mha.to(kFloat64);
    mha.eval();
    Tensor x = randn64({B, L, E}, 8181);
    Tensor whole;
    {
      BackendGuard materialize(F::AttentionBackend::Materialize);
      whole = mha.forward(x, x, x, {.need_weights = false, .is_causal = true}).output;
    }
    BackendGuard fused(F::AttentionBackend::Fused);
    nn::KVCache cache;
    std::vector<Tensor> steps{mha.forward_step(x.narrow(1, 0, 4), cache)};  // a prompt of 4, then one at a time
    for (int64_t t = 4; t < L; ++t) steps.push_back(mha.forward_step(x.narrow(1, t, 1), cache));
    CHECK(max_abs_diff(cat(steps, 1), whole) < 1e-12);
    CHECK(max_abs_diff(mha.forward(x, x, x, {.need_weights = false, .is_causal = true}).output, whole) < 1e-12);
  }
}
