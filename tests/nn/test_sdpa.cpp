// scaled_dot_product_attention against a plain-arithmetic reference: no mask, bool mask
// (true = masked out), float mask (added), is_causal, a custom scale, the weights; a fully
// masked row gives zeros and zero gradients; then gradchecks for each mask kind.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;
using namespace nntest;  // the helpers of nn_helpers.h

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// A call that returns the weights always materialises them; one that does not may take the fused
// kernel (CPPGRAD_TEST_ATTENTION=fused), whose sums are grouped otherwise: ulps of order-1 values.
constexpr double kAcrossPaths = 1e-14;

// softmax(q kᵀ · scale + mask) v for one (T, d) × (S, d) × (S, dv) slice, with plain loops.
// mask holds T·S additive values (0 or -inf for a bool mask). A row with no finite score
// gives zero weights.
struct Reference {
  std::vector<double> output, weights;
};
Reference attend(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                 int64_t T, int64_t S, int64_t d, int64_t dv, double scale, const std::vector<double>& mask) {
  Reference r{std::vector<double>(T * dv, 0.0), std::vector<double>(T * S, 0.0)};
  for (int64_t i = 0; i < T; ++i) {
    std::vector<double> score(S);
    double top = -kInf;
    for (int64_t j = 0; j < S; ++j) {
      double dot = 0.0;
      for (int64_t c = 0; c < d; ++c) dot += q[i * d + c] * k[j * d + c];
      score[j] = dot * scale + (mask.empty() ? 0.0 : mask[i * S + j]);
      top = std::max(top, score[j]);
    }
    if (top == -kInf) continue;  // every key masked
    double total = 0.0;
    for (int64_t j = 0; j < S; ++j) total += std::exp(score[j] - top);
    for (int64_t j = 0; j < S; ++j) {
      double w = std::exp(score[j] - top) / total;
      r.weights[i * S + j] = w;
      for (int64_t c = 0; c < dv; ++c) r.output[i * dv + c] += w * v[j * dv + c];
    }
  }
  return r;
}

// Compares the batched result with the reference run on every (T, d) slice.
void check_against_reference(const Tensor& q, const Tensor& k, const Tensor& v, const F::AttentionOutput& got,
                             double scale, const std::vector<double>& mask) {
  const int64_t T = q.size(-2), S = k.size(-2), d = q.size(-1), dv = v.size(-1);
  const int64_t batch = q.numel() / (T * d);
  std::vector<double> qs = values(q), ks = values(k), vs = values(v);
  std::vector<double> out = values(got.output), w = values(got.weights);
  for (int64_t b = 0; b < batch; ++b) {
    Reference r = attend({qs.begin() + b * T * d, qs.begin() + (b + 1) * T * d},
                         {ks.begin() + b * S * d, ks.begin() + (b + 1) * S * d},
                         {vs.begin() + b * S * dv, vs.begin() + (b + 1) * S * dv}, T, S, d, dv, scale, mask);
    for (int64_t i = 0; i < T * dv; ++i) CHECK(out[b * T * dv + i] == doctest::Approx(r.output[i]).epsilon(1e-12));
    for (int64_t i = 0; i < T * S; ++i) CHECK(w[b * T * S + i] == doctest::Approx(r.weights[i]).epsilon(1e-12));
  }
}

// Shapes used throughout: 2 batches × 2 heads, T = 3 queries, S = 4 keys, d = 2, dv = 3.
struct Qkv {
  Tensor q = randn64({2, 2, 3, 2}, 31, true);
  Tensor k = randn64({2, 2, 4, 2}, 32, true);
  Tensor v = randn64({2, 2, 4, 3}, 33, true);
};

// The (3, 4) bool mask used below, as a Tensor and as additive values.
const std::vector<double> kBoolMask{0, 1, 0, 1,  //
                                    0, 0, 0, 1,  //
                                    1, 1, 0, 0};
Tensor bool_mask() { return nntest::bool_mask({{0, 1, 0, 1}, {0, 0, 0, 1}, {1, 1, 0, 0}}); }
std::vector<double> additive(const std::vector<double>& bits) {
  std::vector<double> out;
  for (double b : bits) out.push_back(b != 0.0 ? -kInf : 0.0);
  return out;
}

}  // namespace

TEST_CASE("sdpa without a mask matches the reference and returns weights on request") {
  Qkv in;
  auto out = F::scaled_dot_product_attention(in.q, in.k, in.v, {}, 0.0, false, std::nullopt, /*need_weights=*/true);
  CHECK(out.output.shape() == Shape{2, 2, 3, 3});
  CHECK(out.weights.shape() == Shape{2, 2, 3, 4});
  check_against_reference(in.q, in.k, in.v, out, 1.0 / std::sqrt(2.0), {});
  // Each row of weights sums to 1.
  for (double s : values(out.weights.sum({-1}))) CHECK(s == doctest::Approx(1.0).epsilon(1e-14));
  // Without need_weights only the output comes back.
  auto plain = F::scaled_dot_product_attention(in.q, in.k, in.v);
  CHECK_FALSE(plain.weights.defined());
  CHECK(max_abs_diff(plain.output, out.output) < kAcrossPaths);
}

