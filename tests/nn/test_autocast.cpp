// Autocast through the layers (tensor/autocast.h): gradients are float32 and land on float32
// parameters, the backward's products run in bfloat16 wherever backward() is called, both
// attention paths are autocast, and float64 (gradcheck) is untouched.
#include <doctest/doctest.h>

#include "cppgrad.h"
#include "nn_helpers.h"
#include "tensor/autocast_cache.h"
#include "tensor/kernels/fast/attention.h"

using namespace cppgrad;
using namespace cppgrad::nn;
namespace F = cppgrad::nn::functional;

namespace {

// bfloat16's products on every CPU: on one without bfloat16 instructions autocast multiplies in
// float32 (autocast::Kernel::Float32), so these tests ask for the float32 GEMM on rounded inputs,
// whose products are a bfloat16 kernel's.
struct BFloat16Products {
  BFloat16Products() {
    if (autocast::kernel() == autocast::Kernel::Float32) autocast::set_kernel(autocast::Kernel::RoundedFloat32);
  }
  ~BFloat16Products() { autocast::set_kernel(autocast::Kernel::Auto); }
};

Tensor rounded64(const Tensor& x) { return x.detach().to(kBFloat16).to(kFloat64); }

// Linear(24, 16) on (5, 24) inputs, its loss a weighted sum so that dY is not exact in bfloat16.
struct LinearCase {
  Generator gen{21};
  std::shared_ptr<Linear> layer = std::make_shared<Linear>(24, 16);
  Tensor x = randn({5, 24}, kFloat32, gen);
  Tensor dy = randn({5, 16}, kFloat32, gen);
  Tensor loss(const Tensor& y) const { return (y * dy).sum(); }
};

}  // namespace

TEST_CASE("autocast: Linear's gradients are float32 on float32 weights, from bfloat16 backward products") {
  BFloat16Products bf16_products;
  LinearCase c;
  Tensor loss;
  {
    autocast::Guard bf16(kBFloat16);
    loss = c.loss(c.layer->forward(c.x));
  }
  loss.backward();  // after the region: the recorded products still run in bfloat16
  const Tensor& w = c.layer->weight;
  CHECK(w.dtype() == kFloat32);
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(c.layer->bias.grad().dtype() == kFloat32);
  // dW = dYᵀ·X with both rounded; the bound of tests/tensor/test_autocast.cpp (k = 5 rows).
  Tensor exact = rounded64(c.dy).transpose(0, 1).matmul(rounded64(c.x));
  Tensor bound = rounded64(c.dy).abs().transpose(0, 1).matmul(rounded64(c.x).abs()) * (5 * 0x1p-24) + 1e-30;
  CHECK(((w.grad().to(kFloat64) - exact).abs() / bound).max().item() <= 1.0);
  // The bias's gradient is a sum, not a product: float32, unrounded.
  CHECK(nntest::max_abs_diff(c.layer->bias.grad(), c.dy.sum(0)) < 1e-6);
  // Not the float32 gradient: the rounding of dY and X shows (by ~2^-9 of the terms).
  CHECK(nntest::max_abs_diff(w.grad(), c.dy.transpose(0, 1).matmul(c.x)) > 1e-4);
}

TEST_CASE("autocast: a backward inside the region leaves a forward made outside it in float32") {
  BFloat16Products bf16_products;
  LinearCase a, b;
  a.loss(a.layer->forward(a.x)).backward();
  Tensor loss = b.loss(b.layer->forward(b.x));
  {
    autocast::Guard bf16(kBFloat16);
    loss.backward();
  }
  // The same ops on the same values, on the same path: the same bits.
  CHECK(a.layer->weight.grad().to_vector<float>() == b.layer->weight.grad().to_vector<float>());
  CHECK(a.layer->bias.grad().to_vector<float>() == b.layer->bias.grad().to_vector<float>());
}

