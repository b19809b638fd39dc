// Lesson 5: why does attention give NaN?
//
// Four ways the softmax inside attention goes wrong, each measured here:
//   1. A query whose every key is masked has a row of scores that are all -inf. The textbook
//      stable softmax subtracts the row's maximum, -inf, and -inf - (-inf) is NaN; without the
//      subtraction, Σ exp(-inf) = 0 and 0/0 is NaN. One such row makes the whole gradient of the
//      values NaN, since every value vector receives gradient from every query's row.
//   2. Large scores (1e4) overflow exp: exp(1e4) = inf, inf/inf = NaN. Subtracting the row's
//      maximum first keeps every exponent ≤ 0 and the result exact.
//   3. Not NaN, but the reason for 1/√d_k: q·k of entries with mean 0 and variance 1 has
//      variance d_k, so unscaled the softmax saturates (nearly one-hot). At d_k 64 it passes
//      less gradient to its scores, yet q and k get more (the scale multiplies the way back
//      too); as d_k grows, more and more rows become one-hot to the last bit and pass no
//      gradient at all, measured from d_k 64 to 1024.
//   4. A NaN at a masked position: F::scaled_dot_product_attention computes the masked key's
//      score anyway (-inf + NaN = NaN) and multiplies the masked value by 0 (0 · NaN = NaN);
//      nn::MultiheadAttention zeroes hidden keys and values first.
//   5. A bool mask with the other convention: cppgrad's true = masked out (as
//      nn.MultiheadAttention), PyTorch 2.x's F.scaled_dot_product_attention true = takes part.
//      Passed as is, such a mask hides every real key: fully masked rows (NaN by the textbook,
//      zeros in cppgrad) and queries that see only padding.
// cppgrad's softmax subtracts the maximum and treats an all -inf row as all zeros, so
// scaled_dot_product_attention returns zeros and finite gradients for a fully masked query.
#include <fmt/core.h>

#include <algorithm>
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

