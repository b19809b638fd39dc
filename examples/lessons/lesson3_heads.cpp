// Lesson 3: do more heads mean more parameters, or different outputs?
//
// Not more parameters: with d_k = d_model / h, the h heads' projections stack into the same
// (d_model, d_model) matrices whatever h is. But different outputs, yes: the same weights cut
// into 8 heads compute 8 softmaxes over 8 small dot products instead of one softmax over one
// big dot product, and that is a different function.
//
// A learner who set every weight to one saw no difference between head counts. That is a
// special case, and we show why: with constant weights (1) every head has the same weights,
// so the h heads are h copies of one head; (2) every query, key and value is a constant vector
// (each feature = the token's feature sum + 1), so concatenating copies of a head's output
// gives the same vector for any h; (3) the only thing h still changes is the scale of the
// scores, √d_k·a_t·a_s with a_t = Σ x_t + 1, and at d_model = 512 the scores within a row are
// hundreds apart, so softmax puts all its weight on the same key for any h. Shrink the input and the
// scores come close enough for the scale to matter: then h changes the output again.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "lessons/lessons.h"
#include "lessons/measure.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace lessons {

namespace {

// Self-attention output of `layer` on x, keeping the per-head attention weights.
Tensor attend(nn::MultiheadAttention& layer, const Tensor& x) {
  NoGradGuard no_grad;
  layer.store_attention = true;
  return layer.forward(x, x, x, {.need_weights = false}).output;
}

// Rows of the attention weights (B, H, T, S) whose largest weight is exactly 1.0: softmax has
// put everything on one key.
int64_t one_hot_rows(const Tensor& weights) {
  std::vector<double> top = values(weights.max(-1).values);  // (B, H, T)
  int64_t n = 0;
  for (double v : top) n += v == 1.0;
  return n;
}

void set_all_parameters(nn::Module& m, double value) {
  for (const Tensor& p : m.parameters()) nn::init::constant_(p, value);
}

}  // namespace