TEST_CASE("autocast: float64 is never autocast, so gradcheck inside a region checks exact derivatives") {
  BFloat16Products bf16_products;
  Generator gen(22);
  Tensor x = randn({3, 4}, kFloat64, gen).requires_grad_(), w = randn({5, 4}, kFloat64, gen).requires_grad_();
  Tensor q = randn({2, 3, 4}, kFloat64, gen).requires_grad_();
  autocast::Guard bf16(kBFloat16);
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return F::linear(in[0], in[1]); }, {x, w}));
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return in[0].matmul(in[0].transpose(1, 2)); }, {q}));
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return F::scaled_dot_product_attention(in[0], in[0], in[0]).output; },
                  {q}));
}

TEST_CASE("autocast: both attention paths multiply in bfloat16, and give float32") {
  BFloat16Products bf16_products;
  Generator gen(23);
  Tensor q = randn({2, 3, 40, 16}, kFloat32, gen), k = randn({2, 3, 40, 16}, kFloat32, gen),
         v = randn({2, 3, 40, 16}, kFloat32, gen);
  const F::AttentionBackend saved = F::attention_backend();
  for (F::AttentionBackend backend : {F::AttentionBackend::Materialize, F::AttentionBackend::Fused}) {
    CAPTURE(static_cast<int>(backend));
    F::set_attention_backend(backend);
    const Tensor full = F::scaled_dot_product_attention(q, k, v, F::AttentionOptions().is_causal(true)).output;
    Tensor qg = q.clone().requires_grad_(), out;
    {
      autocast::Guard bf16(kBFloat16);
      out = F::scaled_dot_product_attention(qg, k, v, F::AttentionOptions().is_causal(true)).output;
    }
    CHECK(out.dtype() == kFloat32);
    // bfloat16 keeps 8 bits (relative step 2^-8 ≈ 0.004) of Q, K, the weights and V; the outputs,
    // averages of O(1) values, move by a few of those steps, never by 0.05.
    const double moved = nntest::max_abs_diff(out, full);
    CHECK(moved < 0.05);
    CHECK(moved > 1e-4);  // it was autocast: float32 on both paths agrees to ~1e-6
    out.sum().backward();
    CHECK(qg.grad().dtype() == kFloat32);
    CHECK(nntest::all_finite(qg.grad()));
  }
  F::set_attention_backend(saved);
}

