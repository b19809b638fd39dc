// Grouped-query and multi-query attention in scaled_dot_product_attention (enable_gqa), the
// sliding window, ALiBi and the decoding offset: each against the plain computation it stands
// for (keys and values repeated with repeat_interleave's order, an explicit mask, an explicit
// bias), on both attention paths; gradcheck and gradgradcheck in float64; bad arguments.
// The two sides sum the same products in other groupings: 1e-12 in float64 with values of
// order 1.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;
using namespace nntest;  // the helpers of nn_helpers.h

namespace {

struct BackendGuard {
  explicit BackendGuard(F::AttentionBackend b) : previous(F::attention_backend()) { F::set_attention_backend(b); }
  ~BackendGuard() { F::set_attention_backend(previous); }
  F::AttentionBackend previous;
};

struct Result {
  Tensor out, dq, dk, dv;
};

// Output and gradients of sum(out ⊙ G) on fresh leaves; `prepare_kv` turns the key/value
// leaves into what attention reads (the repeat, for the plain side).
template <class Prepare>
Result attend(F::AttentionBackend backend, const Tensor& q0, const Tensor& k0, const Tensor& v0,
              const F::AttentionOptions& options, Prepare prepare_kv) {
  BackendGuard guard(backend);
  Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(), v = v0.detach().requires_grad_();
  Tensor out = F::scaled_dot_product_attention(q, prepare_kv(k), prepare_kv(v), options).output;
  Tensor G = randn64(out.shape(), 99);
  (out * G).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void check_same(const Result& a, const Result& b, double tolerance = 1e-12) {
  CHECK(max_abs_diff(a.out, b.out) < tolerance);
  CHECK(max_abs_diff(a.dq, b.dq) < tolerance);
  CHECK(max_abs_diff(a.dk, b.dk) < tolerance);
  CHECK(max_abs_diff(a.dv, b.dv) < tolerance);
}

// torch.repeat_interleave(x, r, dim=-3): head j of (..., g, S, d) becomes heads j·r .. j·r + r − 1.
Tensor repeat_heads(const Tensor& x, int64_t r) {
  std::vector<int64_t> index;
  for (int64_t j = 0; j < x.size(-3); ++j)
    for (int64_t i = 0; i < r; ++i) index.push_back(j);
  return x.index_select(-3, tensor(index, Shape{static_cast<int64_t>(index.size())}));
}

const F::AttentionBackend kBackends[] = {F::AttentionBackend::Materialize, F::AttentionBackend::Fused};

}  // namespace

TEST_CASE("enable_gqa equals attention on keys and values repeated with repeat_interleave, on both paths") {
  const int64_t B = 2, H = 4, T = 5, S = 7, d = 6, dv = 3;
  Tensor q = randn64({B, H, T, d}, 7301);
  Tensor bool_2d = randn64({T, S}, 7302).gt(full({}, 0.5, kFloat64));
  bool_2d.narrow(1, 0, 1).fill_(0.0);  // key 0 stays visible
  Tensor per_head = randn64({B, H, T, S}, 7303);  // a float mask of every query head
  Tensor padding = zeros({B, 1, 1, S}, kBool);
  padding.select(0, 1).narrow(-1, 4, 3).fill_(1.0);
  for (int64_t g : {4, 2, 1}) {
    Tensor k = randn64({B, g, S, d}, 7304 + g), v = randn64({B, g, S, dv}, 7310 + g);
    const int64_t r = H / g;
    for (auto backend : kBackends) {
      const std::vector<std::pair<std::string, F::AttentionOptions>> cases{
          {"no mask", F::AttentionOptions()},
          {"bool (T, S)", F::AttentionOptions().attn_mask(bool_2d)},
          {"float (B, H, T, S)", F::AttentionOptions().attn_mask(per_head)},
          {"padding (B, 1, 1, S)", F::AttentionOptions().attn_mask(padding)},
          {"causal", F::AttentionOptions().is_causal(true)},
          {"causal and padding", F::AttentionOptions().is_causal(true).attn_mask(padding)},
      };
      for (const auto& [name, options] : cases) {
        INFO("g = ", g, ", fused = ", backend == F::AttentionBackend::Fused, ", ", name);
        Result grouped = attend(backend, q, k, v, F::AttentionOptions(options).enable_gqa(true),
                                [](const Tensor& t) { return t; });
        Result repeated = attend(F::AttentionBackend::Materialize, q, k, v, options,
                                 [r](const Tensor& t) { return repeat_heads(t, r); });
        check_same(grouped, repeated);
      }
    }
  }
  // The weights, when asked for, are per query head: (B, H, T, S).
  Tensor k = randn64({B, 2, S, d}, 7320), v = randn64({B, 2, S, dv}, 7321);
  auto with_weights = F::scaled_dot_product_attention(q, k, v, F::AttentionOptions().enable_gqa(true).need_weights(true));
  auto plain = F::scaled_dot_product_attention(q, repeat_heads(k, 2), repeat_heads(v, 2),
                                               F::AttentionOptions().need_weights(true));
  CHECK(with_weights.weights.shape() == Shape{B, H, T, S});
  CHECK(max_abs_diff(with_weights.weights, plain.weights) < 1e-14);
}

TEST_CASE("gradcheck and gradgradcheck grouped-query attention on both paths") {
  Tensor q = randn64({1, 4, 3, 2}, 7330, true), k = randn64({1, 2, 4, 2}, 7331, true);
  Tensor v = randn64({1, 2, 4, 3}, 7332, true);
  for (auto backend : kBackends) {
    BackendGuard guard(backend);
    INFO("fused = ", backend == F::AttentionBackend::Fused);
    auto f = [](const std::vector<Tensor>& in) {
      return F::scaled_dot_product_attention(in[0], in[1], in[2], F::AttentionOptions().enable_gqa(true).is_causal(true))
          .output;
    };
    CHECK(gradcheck(f, {q, k, v}));
    CHECK(gradgradcheck(f, {q, k, v}));
  }
}

TEST_CASE("a sliding window equals its explicit mask, causal or not, on both paths") {
  const int64_t T = 9, d = 4;
  Tensor q = randn64({2, 3, T, d}, 7340), k = randn64({2, 3, T, d}, 7341), v = randn64({2, 3, T, d}, 7342);
  for (int64_t window : {1, 3, 20}) {
    for (bool causal : {true, false}) {
      Tensor hidden = zeros({T, T}, kBool);  // |i − j| ≥ window, and j > i when causal
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j)
          if (std::abs(i - j) >= window || (causal && j > i)) hidden.select(0, i).select(0, j).fill_(1.0);
      Result explicit_mask = attend(F::AttentionBackend::Materialize, q, k, v, F::AttentionOptions().attn_mask(hidden),
                                    [](const Tensor& t) { return t; });
      for (auto backend : kBackends) {
        INFO("window ", window, ", causal ", causal, ", fused ", backend == F::AttentionBackend::Fused);
        check_same(attend(backend, q, k, v, F::AttentionOptions().window(window).is_causal(causal),
                          [](const Tensor& t) { return t; }),
                   explicit_mask);
      }
    }
  }
}

