// Lesson 5: why does attention give NaN?
//
// Three ways the softmax inside attention goes wrong, each measured here:
//   1. A query whose every key is masked has a row of scores that are all -inf. The textbook
//      stable softmax subtracts the row's maximum, -inf, and -inf - (-inf) is NaN; without the
//      subtraction, Σ exp(-inf) = 0 and 0/0 is NaN. One such row makes the whole gradient of the
//      values NaN, since every value vector receives gradient from every query's row.
//   2. Large scores (1e4) overflow exp: exp(1e4) = inf, inf/inf = NaN. Subtracting the row's
//      maximum first keeps every exponent ≤ 0 and the result exact.
//   3. Not NaN, but its cousin: without the 1/√d_k scale, q·k has standard deviation √d_k, the
//      softmax saturates (nearly one-hot), and the gradient through it nearly vanishes.
// cppgrad's softmax subtracts the maximum and treats an all -inf row as all zeros, so
// scaled_dot_product_attention returns zeros and finite gradients for a fully masked query.
#include <fmt/core.h>

#include <cmath>
#include <limits>

#include "lessons/lessons.h"
#include "lessons/measure.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace lessons {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// softmax over the last dim as first written: exp(s) / Σ exp(s), nothing subtracted.
Tensor softmax_unshifted(const Tensor& s) {
  Tensor e = s.exp();
  return e / e.sum({-1}, /*keepdim=*/true);
}

// The textbook stable softmax: subtract the row maximum first. Fine until a row is all -inf.
Tensor softmax_shifted(const Tensor& s) {
  Tensor e = (s - s.max(-1, /*keepdim=*/true).values).exp();
  return e / e.sum({-1}, /*keepdim=*/true);
}

// The mean over rows of each row's gradient norm, and of each row's largest weight.
struct RowStats {
  double gradient_norm = 0.0, top_weight = 0.0;
};
RowStats row_stats(const Tensor& gradient, const Tensor& weights) {
  const int64_t rows = weights.size(0);
  std::vector<double> g = values(gradient.square().sum({-1}).sqrt()), top = values(weights.max(-1).values);
  RowStats s;
  for (int64_t i = 0; i < rows; ++i) {
    s.gradient_norm += g[i] / static_cast<double>(rows);
    s.top_weight += top[i] / static_cast<double>(rows);
  }
  return s;
}

// NaN and infinities spelled the same on every platform ("-nan" is printf's whim).
std::string show(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.4g}", v);
}

}  // namespace

Lesson5 run_lesson5() {
  Lesson5 r;
  Generator gen(5);

  // ---- 1. a fully masked row ------------------------------------------------------------------
  Tensor masked_row = full({4}, -kInf, kFloat64);  // every key masked: scores all -inf
  Tensor row_max = masked_row.max();
  r.row_max = row_max.item();
  r.shifted = (masked_row - row_max).to_vector<double>()[0];  // -inf - (-inf)
  r.shifted_weight = softmax_shifted(masked_row).to_vector<double>()[0];
  r.unshifted_sum = masked_row.exp().sum().item();
  r.unshifted_weight = softmax_unshifted(masked_row).to_vector<double>()[0];

  // The same row inside attention: 3 queries, 4 keys; query 1 may see no key at all.
  const int64_t T = 3, S = 4, d = 8;
  Tensor q0 = randn({T, d}, kFloat64, gen), k0 = randn({S, d}, kFloat64, gen), v0 = randn({S, d}, kFloat64, gen);
  Tensor mask = tensor({{0, 0, 1, 1}, {1, 1, 1, 1}, {0, 0, 0, 1}}).to(kBool);  // true = masked out
  Tensor G = randn({T, d}, kFloat64, gen);
  {
    // Written out by hand with the textbook softmax.
    Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
    Tensor scores = q.matmul(k.t()) / std::sqrt(static_cast<double>(d));  // (T, S)
    Tensor out = softmax_shifted(scores.masked_fill(mask, -kInf)).matmul(v);  // (T, d)
    (out * G).sum().backward();
    r.naive_nonfinite_outputs = count_nonfinite(out);
    r.naive_nonfinite_value_gradients = count_nonfinite(v.grad());
    r.value_gradients = v.numel();
  }
  {
    // cppgrad's scaled_dot_product_attention, the same mask.
    Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
    auto att = F::scaled_dot_product_attention(q, k, v, mask, 0.0, false, std::nullopt, /*need_weights=*/true);
    (att.output * G).sum().backward();
    r.outputs = att.output.numel();
    r.gradients = q.numel() + k.numel() + v.numel();
    r.cppgrad_nonfinite_outputs = count_nonfinite(att.output);
    r.cppgrad_nonfinite_gradients = count_nonfinite(q.grad()) + count_nonfinite(k.grad()) + count_nonfinite(v.grad());
    r.masked_query_output = values(att.output.select(0, 1).abs().max())[0];
    r.masked_query_weights = values(att.weights.select(0, 1).abs().max())[0];
  }

  // ---- 2. scores of magnitude 1e4 ---------------------------------------------------------------
  Tensor big = tensor({{1e4, 1e4 - 1, 1e4 - 2}, {-1e4, -1e4 - 1, -1e4 - 2}}, kFloat64);
  r.big_scores = values(big);
  r.big_unshifted = values(softmax_unshifted(big));
  r.big_shifted = values(softmax_shifted(big));
  r.big_cppgrad = values(big.softmax(-1));

  // ---- 3. the 1/√d_k scale ----------------------------------------------------------------------
  // 512 queries against 16 keys, entries N(0, 1) as after a well-initialised projection: each
  // q·k is a sum of d_k products, so its standard deviation is √d_k = 8.
  const int64_t queries = 512, keys = 16, d_k = r.d_k;
  Tensor q = randn({queries, d_k}, kFloat64, gen), k = randn({keys, d_k}, kFloat64, gen);
  Tensor upstream = randn({queries, keys}, kFloat64, gen);  // some gradient arriving from above
  for (bool scaled : {false, true}) {
    Tensor dots = q.matmul(k.t());  // (queries, keys)
    Tensor scores = (scaled ? dots / std::sqrt(static_cast<double>(d_k)) : dots).detach().requires_grad_();
    Tensor weights = scores.softmax(-1);
    Tensor g = autograd::grad({(weights * upstream).sum()}, {scores})[0];  // through softmax only
    RowStats s = row_stats(g, weights);
    double score_std = std::sqrt(scores.detach().var().item());
    (scaled ? r.scaled : r.unscaled) = {score_std, s.top_weight, s.gradient_norm};
  }
  return r;
}