TEST_CASE("autocast: Adam's step keeps float32 master weights") {
  BFloat16Products bf16_products;
  LinearCase c;
  optim::Adam opt(c.layer->parameters(), optim::AdamOptions(1e-2));
  const std::vector<float> before = c.layer->weight.to_vector<float>();
  for (int step = 0; step < 3; ++step) {
    Tensor loss;
    {
      autocast::Guard bf16(kBFloat16);
      loss = c.loss(c.layer->forward(c.x));
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  for (const Tensor& p : c.layer->parameters()) CHECK(p.dtype() == kFloat32);
  // The update is float32: a weight moves by about lr·3 = 0.03, changes no bfloat16 would hold
  // exactly, so the weights are not all bfloat16 values.
  const std::vector<float> after = c.layer->weight.to_vector<float>();
  CHECK(after != before);
  int64_t off_grid = 0;
  for (float w : after) off_grid += round_to_bfloat16(w) != w;
  CHECK(off_grid > static_cast<int64_t>(after.size()) / 2);
}

// The cast cache (tensor/autocast_cache.h), counted on the float32 GEMM on rounded inputs, whose
// rounding is the bfloat16 kernel's, so the counts hold on every CPU.
struct RoundedFloat32Products {
  RoundedFloat32Products() { autocast::set_kernel(autocast::Kernel::RoundedFloat32); }
  ~RoundedFloat32Products() { autocast::set_kernel(autocast::Kernel::Auto); }
};

TEST_CASE("autocast: the cast cache rounds each operand once per region, for its forward and backward products") {
  RoundedFloat32Products rounded_products;
  LinearCase c;
  optim::SGD opt(c.layer->parameters(), optim::SGDOptions(0.1));
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    Tensor x = c.x.detach();
    x.requires_grad_(true);
    autocast::reset_cast_stats();
    Tensor loss;
    {
      autocast::Guard bf16(kBFloat16);  // a new region: the step before changed the weight
      loss = c.loss(c.layer->forward(x));
    }
    opt.zero_grad();
    loss.backward();
    // Forward y = X·Wᵀ rounds X and W; the backward's dX = dY·W and dW = dYᵀ·X round dY once and
    // take W, X and dY's second use from the cache.
    const autocast::CastStats s = autocast::cast_stats();
    CHECK(s.products == 3);
    CHECK(s.rounded == 3);
    CHECK(s.hits == 3);
    CHECK(s.bytes_rounded == (5 * 24 + 16 * 24 + 5 * 16) * 4);  // held as float32 by this kernel
    // The same gradients as without the cache: the products of the rounded operands.
    Tensor exact = rounded64(c.dy).matmul(rounded64(c.layer->weight));
    Tensor bound = rounded64(c.dy).abs().matmul(rounded64(c.layer->weight).abs()) * (16 * 0x1p-24) + 1e-30;
    CHECK(((x.grad().to(kFloat64) - exact).abs() / bound).max().item() <= 1.0);
    opt.step();
  }
}

TEST_CASE("autocast: the cast cache rounds a weight written in place again, and a tied weight once") {
  RoundedFloat32Products rounded_products;
  LinearCase c;
  autocast::Guard bf16(kBFloat16);
  autocast::reset_cast_stats();
  const Tensor& w = c.layer->weight;
  Tensor first = F::linear(c.x, w);
  Tensor tied = c.x.matmul(w.t());  // the same operand as stored: taken from the cache
  CHECK(autocast::cast_stats().rounded == 2);
  CHECK(autocast::cast_stats().hits == 2);
  CHECK(first.to_vector<float>() == tied.to_vector<float>());
  {
    NoGradGuard no_grad;
    w.detach().mul_(2.0);  // bumps the storage's version: the cached copy is stale
  }
  Tensor second = F::linear(c.x, w);
  CHECK(autocast::cast_stats().rounded == 3);  // W again; X from the cache
  CHECK(nntest::max_abs_diff(second, first * 2.0) < 1e-6);  // doubling is exact in bfloat16
}

// The fused attention rounds its inputs once a call and each computed tile (P, dS) once for the
// products that read it. At T = S = 300 the tiles are 3 query blocks by 2 key blocks (128 × 256).
// Forward: 2 products a tile, q, k, v and P rounded. Backward: 5 products a tile, q, k, v, dO and
// each tile's P and dS rounded. check_attention_rounding's `tiles` and `area` are the tiles
// computed and their elements, all heads together.
namespace {
struct AttentionRounding {
  autocast::CastStats forward, backward;
};
AttentionRounding attention_rounding(int64_t heads, int64_t T, int64_t d, bool causal) {
  Generator gen(31);
  Tensor q = randn({1, heads, T, d}, kFloat32, gen).requires_grad_(), k = randn({1, heads, T, d}, kFloat32, gen),
         v = randn({1, heads, T, d}, kFloat32, gen);
  Tensor out;
  autocast::reset_cast_stats();
  {
    autocast::Guard bf16(kBFloat16);
    out = F::scaled_dot_product_attention(q, k, v, F::AttentionOptions().is_causal(causal)).output;
  }
  AttentionRounding r;
  r.forward = autocast::cast_stats();
  autocast::reset_cast_stats();
  Generator g_gen(32);
  (out * randn(out.shape(), kFloat32, g_gen)).sum().backward();
  r.backward = autocast::cast_stats();
  return r;
}
void check_attention_rounding(const AttentionRounding& r, int64_t heads, int64_t T, int64_t d, int64_t tiles,
                              int64_t area) {
  const int64_t inputs_bytes = 3 * heads * T * d * 4, weights_bytes = area * 4;  // held as float32 by this kernel
  CHECK(r.forward.products == 2 * tiles);
  CHECK(r.forward.rounded == 3 + tiles);
  CHECK(r.forward.bytes_rounded == inputs_bytes + weights_bytes);
  CHECK(r.backward.products == 5 * tiles);
  CHECK(r.backward.rounded == 1 + 2 * tiles);  // dO, and the tiles: q, k and v are the forward's
  CHECK(r.backward.bytes_rounded == inputs_bytes / 3 + 2 * weights_bytes);
}
}  // namespace

TEST_CASE("autocast: the fused attention rounds q, k, v once a step (its backward takes the forward's copies), dO "
          "once, and each computed tile once") {
  RoundedFloat32Products rounded_products;
  nntest::AttentionBackendGuard fused(F::AttentionBackend::Fused);
  const int64_t heads = 2, T = 300, d = 8;
  check_attention_rounding(attention_rounding(heads, T, d, false), heads, T, d, heads * 3 * 2, heads * T * T);
}

// Causal, a tile holds only the keys its query block may see, in the backward as in the forward:
// queries 0-127 see keys 0-127, 128-255 keys 0-255 (one tile each), 256-299 keys 0-299 (two
// tiles, 256 and 44 keys wide). Nothing above the block's last query's key is computed or rounded.
TEST_CASE("autocast: the causal fused attention computes and rounds only the tiles' visible keys, backward as "
          "forward") {
  RoundedFloat32Products rounded_products;
  nntest::AttentionBackendGuard fused(F::AttentionBackend::Fused);
  const int64_t heads = 2, T = 300, d = 8;
  const int64_t area = heads * (128 * 128 + 128 * 256 + 44 * (256 + 44));
  check_attention_rounding(attention_rounding(heads, T, d, true), heads, T, d, heads * 4, area);
}

TEST_CASE("autocast: the fused attention's backward gives the same bits from the forward's rounded q, k, v as "
          "from its own") {
  namespace fk = kernels::fast;
  for (const autocast::Kernel kernel : {autocast::Kernel::RoundedFloat32, autocast::Kernel::Auto}) {
    autocast::set_kernel(kernel);
    CAPTURE(autocast::kernel_name(autocast::kernel()));
    Generator gen(33);
    // GQA (4 query heads on 2 key/value heads), causal, q strided as a projection's heads.
    Tensor q = randn({2, 70, 4, 16}, kFloat32, gen).transpose(1, 2), k = randn({2, 2, 70, 16}, kFloat32, gen),
           v = randn({2, 2, 70, 16}, kFloat32, gen), g = randn({2, 4, 70, 16}, kFloat32, gen);
    autocast::Guard bf16(kBFloat16);
    const fk::FusedAttention r = fk::fused_attention(q, k, v, Tensor(), true, 0.25);
    // Auto is oneDNN's bfloat16 where the CPU has the instructions, else the float32 product,
    // which rounds nothing.
    const bool rounds = autocast::kernel() != autocast::Kernel::Float32;
    CHECK(r.rounded.q.defined() == rounds);
    CHECK(r.rounded.v.defined() == rounds);
    const fk::FusedAttentionGrads given =
        fk::fused_attention_backward(g, q, k, v, Tensor(), r.output, r.lse, true, 0.25, {}, {}, r.rounded);
    const fk::FusedAttentionGrads own = fk::fused_attention_backward(g, q, k, v, Tensor(), r.output, r.lse, true, 0.25);
    CHECK(nntest::max_abs_diff(given.dq, own.dq) == 0.0);
    CHECK(nntest::max_abs_diff(given.dk, own.dk) == 0.0);
    CHECK(nntest::max_abs_diff(given.dv, own.dv) == 0.0);
  }
  autocast::set_kernel(autocast::Kernel::Auto);
}