TEST_CASE("sdpa with a custom scale") {
  Qkv in;
  auto out = F::scaled_dot_product_attention(in.q, in.k, in.v, {}, 0.0, false, 0.3, true);
  check_against_reference(in.q, in.k, in.v, out, 0.3, {});
  // scale 0: uniform weights, so the output is the mean of the values.
  auto flat = F::scaled_dot_product_attention(in.q, in.k, in.v, {}, 0.0, false, 0.0, true);
  for (double w : values(flat.weights)) CHECK(w == doctest::Approx(0.25));
  CHECK(max_abs_diff(flat.output, in.v.mean({-2}, true).expand({2, 2, 3, 3})) < 1e-14);
}

TEST_CASE("sdpa bool mask hides the true positions") {
  Qkv in;
  auto out = F::scaled_dot_product_attention(in.q, in.k, in.v, bool_mask(), 0.0, false, std::nullopt, true);
  check_against_reference(in.q, in.k, in.v, out, 1.0 / std::sqrt(2.0), additive(kBoolMask));
  std::vector<double> w = values(out.weights);
  for (size_t i = 0; i < w.size(); ++i)
    if (kBoolMask[i % 12] != 0.0) CHECK(w[i] == 0.0);
  // A per-batch (2, 1, 3, 4) mask broadcasts over the heads.
  Tensor per_batch = stack({bool_mask(), zeros({3, 4}, kBool)}).unsqueeze(1);
  auto mixed = F::scaled_dot_product_attention(in.q, in.k, in.v, per_batch, 0.0, false, std::nullopt, true);
  auto unmasked = F::scaled_dot_product_attention(in.q, in.k, in.v, {}, 0.0, false, std::nullopt, true);
  CHECK(max_abs_diff(mixed.output.select(0, 0), out.output.select(0, 0)) == 0.0);
  CHECK(max_abs_diff(mixed.output.select(0, 1), unmasked.output.select(0, 1)) == 0.0);
}

TEST_CASE("sdpa float mask is added to the scores") {
  Qkv in;
  std::vector<double> bias{0.5, -1, 0, 2, -3, 0, 1, 0.25, 0, 0, -0.5, 1.5};
  Tensor mask = tensor(bias, {3, 4});
  auto out = F::scaled_dot_product_attention(in.q, in.k, in.v, mask, 0.0, false, std::nullopt, true);
  check_against_reference(in.q, in.k, in.v, out, 1.0 / std::sqrt(2.0), bias);
  // A float32 mask on float64 scores works the same (the values are exact in float32).
  auto out32 = F::scaled_dot_product_attention(in.q, in.k, in.v, mask.to(kFloat32), 0.0, false, std::nullopt, true);
  CHECK(max_abs_diff(out32.output, out.output) == 0.0);
  // -inf in a float mask hides the position like true in a bool mask.
  auto as_float = F::scaled_dot_product_attention(in.q, in.k, in.v, tensor(additive(kBoolMask), {3, 4}), 0.0, false,
                                                  std::nullopt, true);
  auto as_bool = F::scaled_dot_product_attention(in.q, in.k, in.v, bool_mask(), 0.0, false, std::nullopt, true);
  CHECK(max_abs_diff(as_float.output, as_bool.output) == 0.0);
}

TEST_CASE("sdpa is_causal lets query i see keys up to i") {
  Tensor q = randn64({2, 4, 3}, 34), k = randn64({2, 4, 3}, 35), v = randn64({2, 4, 2}, 36);
  auto out = F::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt, true);
  std::vector<double> causal(16, 0.0);
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) causal[i * 4 + j] = -kInf;
  check_against_reference(q, k, v, out, 1.0 / std::sqrt(3.0), causal);
  // The first query sees only the first key: its output is v[0].
  CHECK(max_abs_diff(out.output.select(1, 0), v.select(1, 0)) < 1e-15);
  // The same as the float mask generate_square_subsequent_mask gives.
  Tensor m = F::generate_square_subsequent_mask(4, kFloat64);
  auto masked = F::scaled_dot_product_attention(q, k, v, m);
  CHECK(max_abs_diff(masked.output, out.output) < kAcrossPaths);
  // Combined with a bool mask, both apply.
  Tensor hide_first = nntest::bool_mask({{0, 0, 0, 0}, {1, 0, 0, 0}, {1, 0, 0, 0}, {1, 0, 0, 0}});
  auto both = F::scaled_dot_product_attention(q, k, v, hide_first, 0.0, true, std::nullopt, true);
  for (int i = 1; i < 4; ++i) causal[i * 4] = -kInf;
  check_against_reference(q, k, v, both, 1.0 / std::sqrt(3.0), causal);
}

