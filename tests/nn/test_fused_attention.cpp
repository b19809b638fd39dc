// The fused (FlashAttention-style) attention against the materialising path: the same outputs
// and gradients for every mask kind, lengths that are not multiples of the block sizes (128
// queries by 256 keys: the lengths here span one block and several),
// causal blocks skipped, fully masked rows, dropout on the weights (the same counter-based
// mask), float32; gradcheck and gradgradcheck through it. Both paths sum the same products in
// different groupings, so they agree to rounding: 1e-12 in float64 with values of order 1.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../common/check.h"
#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;
using cppgrad::check::max_abs_diff;  // NaN-safe: a NaN anywhere is an infinite difference

namespace {

using BackendGuard = nntest::AttentionBackendGuard;


struct Result {
  Tensor out, dq, dk, dv;
};

// Output and gradients of sum(out ⊙ G) with the given backend, on fresh leaves.
Result attend(F::AttentionBackend backend, const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& mask,
              bool causal, double dropout = 0.0, uint64_t seed = 0) {
  BackendGuard guard(backend);
  Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(), v = v0.detach().requires_grad_();
  Generator gen(seed);
  Tensor out = F::scaled_dot_product_attention(q, k, v, mask, dropout, causal, std::nullopt, false, gen).output;
  Generator g_gen(99);
  Tensor G = randn(out.shape(), out.dtype(), g_gen);
  (out * G).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void check_same(const Result& a, const Result& b, double tolerance) {
  CHECK(max_abs_diff(a.out, b.out) < tolerance);
  CHECK(max_abs_diff(a.dq, b.dq) < tolerance);
  CHECK(max_abs_diff(a.dk, b.dk) < tolerance);
  CHECK(max_abs_diff(a.dv, b.dv) < tolerance);
}

}  // namespace

TEST_CASE("fused attention equals the materialising path for every mask kind, T and S not multiples of the blocks") {
  for (const auto& [T, S] : {std::pair<int64_t, int64_t>{70, 90}, {300, 530}}) {
    INFO("T = ", T, ", S = ", S);
    const int64_t B = 2, H = 3, d = 8;
    Generator gen(1);
    Tensor q = randn({B, H, T, d}, kFloat64, gen), k = randn({B, H, S, d}, kFloat64, gen);
    Tensor v = randn({B, H, S, 5}, kFloat64, gen);
    Tensor bool_2d = rand({T, S}, kFloat64, gen).lt(full({}, 0.3, kFloat64));
    Tensor float_2d = randn({T, S}, kFloat64, gen);
    Tensor bool_4d = rand({B, H, T, S}, kFloat64, gen).lt(full({}, 0.3, kFloat64));
    Tensor padding = zeros({B, 1, 1, S}, kBool);
    padding.select(0, 1).narrow(-1, 60, S - 60).fill_(1.0);  // the second sequence has 60 keys
    Tensor float_pad = zeros({B, 1, 1, S}, kFloat64).masked_fill(padding, -INFINITY);
    const std::vector<std::pair<std::string, Tensor>> masks{
        {"none", Tensor()},         {"bool (T, S)", bool_2d},   {"float (T, S)", float_2d},
        {"bool (B, H, T, S)", bool_4d}, {"bool key padding (B, 1, 1, S)", padding}, {"float key padding", float_pad}};
    for (const auto& [name, mask] : masks) {
      INFO("mask: ", name);
      check_same(attend(F::AttentionBackend::Fused, q, k, v, mask, false),
                 attend(F::AttentionBackend::Materialize, q, k, v, mask, false), 1e-12);
    }
  }
}

TEST_CASE("fused attention: causal (blocks above the diagonal skipped), alone and with padding") {
  Generator gen(2);
  for (int64_t T : {1, 63, 64, 65, 130, 300, 530}) {
    INFO("T = ", T);
    Tensor q = randn({2, 2, T, 4}, kFloat64, gen), k = randn({2, 2, T, 4}, kFloat64, gen);
    Tensor v = randn({2, 2, T, 4}, kFloat64, gen);
    check_same(attend(F::AttentionBackend::Fused, q, k, v, {}, true),
               attend(F::AttentionBackend::Materialize, q, k, v, {}, true), 1e-12);
    Tensor padding = zeros({2, 1, 1, T}, kBool);
    padding.select(0, 0).narrow(-1, 0, 1).fill_(1.0);  // key 0 hidden: query 0 of batch 0 sees nothing
    const Result fused = attend(F::AttentionBackend::Fused, q, k, v, padding, true);
    check_same(fused, attend(F::AttentionBackend::Materialize, q, k, v, padding, true), 1e-12);
    // The fully hidden row: zeros out, finite gradients.
    CHECK(max_abs_diff(fused.out.select(0, 0).narrow(-2, 0, 1), zeros({2, 1, 4}, kFloat64)) == 0.0);
    CHECK(max_abs_diff(fused.dq, fused.dq) == 0.0);  // no NaN anywhere
  }
}

TEST_CASE("fused attention: dropout draws the materialising path's mask from the same generator state") {
  Generator gen(3);
  Tensor q = randn({2, 2, 170, 8}, kFloat64, gen), k = randn({2, 2, 280, 8}, kFloat64, gen);
  Tensor v = randn({2, 2, 280, 8}, kFloat64, gen);
  check_same(attend(F::AttentionBackend::Fused, q, k, v, {}, false, 0.3, 5),
             attend(F::AttentionBackend::Materialize, q, k, v, {}, false, 0.3, 5), 1e-12);
  check_same(attend(F::AttentionBackend::Fused, q, k, v, {}, false, 0.3, 5),
             attend(F::AttentionBackend::Fused, q, k, v, {}, false, 0.3, 5), 0.0 + 1e-300);  // reproducible
}

TEST_CASE("fused attention: float32 agrees with float64 to float32 rounding") {
  Generator gen(4);
  Tensor q = randn({1, 2, 300, 16}, kFloat64, gen), k = randn({1, 2, 300, 16}, kFloat64, gen);
  Tensor v = randn({1, 2, 300, 16}, kFloat64, gen);
  const Result exact = attend(F::AttentionBackend::Materialize, q, k, v, {}, true);
  const Result single = attend(F::AttentionBackend::Fused, q.to(kFloat32), k.to(kFloat32), v.to(kFloat32), {}, true);
  // Sums of ~300 products of order-1 float32 values (and exp to 2 ulp): a few ulps of 1e-7 each, well under 1e-4.
  check_same(single, exact, 1e-4);
}

TEST_CASE("fused attention: a NaN score row stays NaN") {
  BackendGuard fused(F::AttentionBackend::Fused);
  Tensor q = ones({1, 3, 2}, kFloat64), k = ones({1, 4, 2}, kFloat64), v = ones({1, 4, 2}, kFloat64);
  q.select(1, 1).fill_(NAN);
  Tensor out = F::scaled_dot_product_attention(q, k, v).output;
  const std::vector<double> got = out.contiguous().to_vector<double>();
  CHECK(got[0] == 1.0);
  CHECK(std::isnan(got[2]));
  CHECK(got[4] == 1.0);
}

TEST_CASE("fused attention: its forward and backward are profile rows of their own, not 'outside kernels'") {
  BackendGuard fused(F::AttentionBackend::Fused);
  const bool was_enabled = profile::enabled();
  Generator gen(3);
  Tensor q = randn({2, 8, 4}, kFloat32, gen).requires_grad_(), k = randn({2, 8, 4}, kFloat32, gen);
  profile::set_enabled(true);
  profile::reset();
  F::scaled_dot_product_attention(q, k, k).output.sum().backward();
  int64_t forward_calls = 0, backward_calls = 0;
  for (const profile::Entry& e : profile::entries()) {
    if (e.name == "fused_attention") forward_calls = e.calls;
    if (e.name == "fused_attention_backward") backward_calls = e.calls;
  }
  profile::set_enabled(was_enabled);
  CHECK(forward_calls == 1);
  CHECK(backward_calls == 1);
}

TEST_CASE("fused attention: gradcheck and gradgradcheck (the second derivative through differentiable ops)") {
  BackendGuard fused(F::AttentionBackend::Fused);
  Generator gen(5);
  Tensor q = randn({2, 5, 3}, kFloat64, gen).requires_grad_(), k = randn({2, 7, 3}, kFloat64, gen).requires_grad_();
  Tensor v = randn({2, 7, 4}, kFloat64, gen).requires_grad_();
  Tensor mask = rand({5, 7}, kFloat64, gen).lt(full({}, 0.2, kFloat64));
  auto fn = [&](const std::vector<Tensor>& in) {
    return F::scaled_dot_product_attention(in[0], in[1], in[2], mask).output;
  };
  auto causal = [&](const std::vector<Tensor>& in) {
    return F::scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.0, true).output;
  };
  CHECK(fn({q, k, v}).grad_fn()->name() == "FusedAttentionBackward");
  CHECK(gradcheck(fn, {q, k, v}));
  CHECK(gradgradcheck(fn, {q, k, v}));
  CHECK(gradcheck(causal, {q, k, v}));
  CHECK(gradgradcheck(causal, {q, k, v}));
}

