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
// scores, √d_k·a_t·a_s with a_t = Σ x_t + 1, and at d_model = 512 those scores are hundreds
// apart, so softmax puts all its weight on the same key for any h. Shrink the input and the
// scores come close enough for the scale to matter: then h changes the output again.
#include <fmt/core.h>

#include <cmath>

#include "lessons/lessons.h"
#include "lessons/measure.h"

using namespace cppgrad;

namespace lessons {

namespace {

// Self-attention output of `layer` on x, keeping the per-head attention weights.
Tensor attend(nn::MultiheadAttention& layer, const Tensor& x) {
  NoGradGuard no_grad;
  layer.store_attention = true;
  return layer.forward(x, x, x, {}, {}, /*need_weights=*/false).output;
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

  // ---- h = 1 against h = 8 with the same weights -----------------------------------------------
  manual_seed(3);
  nn::MultiheadAttention one(E, 1), eight(E, 8);
  one.to(kFloat64);
  eight.to(kFloat64);
  eight.load_state_dict(one.state_dict());  // the very same numbers in both
  Tensor x = randn({1, T, E}, kFloat64);    // one sequence of 12 tokens, as in the question
  r.random_weights_diff = max_abs_diff(attend(one, x), attend(eight, x));

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
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < T; ++s) r.largest_score_h8 = std::max(r.largest_score_h8, std::abs(sqrt_d_k * a[t] * a[s]));

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
  fmt::print("  the same matrices; more heads make each head narrower, not the layer bigger.\n\n");

  fmt::print("Outputs for h = 1 and h = 8, the same weights, one sequence of 12 tokens:\n");
  fmt::print("  random weights:          max |out(h=1) - out(h=8)| = {:.3g}   (different functions)\n",
             r.random_weights_diff);
  fmt::print("  every weight set to one: max |out(h=1) - out(h=8)| = {:.3g}   (identical to the last bit)\n\n",
             r.ones_diff);

  fmt::print("Why constant weights hide the heads:\n");
  fmt::print("  1. every head has the same weights, so the 8 heads are 8 copies of one head:\n");
  fmt::print("     largest difference between head 0's attention and any other head's: {:.3g}\n", r.heads_differ_by);
  fmt::print("  2. every query, key and value is a constant vector (each feature = the token's feature sum + 1),\n");
  fmt::print("     so a head's output is a constant vector, and copies of it concatenated are the same for any h;\n");
  fmt::print("  3. h still sets the scale of the scores, √d_k·a_t·a_s, but with unit-size inputs over 512\n");
  fmt::print("     features those scores are huge (up to {:.0f} at h = 8), so softmax puts all its weight on the\n",
             r.largest_score_h8);
  fmt::print("     same key whatever the scale. Rows with one weight of exactly 1.0: {} of {} at h = 1,\n",
             r.one_hot_rows_h1, r.rows_h1);
  fmt::print("     {} of {} at h = 8.\n", r.one_hot_rows_h8, r.rows_h8);
  fmt::print("  With the inputs divided by 100 the scores come close together, the scale matters, and\n");
  fmt::print("  the same constant weights give max |out(h=1) - out(h=8)| = {:.3g} (on outputs up to {:.0f}).\n\n",
             r.ones_small_input_diff, r.ones_small_input_size);

  fmt::print("Answer: the head count does not change the number of parameters, but it does change what the\n");
  fmt::print("layer computes. The all-ones experiment sees no difference because it makes every head the\n");
  fmt::print("same and saturates the softmax, not because the heads do nothing.\n");
}

}  // namespace lessons