// The mean over rows of each row's Euclidean norm.
double mean_row_norm(const Tensor& t) {
  std::vector<double> n = values(t.square().sum({-1}).sqrt());
  double total = 0.0;
  for (double v : n) total += v;
  return total / static_cast<double>(n.size());
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
  // q·k is a sum of d_k products of mean 0 and variance 1, so its standard deviation is √d_k = 8.
  const int64_t queries = 512, keys = 16, d_k = r.d_k;
  Tensor q_values = randn({queries, d_k}, kFloat64, gen), k_values = randn({keys, d_k}, kFloat64, gen);
  Tensor upstream = randn({queries, keys}, kFloat64, gen);  // some gradient arriving from above
  for (bool scaled : {false, true}) {
    Tensor q = q_values.clone().requires_grad_(), k = k_values.clone().requires_grad_();
    Tensor dots = q.matmul(k.t());  // (queries, keys)
    Tensor scores = scaled ? dots / std::sqrt(static_cast<double>(d_k)) : dots;
    scores.retain_grad();
    Tensor weights = scores.softmax(-1);
    (weights * upstream).sum().backward();
    RowStats s = row_stats(scores.grad(), weights);
    Lesson5::Softmax& out = scaled ? r.scaled : r.unscaled;
    out = {std::sqrt(scores.detach().var().item()), s.top_weight, s.gradient_norm};
    out.q_gradient_norm = mean_row_norm(q.grad());
    out.k_gradient_norm = mean_row_norm(k.grad());
  }

  // The same measurement across head widths: how many rows pass no gradient at all.
  for (int64_t width : {64, 128, 256, 512, 1024}) {
    // float32, as attention trains: a weight below 2^-24 of the largest no longer moves the sum.
    Tensor q = randn({queries, width}, kFloat64, gen).to(kFloat32), k = randn({keys, width}, kFloat64, gen).to(kFloat32);
    Lesson5::Sweep point{width};
    for (bool scaled : {false, true}) {
      Tensor scores = q.matmul(k.t());  // (queries, keys)
      if (scaled) scores = scores / std::sqrt(static_cast<double>(width));
      scores.requires_grad_();
      Tensor weights = scores.softmax(-1);
      (weights * upstream.to(kFloat32)).sum().backward();
      // A row passes no usable gradient when it is one-hot in float32: its largest weight rounds
      // to exactly 1, every other weight is below 2^-24, and so is every ∂L/∂score in it.
      std::vector<double> top_weight = values(weights.detach().max(-1).values);
      std::vector<double> row_gradient = values(scores.grad().abs().max(-1).values);
      int64_t one_hot = 0;
      for (size_t i = 0; i < top_weight.size(); ++i)
        if (top_weight[i] == 1.0) {
          ++one_hot;
          point.largest_dead_row_gradient = std::max(point.largest_dead_row_gradient, row_gradient[i]);
        }
      const double dead = static_cast<double>(one_hot) / static_cast<double>(queries);
      double top = 0.0;
      for (double w : top_weight) top += w / static_cast<double>(queries);
      (scaled ? point.dead_rows_scaled : point.dead_rows_unscaled) = dead;
      (scaled ? point.top_weight_scaled : point.top_weight_unscaled) = top;
    }
    r.sweep.push_back(point);
  }

  // ---- 4. a NaN at a masked position ------------------------------------------------------------
  // Padding is often left uninitialised. The mask hides the padded key, but the function still
  // computes its score (NaN), and -inf + NaN is NaN, not -inf; the padded value meets weight 0,
  // and 0 · NaN is NaN. MultiheadAttention zeroes the hidden keys and values first.
  {
    const int64_t B = 2, L = 4, E = 8;
    // Cross-attention: clean queries (the decoder's), keys and values from a padded memory.
    Tensor query = randn({B, L, E}, kFloat64, gen), memory = randn({B, L, E}, kFloat64, gen);
    Tensor padding = tensor({{0, 0, 0, 0}, {0, 0, 0, 1}}).to(kBool);  // (B, S): true at padding
    {
      NoGradGuard no_grad;
      memory.select(0, 1).select(0, L - 1).fill_(std::nan(""));  // the padded position holds NaN
    }
    auto sdpa = F::scaled_dot_product_attention(query, memory, memory, padding.unsqueeze(1));  // mask (B, 1, S)
    r.padded_nan_outputs = sdpa.output.numel();
    r.padded_nan_sdpa_nonfinite = count_nonfinite(sdpa.output);
    manual_seed(5);
    nn::MultiheadAttention mha(E, 2);
    mha.to(kFloat64);
    Tensor out = mha.forward(query, memory, memory, {.key_padding_mask = padding}).output;
    r.padded_nan_mha_nonfinite = count_nonfinite(out);
    out.sum().backward();
    for (const Tensor& p : mha.parameters()) r.padded_nan_mha_nonfinite_gradients += count_nonfinite(p.grad());
  }

  // ---- 5. a mask with the other convention ------------------------------------------------------
  // PyTorch 2.x's F.scaled_dot_product_attention reads a bool mask as "true = takes part".
  // Written that way and handed to cppgrad's function, which reads "true = masked out", it
  // hides every real key and shows only the padding.
  {
    const int64_t B = 2, L = 4, d = 8;
    Tensor q = randn({B, L, d}, kFloat64, gen), k = randn({B, L, d}, kFloat64, gen), v = randn({B, L, d}, kFloat64, gen);
    Tensor padding = tensor({{0, 0, 0, 0}, {0, 0, 0, 1}}).to(kBool);  // (B, S): true at padding
    Tensor takes_part = padding.logical_not().unsqueeze(1);             // (B, 1, S): PyTorch 2.x's meaning
    Tensor masked_out = padding.unsqueeze(1);                           // (B, 1, S): cppgrad's meaning
    // The textbook softmax with the mask as is.
    Tensor scores = q.matmul(k.mT()) / std::sqrt(static_cast<double>(d));
    Tensor textbook = softmax_shifted(scores.masked_fill(takes_part, -kInf)).matmul(v);
    r.inverted_textbook_nonfinite = count_nonfinite(textbook);
    r.inverted_outputs = textbook.numel();
    // cppgrad's, with the mask as is, and with it inverted.
    auto wrong = F::scaled_dot_product_attention(q, k, v, takes_part, 0.0, false, std::nullopt, true);
    auto right = F::scaled_dot_product_attention(q, k, v, takes_part.logical_not(), 0.0, false, std::nullopt, true);
    auto intended = F::scaled_dot_product_attention(q, k, v, masked_out, 0.0, false, std::nullopt, true);
    r.inverted_cppgrad_nonfinite = count_nonfinite(wrong.output);
    std::vector<double> row_size = values(wrong.output.abs().max(-1).values);  // (B, L)
    r.inverted_rows = static_cast<int64_t>(row_size.size());
    for (double m : row_size) r.inverted_zero_rows += m == 0.0;
    r.inverted_padding_weight = values(wrong.weights.select(0, 1).select(-1, L - 1).min())[0];
    r.inverted_vs_correct = max_abs_diff(wrong.output, right.output);
    r.inverted_fixed_vs_padding_mask = max_abs_diff(right.output, intended.output);
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

  fmt::print("3. The 1/√d_k scale, d_k = {}, q and k entries of mean 0 and variance 1, 16 keys per query:\n", r.d_k);
  fmt::print("                      score std   mean largest weight   mean per-row |∂L/∂scores|   |∂L/∂q|   |∂L/∂k|\n");
  auto scale_row = [](const char* what, const Lesson5::Softmax& s) {
    fmt::print("   {:<18} {:>9.2f}   {:>19.3f}   {:>25.4f}   {:>7.3f}   {:>7.3f}\n", what, s.score_std, s.top_weight,
               s.gradient_norm, s.q_gradient_norm, s.k_gradient_norm);
  };
  scale_row("q·k (no scale)", r.unscaled);
  scale_row("q·k / √d_k", r.scaled);
  fmt::print("   A sum of d_k products of mean 0 and variance 1 has variance d_k: the scores' spread is √d_k.\n");
  fmt::print("   Without the scale most rows are close to one-hot, and the softmax passes {:.1f}x less gradient\n",
             r.scaled.gradient_norm / r.unscaled.gradient_norm);
  fmt::print("   back to its scores, but nothing vanishes: at q and k the gradient is {:.1f}x and {:.1f}x LARGER\n",
             r.unscaled.q_gradient_norm / r.scaled.q_gradient_norm, r.unscaled.k_gradient_norm / r.scaled.k_gradient_norm);
  fmt::print("   unscaled, since the scale also multiplies it on the way back (dq = scale · ds·k).\n");
  fmt::print("   That is one width. Across widths, in float32 as attention trains, the share of rows that are\n");
  fmt::print("   one-hot to the last bit (the largest weight rounds to exactly 1): such a row passes its scores\n");
  fmt::print("   no usable gradient, every ∂L/∂score in it below {:.1g} (against {:.2f} for a scaled row on average):\n",
             [&] { double g = 0.0; for (const auto& p : r.sweep) g = std::max(g, p.largest_dead_row_gradient); return g; }(),
             r.scaled.gradient_norm);
  fmt::print("       d_k   no scale: dead rows   largest weight   with 1/√d_k: dead rows   largest weight\n");
  for (const auto& p : r.sweep)
    fmt::print("     {:>5}   {:>18.1f}%   {:>14.3f}   {:>22.1f}%   {:>14.3f}\n", p.d_k, 100.0 * p.dead_rows_unscaled,
               p.top_weight_unscaled, 100.0 * p.dead_rows_scaled, p.top_weight_scaled);
  const auto& widest = r.sweep.back();
  double scaled_dead = 0.0;
  for (const auto& p : r.sweep) scaled_dead = std::max(scaled_dead, p.dead_rows_scaled);
  fmt::print("   So the scale does both jobs: it makes the softmax's temperature independent of d_k (with it the\n");
  fmt::print("   largest weight stays near {:.2f} at every width, and {}), and it\n", widest.top_weight_scaled,
             scaled_dead == 0.0 ? std::string("every row passes a usable gradient")
                                : fmt::format("at most {:.1f}% of rows pass nothing", 100.0 * scaled_dead));
  if (widest.dead_rows_unscaled > 0.0)
    fmt::print("   keeps gradients from vanishing: unscaled, {:.1f}% of the rows at d_k {} pass no usable gradient.\n\n",
               100.0 * widest.dead_rows_unscaled, widest.d_k);
  else
    fmt::print("   keeps attention from starting near-hard, which grows with d_k.\n\n");

  fmt::print("4. A NaN at a masked position (padding left uninitialised), the padding mask given:\n");
  fmt::print("     F::scaled_dot_product_attention: {} of {} outputs non-finite\n", r.padded_nan_sdpa_nonfinite,
             r.padded_nan_outputs);
  fmt::print("     nn::MultiheadAttention:          {} of {} outputs non-finite, {} non-finite parameter gradients\n",
             r.padded_nan_mha_nonfinite, r.padded_nan_outputs, r.padded_nan_mha_nonfinite_gradients);
  fmt::print("   The function is handed the padded key and computes its score anyway: NaN, and a mask adds -inf,\n");
  fmt::print("   but -inf + NaN is NaN; the padded value meets weight 0, and 0 · NaN is NaN. The layer knows\n");
  fmt::print("   which positions are padding (key_padding_mask) and zeroes their keys and values before the\n");
  fmt::print("   projection, so nothing of them reaches a score, an output or a gradient. Calling the function\n");
  fmt::print("   yourself, zero the padding first (masked_fill) or keep it finite.\n\n");

  fmt::print("5. A bool mask with the other convention. cppgrad's scaled_dot_product_attention (like\n");
  fmt::print("   nn.MultiheadAttention) reads true = MASKED OUT; PyTorch 2.x's F.scaled_dot_product_attention\n");
  fmt::print("   reads true = takes part. A padding mask written for PyTorch's (true at real keys), passed as is,\n");
  fmt::print("   for two sequences of 4 keys, sequence 1's last key padding:\n");
  fmt::print("     textbook softmax: NaN in {} of {} outputs (sequence 0 has no padding: every key hidden)\n",
             r.inverted_textbook_nonfinite, r.inverted_outputs);
  fmt::print("     cppgrad: {} non-finite, but {} of {} query rows output zeros, and in sequence 1 every query\n",
             r.inverted_cppgrad_nonfinite, r.inverted_zero_rows, r.inverted_rows);
  fmt::print("     puts weight {} on the padding key: no NaN, silently wrong (off by up to {:.3g}).\n",
             show(r.inverted_padding_weight), r.inverted_vs_correct);
  fmt::print("     mask.logical_not() fixes it: max difference from the intended padding mask {}.\n\n",
             show(r.inverted_fixed_vs_padding_mask));

  fmt::print("Answer: NaN comes from -inf - (-inf) or 0/0 in a fully masked row (an inverted mask makes many),\n");
  fmt::print("or from exp overflowing on large scores. Subtract the row max, give a row with no visible key\n");
  fmt::print("zero weights, and check which way your bool masks read.\n");
}

}  // namespace lessons