TEST_CASE("fused attention: Auto fuses long sequences only, and the weights always materialise") {
  ReferenceModeGuard fast_forms(false);
  BackendGuard automatic(F::AttentionBackend::Auto);
  Tensor small = randn({1, 8, 4}).requires_grad_();
  CHECK(F::scaled_dot_product_attention(small, small, small).output.grad_fn()->name() != "FusedAttentionBackward");
  Tensor large = randn({1, 300, 4}).requires_grad_();
  CHECK(F::scaled_dot_product_attention(large, large, large).output.grad_fn()->name() == "FusedAttentionBackward");
  BackendGuard fused(F::AttentionBackend::Fused);
  auto with_weights = F::scaled_dot_product_attention(small, small, small, {}, 0.0, false, std::nullopt, true);
  CHECK(with_weights.weights.defined());
}

// The op itself, cppgrad::fused_attention, in its two forms: the fused kernel, and in reference
// mode the materialising formula (autograd/ops_attention.cpp). Same inputs, same dropout key.
namespace {
Result attention_op(bool reference, const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& mask,
                    bool causal, double dropout) {
  ReferenceModeGuard mode(reference);
  Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(), v = v0.detach().requires_grad_();
  Generator gen(7);
  Tensor out = fused_attention(q, k, v, mask, causal, 0.3, dropout, gen);
  Generator g_gen(99);
  (out * randn(out.shape(), out.dtype(), g_gen)).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}
}  // namespace