TEST_CASE("sdpa fully masked row gives zero output and zero finite gradients") {
  Qkv in;
  Tensor mask = nntest::bool_mask({{0, 1, 0, 0}, {1, 1, 1, 1}, {0, 0, 0, 1}});  // query 1 sees nothing
  auto out = F::scaled_dot_product_attention(in.q, in.k, in.v, mask, 0.0, false, std::nullopt, true);
  CHECK(nntest::all_finite(out.output));
  CHECK(values(out.output.select(2, 1)) == std::vector<double>(2 * 2 * 3, 0.0));
  CHECK(values(out.weights.select(2, 1)) == std::vector<double>(2 * 2 * 4, 0.0));
  Tensor G = randn64({2, 2, 3, 3}, 37);
  (out.output * G).sum().backward();
  for (const Tensor& t : {in.q, in.k, in.v}) CHECK(nntest::all_finite(t.grad()));
  CHECK(values(in.q.grad().select(2, 1)) == std::vector<double>(2 * 2 * 2, 0.0));
  // The other rows are still right.
  std::vector<double> bits{0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1};
  check_against_reference(in.q, in.k, in.v, out, 1.0 / std::sqrt(2.0), additive(bits));
  // A float mask with a row of -inf behaves the same way.
  auto via_float = F::scaled_dot_product_attention(in.q, in.k, in.v, tensor(additive(bits), {3, 4}));
  CHECK(max_abs_diff(via_float.output, out.output) < kAcrossPaths);
}

TEST_CASE("sdpa dropout on the weights is seeded and scaled") {
  Qkv in;
  Generator g1(7), g2(7);
  auto a = F::scaled_dot_product_attention(in.q, in.k, in.v, {}, 0.5, false, std::nullopt, true, g1);
  auto b = F::scaled_dot_product_attention(in.q, in.k, in.v, {}, 0.5, false, std::nullopt, true, g2);
  CHECK(max_abs_diff(a.output, b.output) == 0.0);
  auto clean = F::scaled_dot_product_attention(in.q, in.k, in.v, {}, 0.0, false, std::nullopt, true);
  // Each weight is either dropped or doubled; the output uses those weights.
  std::vector<double> dropped = values(a.weights), kept = values(clean.weights);
  int zeros_seen = 0;
  for (size_t i = 0; i < dropped.size(); ++i) {
    if (dropped[i] == 0.0)
      ++zeros_seen;
    else
      CHECK(dropped[i] == doctest::Approx(2 * kept[i]).epsilon(1e-14));
  }
  CHECK(zeros_seen > 0);
  CHECK(zeros_seen < static_cast<int>(dropped.size()));
  CHECK(max_abs_diff(a.output, a.weights.matmul(in.v)) < 1e-15);
}

TEST_CASE("sdpa shape errors name the op and the shapes") {
  Tensor q = zeros({2, 3, 4}, kFloat64), k = zeros({2, 5, 3}, kFloat64), v = zeros({2, 5, 4}, kFloat64);
  std::string msg = error_message([&] { F::scaled_dot_product_attention(q, k, v); });
  CHECK(contains(msg, "scaled_dot_product_attention"));
  CHECK(contains(msg, "[2,3,4]"));
  CHECK(contains(msg, "[2,5,3]"));
  Tensor k_ok = zeros({2, 5, 4}, kFloat64);
  CHECK(contains(error_message([&] { F::scaled_dot_product_attention(q, k_ok, v, zeros({3, 4}, kBool)); }),
                 "scaled_dot_product_attention"));
}

TEST_CASE("gradcheck sdpa with each mask kind") {
  Tensor q = randn64({2, 3, 2}, 41, true), k = randn64({2, 4, 2}, 42, true), v = randn64({2, 4, 3}, 43, true);
  auto check_with = [&](const Tensor& mask, bool causal, std::optional<double> scale = std::nullopt) {
    return gradcheck(
        [&](const std::vector<Tensor>& in) {
          return F::scaled_dot_product_attention(in[0], in[1], in[2], mask, 0.0, causal, scale).output;
        },
        {q, k, v});
  };
  CHECK(check_with({}, false));
  CHECK(check_with({}, false, 0.7));
  CHECK(check_with(bool_mask(), false));
  CHECK(check_with(tensor({{0.5, -1, 0, 2}, {-3, 0, 1, 0.25}, {0, 0, -0.5, 1.5}}, kFloat64), false));
  CHECK(check_with({}, true));
  Tensor fully_masked = nntest::bool_mask({{0, 1, 0, 0}, {1, 1, 1, 1}, {0, 0, 0, 1}});
  CHECK(check_with(fully_masked, false));
  CHECK(check_with(fully_masked, true));
  // The weights are differentiable too.
  CHECK(gradcheck(
      [&](const std::vector<Tensor>& in) {
        return F::scaled_dot_product_attention(in[0], in[1], in[2], fully_masked, 0.0, false, std::nullopt, true)
            .weights;
      },
      {q, k, v}));
}
