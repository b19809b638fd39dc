// Sampling the next token: top-k and nucleus filtering on hand-made scores, temperature 0 as
// argmax, frequencies of the draws against the filtered softmax, seeds, shapes and errors.
//
// Frequencies come from N = 40000 draws: each has standard deviation √(p(1 - p)/N) ≤ 0.0025, and
// the tests allow 0.015 (six of them), so a correct sampler fails a check with probability about
// 2e-9 while a wrong filter moves a share by 0.1 or more. Seeds are fixed: the result never varies.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;
using V = std::vector<double>;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// log of the probabilities, in a shuffled order: p = 0.05, 0.5, 0.15, 0.3 at ids 0..3
Tensor scores() { return tensor({std::log(0.05), std::log(0.5), std::log(0.15), std::log(0.3)}, kFloat64); }

std::vector<double> shares(const Tensor& ids, int64_t vocab) {
  std::vector<double> share(static_cast<size_t>(vocab), 0.0);
  const std::vector<double> all = nntest::values(ids);
  for (double id : all) share[static_cast<size_t>(id)] += 1.0 / static_cast<double>(all.size());
  return share;
}

void expect_shares(const std::vector<double>& got, const std::vector<double>& expected) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got[i] - expected[i]) < 0.015);
  }
}
}  // namespace

TEST_CASE("sampling: top-k keeps the k highest scores (ties with the k-th too), top-p the nucleus") {
  Tensor s = scores();
  const double l05 = std::log(0.05), l5 = std::log(0.5), l15 = std::log(0.15), l3 = std::log(0.3);
  CHECK(nntest::values(F::top_k_top_p_filter(s, 2, 1.0)) == V{-kInf, l5, -kInf, l3});
  CHECK(nntest::values(F::top_k_top_p_filter(s, 0, 1.0)) == V{l05, l5, l15, l3});
  CHECK(nntest::values(F::top_k_top_p_filter(s, 9, 1.0)) == V{l05, l5, l15, l3});  // k past the vocabulary: all
  CHECK(nntest::values(F::top_k_top_p_filter(tensor({1.0, 3.0, 3.0, 2.0}), 1, 1.0)) == V{-kInf, 3, 3, -kInf});
  // nucleus: 0.5 alone is below 0.75, 0.5 + 0.3 reaches it; 0.8 + 0.15 reaches 0.9; top_p 0 keeps one
  CHECK(nntest::values(F::top_k_top_p_filter(s, 0, 0.75)) == V{-kInf, l5, -kInf, l3});
  CHECK(nntest::values(F::top_k_top_p_filter(s, 0, 0.9)) == V{-kInf, l5, l15, l3});
  CHECK(nntest::values(F::top_k_top_p_filter(s, 0, 0.0)) == V{-kInf, l5, -kInf, -kInf});
  // after top-k, the nucleus is taken of what is left (renormalised: 0.5/0.95 + 0.3/0.95 ≥ 0.8)
  CHECK(nntest::values(F::top_k_top_p_filter(s, 3, 0.8)) == V{-kInf, l5, -kInf, l3});
  // rows of a batch on their own: the second row is the first reversed
  Tensor batch = stack({s, s.index_select(0, tensor(std::vector<int64_t>{3, 2, 1, 0}, {4}))});
  CHECK(nntest::values(F::top_k_top_p_filter(batch, 0, 0.75)) == V{-kInf, l5, -kInf, l3, l3, -kInf, l5, -kInf});
  CHECK(nntest::values(F::top_k_top_p_filter(batch, 1, 1.0)) == V{-kInf, l5, -kInf, -kInf, -kInf, -kInf, l5, -kInf});
}