Lesson3 run_lesson3() {
  Lesson3 r;
  const int64_t E = r.d_model, T = 12;

  // ---- parameter counts ------------------------------------------------------------------------
  for (int64_t h : r.head_counts) {
    r.fused_parameters.push_back(nn::MultiheadAttention(E, h).parameter_count());
    r.per_head_parameters.push_back(nn::PerHeadAttention(E, h).parameter_count());
  }

  // PyTorch's names and shapes, to map the count onto a torch.nn.MultiheadAttention(512, h).
  for (const auto& [name, p] : nn::MultiheadAttention(E, 8).named_parameters()) {
    r.parameter_shapes.emplace_back(name, p.shape());
    r.parameter_counts.push_back(p.numel());
  }

  // ---- h = 1 against h = 8 with the same weights -----------------------------------------------
  manual_seed(3);
  nn::MultiheadAttention one(E, 1), eight(E, 8);
  one.to(kFloat64);
  eight.to(kFloat64);
  eight.load_state_dict(one.state_dict());  // the very same numbers in both
  Tensor x = randn({1, T, E}, kFloat64);    // one sequence of 12 tokens, as in the question
  r.random_weights_diff = max_abs_diff(attend(one, x), attend(eight, x));

  // The identity linking the two: with the same W_Q, W_K, the h = 1 score q·k/√d_model is a sum
  // over the heads' slices, q·k = Σ_i q_i·k_i, and head i's score is q_i·k_i/√(d_model/h), so
  // S(h=1) = (1/√h)·Σ_i S_i. The head count decides how the sum is split into softmaxes.
  {
    NoGradGuard no_grad;
    auto qkv = F::linear(x, one.in_proj_weight, one.in_proj_bias).chunk(3, -1);  // (1, T, E) each
    Tensor s1 = qkv[0].matmul(qkv[1].mT()) / std::sqrt(static_cast<double>(E));  // (1, T, T)
    const int64_t d_k = E / 8;
    Tensor heads_sum = zeros({1, T, T}, kFloat64);
    for (int64_t i = 0; i < 8; ++i)
      heads_sum = heads_sum + qkv[0].narrow(-1, i * d_k, d_k).matmul(qkv[1].narrow(-1, i * d_k, d_k).mT()) /
                                  std::sqrt(static_cast<double>(d_k));
    r.score_identity = max_abs_diff(s1, heads_sum / std::sqrt(8.0));
    r.score_identity_size = s1.abs().max().item();
  }

  // ---- every weight and bias set to one --------------------------------------------------------
  set_all_parameters(one, 1.0);
  set_all_parameters(eight, 1.0);
  r.ones_diff = max_abs_diff(attend(one, x), attend(eight, x));
  Tensor w1 = one.last_attention, w8 = eight.last_attention;  // (1, 1, T, T) and (1, 8, T, T)
  r.rows_h1 = w1.numel() / T;
  r.rows_h8 = w8.numel() / T;
  r.one_hot_rows_h1 = one_hot_rows(w1);
  r.one_hot_rows_h8 = one_hot_rows(w8);
  for (int64_t i = 1; i < 8; ++i)  // head i against head 0: copies?
    r.heads_differ_by = worst_of(r.heads_differ_by, max_abs_diff(w8.select(1, i), w8.select(1, 0)));
  // The scores themselves: a_t = Σ x_t + 1 for each token, score(t, s) = √d_k · a_t · a_s.
  std::vector<double> a = values(x.sum({2}).squeeze(0) + 1.0);
  const double sqrt_d_k = std::sqrt(static_cast<double>(E / 8));
  std::vector<double> gaps;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> row;
    for (int64_t s = 0; s < T; ++s) {
      row.push_back(sqrt_d_k * a[t] * a[s]);
      r.largest_score_h8 = std::max(r.largest_score_h8, std::abs(row.back()));
    }
    std::sort(row.begin(), row.end());
    gaps.push_back(row[T - 1] - row[T - 2]);  // how far the top score stands above the next
  }
  std::sort(gaps.begin(), gaps.end());
  r.ones_smallest_top_gap = gaps.front();
  r.ones_median_top_gap = gaps[gaps.size() / 2];

  // Is "to the last bit" a property of all-ones weights, or of this input? 20 inputs of 12 tokens
  // and 20 of 64: a row whose top score leads by less than ~37 is not one-hot in float64
  // (e^-37 = 1e-16), and there the two scales (1/√512 against 1/√64) give different weights.
  for (int64_t tokens : {12, 64})
    for (int64_t seed = 1; seed <= r.ones_inputs; ++seed) {
      Generator gen(static_cast<uint64_t>(seed));
      Tensor input = randn({1, tokens, E}, kFloat64, gen);
      Tensor out1 = attend(one, input);
      const double diff = max_abs_diff(out1, attend(eight, input));
      if (diff == 0.0) ++(tokens == 12 ? r.ones_identical_12 : r.ones_identical_64);
      r.ones_worst_relative_diff = std::max(r.ones_worst_relative_diff, diff / out1.abs().max().item());
    }

  // Small inputs: the same constant weights, but the scores are now a few units apart.
  Tensor small = x / 100.0;
  Tensor small_one = attend(one, small);
  r.ones_small_input_diff = max_abs_diff(small_one, attend(eight, small));
  r.ones_small_input_size = small_one.abs().max().item();
  return r;
}