TEST_CASE("ALiBi adds minus slope times distance to each head's scores, the paper's slopes") {
  // 8 heads: 1/2, 1/4, ..., 1/256. 6 heads: those of 4 (1/4, 1/16, 1/64, 1/256), then the
  // 1st and 3rd of 8's (1/2, 1/8).
  nntest::check_values(F::alibi_slopes(8), {0.5, 0.25, 0.125, 0.0625, 1.0 / 32, 1.0 / 64, 1.0 / 128, 1.0 / 256});
  nntest::check_values(F::alibi_slopes(6), {0.25, 1.0 / 16, 1.0 / 64, 1.0 / 256, 0.5, 0.125});
  const int64_t H = 4, T = 6, S = 6, d = 4;
  Tensor q = randn64({2, H, T, d}, 7350), k = randn64({2, H, S, d}, 7351), v = randn64({2, H, S, d}, 7352);
  Tensor slopes = F::alibi_slopes(H);
  Tensor bias = zeros({H, T, S}, kFloat64);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < S; ++j)
        bias.select(0, h).select(0, i).select(0, j).fill_(-slopes.select(0, h).item<double>() * std::abs(double(i - j)));
  for (bool causal : {true, false}) {
    Result explicit_bias = attend(F::AttentionBackend::Materialize, q, k, v,
                                  F::AttentionOptions().attn_mask(bias).is_causal(causal),
                                  [](const Tensor& t) { return t; });
    for (auto backend : kBackends) {
      INFO("causal ", causal, ", fused ", backend == F::AttentionBackend::Fused);
      check_same(attend(backend, q, k, v, F::AttentionOptions().alibi_slopes(slopes).is_causal(causal),
                        [](const Tensor& t) { return t; }),
                 explicit_bias);
    }
  }
}