TEST_CASE("fused attention op: the fast form equals its reference, values and gradients, with dropout") {
  Generator gen(8);
  Tensor q = randn({2, 2, 150, 8}, kFloat64, gen), k = randn({2, 2, 270, 8}, kFloat64, gen);
  Tensor v = randn({2, 2, 270, 6}, kFloat64, gen);
  Tensor mask = rand({150, 270}, kFloat64, gen).lt(full({}, 0.2, kFloat64));
  for (const double dropout : {0.0, 0.25}) {
    INFO("dropout ", dropout);
    const Result reference = attention_op(true, q, k, v, mask, true, dropout);
    // Both forms sum the same float64 products of order-1 values in different groupings: they
    // differ by rounding, some 1e-15 per term over ~270 terms, far under 1e-12.
    check_same(attention_op(false, q, k, v, mask, true, dropout), reference, 1e-12);
  }
  {
    ReferenceModeGuard reference(true);
    Tensor leaf = q.detach().requires_grad_();
    CHECK(fused_attention(leaf, k, v, mask, false, 0.3).grad_fn()->name() == "MatmulBackward");
    // Auto would fuse 300 x 300 scores (as the case above shows); reference mode materialises them.
    BackendGuard automatic(F::AttentionBackend::Auto);
    Tensor large = randn({1, 300, 4}, kFloat64, gen).requires_grad_();
    CHECK(F::scaled_dot_product_attention(large, large, large).output.grad_fn()->name() == "MatmulBackward");
  }
}