TEST_CASE("sampling: the draws follow the filtered softmax at the temperature, temperature 0 is argmax") {
  Generator gen(2750);
  constexpr int64_t kDraws = 40000;
  Tensor s = scores();
  Tensor many = s.unsqueeze(0).expand({kDraws, 4});  // kDraws rows, one draw each
  Tensor ids = F::sample_next_token(many, {}, gen);
  CHECK(ids.shape() == Shape{kDraws, 1});
  CHECK(ids.dtype() == kInt64);
  expect_shares(shares(ids, 4), {0.05, 0.5, 0.15, 0.3});
  // top-k 2: 0.5 and 0.3 renormalised
  expect_shares(shares(F::sample_next_token(many, F::SamplingOptions().top_k(2), gen), 4), {0, 0.625, 0, 0.375});
  // temperature 2: p^(1/2) renormalised (√0.05, √0.5, √0.15, √0.3 over their sum)
  std::vector<double> flat = {std::sqrt(0.05), std::sqrt(0.5), std::sqrt(0.15), std::sqrt(0.3)};
  double total = 0;
  for (double f : flat) total += f;
  for (double& f : flat) f /= total;
  expect_shares(shares(F::sample_next_token(many, F::SamplingOptions().temperature(2.0), gen), 4), flat);
  // nucleus 0.9 with top-k 3 and temperature 1 in float32: 0.5, 0.3, 0.15 renormalised
  Tensor ids32 = F::sample_next_token(many.to(kFloat32), F::SamplingOptions().top_k(3).top_p(0.9), gen);
  expect_shares(shares(ids32, 4), {0, 0.5 / 0.95, 0.15 / 0.95, 0.3 / 0.95});
  // temperature 0: the highest score, the first of equal ones, and no draw from the generator
  Generator before = gen;
  Tensor greedy = F::sample_next_token(tensor({{1.0, 4.0, 4.0}, {2.0, 0.0, 1.0}}), F::SamplingOptions().temperature(0), gen);
  CHECK(greedy.shape() == Shape{2, 1});
  CHECK(nntest::values(greedy) == V{1, 0});
  CHECK(gen.next_u64() == before.next_u64());
  CHECK(F::sample_next_token(s, F::SamplingOptions().temperature(0)).shape() == Shape{1});
}

TEST_CASE("sampling: the same seed draws the same tokens, no graph is recorded") {
  Generator a(2751), b(2751);
  Tensor logits = randn({3, 50}, TensorOptions(kFloat64).requires_grad());
  const auto options = F::SamplingOptions().temperature(0.7).top_k(20).top_p(0.9);
  Tensor first = F::sample_next_token(logits, options, a);
  CHECK(nntest::values(first) == nntest::values(F::sample_next_token(logits, options, b)));
  CHECK_FALSE(first.requires_grad());
}

TEST_CASE("errors: sampling options and logits that do not fit") {
  Tensor s = scores();
  CHECK(nntest::error_message([&] { F::sample_next_token(s, F::SamplingOptions().temperature(-1)); }) ==
        "sample_next_token: temperature must be finite and at least 0, got -1");
  CHECK(nntest::error_message([&] { F::sample_next_token(s, F::SamplingOptions().top_p(1.5)); }) ==
        "top_k_top_p_filter: top_p must be in [0, 1], got 1.5");
  CHECK(nntest::error_message([&] { F::top_k_top_p_filter(s, -2, 1.0); }) ==
        "top_k_top_p_filter: top_k must be 0 (all) or positive, got -2");
  CHECK(nntest::error_message([&] { F::sample_next_token(zeros({2, 3, 4})); }) ==
        "sample_next_token: expected logits of shape (vocab) or (batch, vocab), got [2,3,4]");
  CHECK(nntest::error_message([&] { F::sample_next_token(arange(4)); }) ==
        "sample_next_token: expected floating logits, got int64");
  CHECK(nntest::error_message([&] { F::top_k_top_p_filter(zeros({2, 0}), 0, 1.0); }) ==
        "top_k_top_p_filter: logits of shape [2,0] have no token to keep");
  // a row with no finite score has nothing to draw from
  CHECK(nntest::contains(nntest::error_message([&] { F::sample_next_token(full({3}, -kInf, kFloat64)); }),
                         "multinomial: row 0 of weights (shape [3]) sums to 0"));
}