TEST_CASE("query_offset: the last rows of a causal window with ALiBi, as cached decoding computes them") {
  const int64_t T = 10, tail = 3, d = 4;
  Tensor q = randn64({1, 2, T, d}, 7360), k = randn64({1, 1, T, d}, 7361), v = randn64({1, 1, T, d}, 7362);
  auto whole_options = F::AttentionOptions().is_causal(true).window(4).alibi_slopes(F::alibi_slopes(2)).enable_gqa(true);
  Tensor whole = F::scaled_dot_product_attention(q, k, v, whole_options).output;
  for (auto backend : kBackends) {
    BackendGuard guard(backend);
    Tensor last = F::scaled_dot_product_attention(q.narrow(2, T - tail, tail), k, v,
                                                  F::AttentionOptions(whole_options).query_offset(T - tail))
                      .output;
    CHECK(max_abs_diff(last, whole.narrow(2, T - tail, tail)) < 1e-14);
  }
}

TEST_CASE("gradcheck and gradgradcheck attention with a window, ALiBi and an offset") {
  Tensor q = randn64({1, 2, 3, 2}, 7370, true), k = randn64({1, 1, 5, 2}, 7371, true);
  Tensor v = randn64({1, 1, 5, 2}, 7372, true);
  for (auto backend : kBackends) {
    BackendGuard guard(backend);
    auto f = [](const std::vector<Tensor>& in) {
      return F::scaled_dot_product_attention(
                 in[0], in[1], in[2],
                 F::AttentionOptions().enable_gqa(true).is_causal(true).window(2).query_offset(2).alibi_slopes(
                     F::alibi_slopes(2)))
          .output;
    };
    CHECK(gradcheck(f, {q, k, v}));
    CHECK(gradgradcheck(f, {q, k, v}));
  }
}

TEST_CASE("scaled_dot_product_attention refuses heads that do not group, a window of 0, bad slopes") {
  Tensor q = zeros({1, 6, 2, 4}, kFloat64), k = zeros({1, 4, 2, 4}, kFloat64);
  std::string msg = error_message([&] { F::scaled_dot_product_attention(q, k, k, F::AttentionOptions().enable_gqa(true)); });
  CHECK(contains(msg, "scaled_dot_product_attention: enable_gqa"));
  CHECK(contains(msg, "6 heads"));
  CHECK(contains(msg, "[1,4,2,4]"));
  // Without enable_gqa, different head counts are refused with the hint.
  CHECK(contains(error_message([&] { F::scaled_dot_product_attention(q, k, k); }), "6 heads and k [1,4,2,4] has 4"));
  msg = error_message([&] { F::scaled_dot_product_attention(q, q, q, F::AttentionOptions().window(0)); });
  CHECK(contains(msg, "window 0"));
  msg = error_message(
      [&] { F::scaled_dot_product_attention(q, q, q, F::AttentionOptions().alibi_slopes(F::alibi_slopes(4))); });
  CHECK(contains(msg, "alibi_slopes [4]"));
  CHECK(contains(msg, "6 query heads"));
  CHECK(contains(error_message([&] { F::scaled_dot_product_attention(q, q, q, F::AttentionOptions().query_offset(-1)); }),
                 "query_offset -1"));
  CHECK(contains(error_message([] { F::alibi_slopes(0); }), "alibi_slopes: num_heads 0"));
}