// Self-attention's q, k and v are views of one projection (B, T, (h + 2g)·d) split into heads:
// the kernel reads them there, at a row stride of (h + 2g)·d, and writes its output with the
// heads inside positions, as (B, T, h, d), so that merging the heads needs no copy. A mask that
// is a window into a larger one (an offset of its own) is read from that offset.
TEST_CASE("fused attention reads a projection's heads in place and writes the output in their layout") {
  const int64_t B = 2, T = 150, h = 4, g = 2, d = 8;
  Generator gen(7);
  Tensor projection = randn({B, T, (h + 2 * g) * d}, kFloat64, gen);
  auto heads = [&](int64_t first, int64_t count) {  // (B, T, count·d) -> (B, count, T, d), a view
    return projection.narrow(2, first * d, count * d).reshape({B, T, count, d}).transpose(1, 2);
  };
  Tensor q = heads(0, h), k = heads(h, g), v = heads(h + g, g);
  REQUIRE_FALSE(q.is_contiguous());
  Tensor larger = randn({T + 9, T + 20}, kFloat64, gen);
  Tensor window_mask = larger.narrow(0, 5, T).narrow(1, 11, T);  // offset 5·(T + 20) + 11
  REQUIRE(window_mask.offset() > 0);
  for (const bool causal : {false, true}) {
    for (const double dropout : {0.0, 0.2}) {
      INFO("causal ", causal, ", dropout ", dropout);
      auto run = [&](F::AttentionBackend backend, const Tensor& q0, const Tensor& k0, const Tensor& v0) {
        BackendGuard guard(backend);
        Tensor ql = q0.detach().requires_grad_(), kl = k0.detach().requires_grad_(), vl = v0.detach().requires_grad_();
        Generator drop_gen(5);
        const auto options =
            F::AttentionOptions().attn_mask(window_mask).is_causal(causal).enable_gqa(true).dropout_p(dropout);
        Tensor out = F::scaled_dot_product_attention(ql, kl, vl, options, drop_gen).output;
        Generator g_gen(99);
        (out * randn(out.shape(), out.dtype(), g_gen)).sum().backward();
        return Result{out.detach(), ql.grad(), kl.grad(), vl.grad()};
      };
      const Result in_place = run(F::AttentionBackend::Fused, q, k, v);
      check_same(in_place, run(F::AttentionBackend::Materialize, q, k, v), 1e-12);
      check_same(in_place, run(F::AttentionBackend::Fused, q.contiguous(), k.contiguous(), v.contiguous()), 1e-12);
      CHECK(in_place.out.transpose(1, 2).is_contiguous());  // (B, T, h, d) in memory: merging the heads is a view
    }
  }
}

TEST_CASE("fused attention refuses operands that do not fit, as scaled_dot_product_attention does") {
  auto refused = [](const std::function<void()>& f, const std::string& phrase) {
    CHECK_THROWS_WITH_AS(f(), doctest::Contains(phrase.c_str()), Error);
  };
  // Once: BLAS printed "parameter number 8 had an illegal value" and a result came back; a v of
  // one key was read past its end.
  refused([] { fused_attention(randn({1, 3, 8}), randn({1, 5, 2}), randn({1, 5, 2}), Tensor(), false, 1.0); },
          "q [1,3,8], k [1,5,2], v [1,5,2] do not fit");
  refused([] { fused_attention(randn({1, 64, 16}), randn({1, 512, 16}), randn({1, 1, 16}), Tensor(), false, 1.0); },
          "do not fit");
  refused([] { fused_attention(randn({2, 4, 8, 16}), randn({3, 4, 8, 16}), randn({3, 4, 8, 16}), Tensor(), false, 1.0); },
          "the leading dims must be equal");
  refused([] { fused_attention(randn({1, 6, 8, 16}), randn({1, 4, 8, 16}), randn({1, 4, 8, 16}), Tensor(), false, 1.0); },
          "heads (dim -3) dividing q's");
  refused([] { fused_attention(randn({1, 8, 4}), randn({1, 8, 4}, kFloat64), randn({1, 8, 4}), Tensor(), false, 1.0); },
          "must share a floating dtype");
  for (double p : {2.0, -1.0, std::nan("")})
    refused([p] { fused_attention(randn({1, 8, 4}), randn({1, 8, 4}), randn({1, 8, 4}), Tensor(), false, 1.0, p); },
            "dropout_p");
  refused([] { fused_attention(randn({1, 8, 4}), randn({1, 8, 4}), randn({1, 8, 4}), ones({7, 8}, kBool), false, 1.0); },
          "fused_attention (mask)");
  // A decoding offset whose positions overflow (UBSan once) or pass float64's exact integers.
  F::AttentionOptions far = F::AttentionOptions().is_causal(true).query_offset(std::numeric_limits<int64_t>::max());
  refused([&] { F::scaled_dot_product_attention(randn({1, 2, 4}), randn({1, 2, 4}), randn({1, 2, 4}), far); },
          "query_offset 9223372036854775807 must be in [0, 2^53 - 2]");
}