void print(const Lesson5& r) {
  fmt::print("Lesson 5: why does attention give NaN?\n\n");
  fmt::print("1. A query whose every key is masked: its scores are all -inf.\n");
  fmt::print("   textbook softmax, subtract the max: max = {}, -inf - max = {}, weight = exp({}) / ... = {}\n",
             show(r.row_max), show(r.shifted), show(r.shifted), show(r.shifted_weight));
  fmt::print("   nothing subtracted:                 Σ exp(-inf) = {}, weight = 0 / {} = {}\n", show(r.unshifted_sum),
             show(r.unshifted_sum), show(r.unshifted_weight));
  fmt::print("   In attention (3 queries, 4 keys, query 1 fully masked), written by hand:\n");
  fmt::print("     NaN in the output: {} of {};  NaN in the gradient of V: {} of {}\n", r.naive_nonfinite_outputs,
             r.outputs, r.naive_nonfinite_value_gradients, r.value_gradients);
  fmt::print("     (every value vector gets gradient from every query's row, so one bad row spoils all of V)\n");
  fmt::print("   cppgrad's scaled_dot_product_attention, same inputs and mask:\n");
  fmt::print("     non-finite outputs: {} of {};  non-finite gradients of Q, K, V: {} of {}\n",
             r.cppgrad_nonfinite_outputs, r.outputs, r.cppgrad_nonfinite_gradients, r.gradients);
  fmt::print("     the masked query's output and weights: largest |value| {} and {} (all zeros)\n\n",
             show(r.masked_query_output), show(r.masked_query_weights));

  auto row = [](const std::vector<double>& v, size_t from) {
    return fmt::format("{:>8}  {:>8}  {:>8}", show(v[from]), show(v[from + 1]), show(v[from + 2]));
  };
  fmt::print("2. Scores of magnitude 1e4 (float64's exp overflows to inf above 709.8, underflows to 0 below -745):\n");
  for (size_t i : {size_t{0}, size_t{3}}) {
    fmt::print("   scores                          {:>8.0f}  {:>8.0f}  {:>8.0f}\n", r.big_scores[i],
               r.big_scores[i + 1], r.big_scores[i + 2]);
    fmt::print("     exp(s) / Σ exp(s)             {}\n", row(r.big_unshifted, i));
    fmt::print("     exp(s - max) / Σ exp(s - max) {}\n", row(r.big_shifted, i));
    fmt::print("     cppgrad's softmax             {}\n", row(r.big_cppgrad, i));
  }
  fmt::print("   On the first row exp gives inf / inf, on the second 0 / 0. Subtracting the max changes\n");
  fmt::print("   nothing mathematically (it cancels in the ratio) and keeps every exponent ≤ 0.\n\n");

  fmt::print("3. The 1/√d_k scale, d_k = {}, q and k entries N(0, 1), 16 keys per query:\n", r.d_k);
  fmt::print("                      score std   mean largest weight   mean |∂L/∂scores| per row\n");
  fmt::print("   q·k (no scale)     {:>9.2f}   {:>19.3f}   {:>25.4f}\n", r.unscaled.score_std, r.unscaled.top_weight,
             r.unscaled.gradient_norm);
  fmt::print("   q·k / √d_k         {:>9.2f}   {:>19.3f}   {:>25.4f}\n", r.scaled.score_std, r.scaled.top_weight,
             r.scaled.gradient_norm);
  fmt::print("   Without the scale most rows are close to one-hot, and the softmax passes {:.1f}x less gradient\n",
             r.scaled.gradient_norm / r.unscaled.gradient_norm);
  fmt::print("   back to its scores; the larger d_k, the worse (the scores' spread grows as √d_k).\n\n");

  fmt::print("Answer: NaN comes from -inf - (-inf) or 0/0 in a fully masked row, or from exp overflowing on\n");
  fmt::print("large scores. Subtract the row max, and give a row with no visible key zero weights.\n");
}

}  // namespace lessons