void print(const Lesson3& r) {
  fmt::print("Lesson 3: do more heads mean more parameters, or different outputs?\n\n");
  fmt::print("Parameters at d_model = {} (d_k = d_model / h):\n", r.d_model);
  fmt::print("   h   MultiheadAttention   PerHeadAttention\n");
  for (size_t i = 0; i < r.head_counts.size(); ++i)
    fmt::print("  {:>2}   {:>18}   {:>16}\n", r.head_counts[i], r.fused_parameters[i], r.per_head_parameters[i]);
  fmt::print("  The same for every h: 4·d_model² + 4·d_model = {}. The heads share out the columns of\n",
             4 * r.d_model * r.d_model + 4 * r.d_model);
  fmt::print("  the same matrices; more heads make each head narrower, not the layer bigger. In PyTorch's\n");
  fmt::print("  names and shapes (torch.nn.MultiheadAttention(512, h) has exactly these, for any h):\n");
  for (size_t i = 0; i < r.parameter_shapes.size(); ++i)
    fmt::print("    {:<16} {:<12} {:>9}\n", r.parameter_shapes[i].first, cppgrad::shape_str(r.parameter_shapes[i].second),
               r.parameter_counts[i]);
  fmt::print("  in_proj_weight stacks W_Q, W_K, W_V (each 512 × 512); head i owns rows [64i, 64i + 64) of each\n");
  fmt::print("  at h = 8, rows [128i, 128i + 128) at h = 4.\n\n");

  fmt::print("Outputs for h = 1 and h = 8, the same weights, one sequence of 12 tokens:\n");
  fmt::print("  random weights:          max |out(h=1) - out(h=8)| = {:.3g}   (different functions)\n",
             r.random_weights_diff);
  fmt::print("  every weight set to one: max |out(h=1) - out(h=8)| = {:.3g}   ({})\n", r.ones_diff,
             r.ones_diff == 0.0 ? "identical to the last bit" : "close, not identical");
  fmt::print("  ...and over other random inputs: identical to the last bit for {} of {} inputs of 12 tokens\n",
             r.ones_identical_12, r.ones_inputs);
  fmt::print("  and {} of {} inputs of 64 tokens;\n", r.ones_identical_64, r.ones_inputs);
  fmt::print("  the others differ, by up to {:.2g} of the output's size: some row's two top scores are close\n",
             r.ones_worst_relative_diff);
  fmt::print("  enough that softmax is not one-hot, and there the scale (1/√512 or 1/√64) changes the weights.\n\n");

  fmt::print("Why constant weights hide the heads:\n");
  fmt::print("  1. every head has the same weights, so the 8 heads are 8 copies of one head:\n");
  fmt::print("     largest difference between head 0's attention and any other head's: {:.3g}\n", r.heads_differ_by);
  fmt::print("  2. every query, key and value is a constant vector (each feature = the token's feature sum + 1),\n");
  fmt::print("     so a head's output is a constant vector, and copies of it concatenated are the same for any h;\n");
  fmt::print("  3. h still sets the scale of the scores, √d_k·a_t·a_s, but with unit-size inputs over 512\n");
  fmt::print("     features the scores within a row are hundreds apart (at h = 8 the top score stands {:.0f}\n",
             r.ones_median_top_gap);
  fmt::print("     above the next in the median row, at least {:.0f}; scores reach {:.0f}), so softmax puts all\n",
             r.ones_smallest_top_gap, r.largest_score_h8);
  fmt::print("     its weight on the same key whatever the scale. Rows with one weight of exactly 1.0:\n");
  fmt::print("     {} of {} at h = 1, {} of {} at h = 8.\n", r.one_hot_rows_h1, r.rows_h1, r.one_hot_rows_h8, r.rows_h8);
  fmt::print("  With the inputs divided by 100 the scores come close together, the scale matters, and\n");
  fmt::print("  the same constant weights give max |out(h=1) - out(h=8)| = {:.3g} (on outputs up to {:.0f}).\n\n",
             r.ones_small_input_diff, r.ones_small_input_size);

  fmt::print("The identity behind it, with any weights: one head's score is (1/√h)·Σ of the h heads' scores\n");
  fmt::print("(a dot product over 512 features is the sum of the 8 dot products over 64, and the scales differ by\n");
  fmt::print("√8). Checked on the random weights: max |S(h=1) - Σ_i S_i(h=8) / √8| = {:.1e} (scores up to {:.1f}).\n",
             r.score_identity, r.score_identity_size);
  fmt::print("So h = 1 takes one softmax of the sum, h = 8 eight softmaxes of its parts: a different function,\n");
  fmt::print("unless every part is the same (all ones) and the softmax is saturated anyway.\n\n");
  fmt::print("Is multi-head just faster? No: the same parameters and the same multiply-adds for any h\n");
  fmt::print("(h heads of d_k columns do the work of one of d_model), but a different function. (Fused\n");
  fmt::print("against per-head, the same function, is what lesson 2 times.)\n\n");
  fmt::print("Answer: the head count does not change the number of parameters, but it does change what the\n");
  fmt::print("layer computes. The all-ones experiment makes every head the same and mostly saturates the\n");
  fmt::print("softmax, so it often sees no difference ({} of {} inputs of 12 tokens): not because the heads do\n",
             r.ones_identical_12, r.ones_inputs);
  fmt::print("nothing, and with longer inputs ({} of {} identical at 64 tokens) it sees one.\n", r.ones_identical_64,
             r.ones_inputs);
}

}  // namespace lessons
