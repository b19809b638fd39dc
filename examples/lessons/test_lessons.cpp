// Each lesson's printed claims, asserted: if a change to cppgrad made a lesson's answer false,
// one of these fails. They call the very functions the `lesson` program prints from.
#include <doctest/doctest.h>

#include <cmath>

#include "lessons/lessons.h"
#include "lessons/measure.h"

using namespace lessons;

TEST_CASE("lesson 1: every head reads all d_model input features") {
  const Lesson1 r = run_lesson1();
  const int64_t d_k = r.d_model / r.heads;
  CHECK(r.w_q_head_shape == cppgrad::Shape{d_k, r.d_model});  // as stored
  REQUIRE(r.features_read.size() == static_cast<size_t>(r.heads));
  for (int64_t n : r.features_read) CHECK(n == r.d_model);
  for (const auto& g : r.gradient_by_head)
    for (double v : g) CHECK(std::abs(v) > 1e-3);  // clearly nonzero, not rounding noise
  // Had the input been cut into slices, only d_k features would matter.
  CHECK(r.features_read_if_cut == d_k);
  // Reshaping the fused projection is exactly the per-head projection.
  CHECK(r.fused_vs_per_head < 1e-14);
}

TEST_CASE("lesson 2: fused and per-head attention agree in outputs and every gradient") {
  const Lesson2 r = run_lesson2();
  CHECK(r.stacking_identity < 1e-13);
  CHECK(r.fused_parameters == r.per_head_parameters);
  CHECK(r.fused_parameters == 4 * r.d_model * r.d_model + 4 * r.d_model);
  CHECK(r.fused_weight_matrices == 2);
  CHECK(r.per_head_weight_matrices == 3 * r.heads + 1);
  CHECK(r.three_linear_identity < 1e-13);
  CHECK(r.fused_projection_macs == r.per_head_projection_macs);  // the same work
  CHECK(r.fused_projection_macs == 2 * 6 * 3 * r.d_model * r.d_model);
  // Fewer BLAS calls: the forward's projections alone are 1 against 3·h. (The times are printed,
  // never tested: speed is measured, not asserted.)
  CHECK(r.per_head_gemm_calls - r.fused_gemm_calls >= 3 * r.timed_heads - 1);
  CHECK(r.fused_ms > 0.0);
  // Default initialisations differ (Xavier over (3E, E) against Linear's U(±1/√E)): std
  // √(2/4E) = 0.0313 against 1/√(3E) = 0.0255 at E = 512, biases 0 against up to 1/√E = 0.044.
  const double E = static_cast<double>(r.init_d_model);
  CHECK(r.fused_init_weight_std == doctest::Approx(std::sqrt(2.0 / (4.0 * E))).epsilon(0.02));
  CHECK(r.per_head_init_weight_std == doctest::Approx(1.0 / std::sqrt(3.0 * E)).epsilon(0.05));
  CHECK(r.fused_init_bias_max == 0.0);
  CHECK(r.per_head_init_bias_max > 0.9 / std::sqrt(E));
  CHECK(r.per_head_init_bias_max <= 1.0 / std::sqrt(E));
  REQUIRE(r.differences.size() == 7);
  for (const auto& [what, diff] : r.differences) {
    INFO(what);
    CHECK(diff < 1e-13);  // float64 rounding, ~1e-15
  }
}

TEST_CASE("lesson 3: head count keeps the parameters but changes the outputs") {
  const Lesson3 r = run_lesson3();
  REQUIRE(r.fused_parameters.size() == 4);
  for (size_t i = 0; i < r.head_counts.size(); ++i) {
    CHECK(r.fused_parameters[i] == 4 * 512 * 512 + 4 * 512);
    CHECK(r.per_head_parameters[i] == r.fused_parameters[i]);
  }
  CHECK(r.random_weights_diff > 1e-2);  // a different function
  CHECK(r.ones_diff == 0.0);            // identical to the last bit, on the lesson's input
  // ...but not on every input: measured 13 of 20 at 12 tokens, 4 of 20 at 64, the others up to
  // 0.3 of the output apart (float64; the counts depend only on which rows are one-hot).
  CHECK(r.ones_identical_12 > r.ones_identical_64);
  CHECK(r.ones_identical_64 < r.ones_inputs);
  CHECK(r.ones_worst_relative_diff > 1e-3);
  CHECK(r.heads_differ_by == 0.0);      // the 8 heads are copies
  CHECK(r.one_hot_rows_h1 == r.rows_h1);
  CHECK(r.one_hot_rows_h8 == r.rows_h8);
  CHECK(r.largest_score_h8 > 100.0);
  CHECK(r.ones_median_top_gap > 100.0);  // "hundreds apart within a row"
  CHECK(r.ones_smallest_top_gap > 20.0);  // even the closest row: exp(-20) = 2e-9, one-hot in float64 terms
  // One head's score is (1/√h)·Σ of the h heads' scores: float64 rounding only.
  CHECK(r.score_identity < 1e-12 * std::max(1.0, r.score_identity_size));
  // PyTorch's shapes, and they add up.
  REQUIRE(r.parameter_shapes.size() == 4);
  CHECK(r.parameter_shapes[0] == std::pair<std::string, cppgrad::Shape>{"in_proj_weight", {1536, 512}});
  CHECK(r.parameter_shapes[1] == std::pair<std::string, cppgrad::Shape>{"in_proj_bias", {1536}});
  CHECK(r.parameter_shapes[2] == std::pair<std::string, cppgrad::Shape>{"out_proj.weight", {512, 512}});
  CHECK(r.parameter_shapes[3] == std::pair<std::string, cppgrad::Shape>{"out_proj.bias", {512}});
  int64_t total = 0;
  for (int64_t n : r.parameter_counts) total += n;
  CHECK(total == 1050624);
  CHECK(r.ones_small_input_diff > 1e-2 * r.ones_small_input_size);  // unsaturated: the scale √d_k shows
}

// Lesson 4 trains in float32, and the trained figures move with the BLAS kernel and thread
// count (the lessons README quotes them as ranges, checked by docs/quoted_numbers_match_the_programs).
// The bounds below are the lesson's conclusions, with margins that hold on all of them.
TEST_CASE("lesson 4: random initialisation makes heads differ and identical heads stay identical up to rounding") {
  const Lesson4 r = run_lesson4();
  REQUIRE(r.at_init.layers.size() == 3);  // encoder self, decoder self, cross-attention
  CHECK(!r.blas_kernel.empty());
  // Negating a head's W_Q and W_K: W_Q's cosine -1, the same query-key product and scores.
  // Negation is exact in floating point, and both runs take the same BLAS path.
  CHECK(r.negated_w_q_cosine == doctest::Approx(-1.0).epsilon(1e-12));
  CHECK(r.negated_query_key_cosine == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(r.negated_weights_diff < 1e-12);
  CHECK(r.negated_output_diff < 1e-12);
  // Independent random heads are nearly unrelated by every measure.
  CHECK(std::abs(r.at_init.w_q) < 0.1);
  CHECK(std::abs(r.at_init.query_key) < 0.1);
  CHECK(std::abs(r.at_init.output_value) < 0.1);
  CHECK(r.projections_moved > 0.3);
  // The model learns the copy task...
  CHECK(r.at_init.accuracy < 5.0);
  CHECK(r.trained.accuracy > 80.0);
  // ...its maps sharpen from nearly even, every cross-attention head learns to look at the
  // symbol being copied, and the cross-attention heads converge: their query-key products
  // (measured 0.42 to 0.48) and their maps become more alike. Their raw W_Q_i cosine does not
  // show it (measured -0.02 to -0.03).
  CHECK(r.at_init.largest_weight < r.at_init.even_weight + 0.15);
  CHECK(r.trained.largest_weight > r.at_init.largest_weight + 0.1);
  REQUIRE(r.trained.copied_symbol_weight.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(r.at_init.copied_symbol_weight[i] < 0.3);
    CHECK(r.trained.copied_symbol_weight[i] > 0.6);
  }
  const auto& cross_init = r.at_init.layers[2];
  const auto& cross = r.trained.layers[2];
  REQUIRE(cross.name.find("multihead_attn") != std::string::npos);
  CHECK(cross.query_key > cross_init.query_key + 0.25);
  CHECK(cross.attention > cross_init.attention);
  CHECK(std::abs(cross.w_q) < 0.1);
  CHECK(r.trained.attention > r.at_init.attention);
  // The similarity scale's baseline, which the lesson prints: independent random heads score
  // about 0 on the weight products but far above 0 on the maps (measured 0.87), whose nearly
  // even rows all look alike.
  CHECK(r.at_init.attention > 0.5);
  CHECK(r.at_init.largest_weight < 2.0 * r.at_init.even_weight);
  // Identical heads: copies at step 0; after this short run apart by float32 rounding at most.
  // Measured at step 200: 2.6e-6 (OpenBLAS's Zen and Haswell kernels), 0 (Sandybridge), beside
  // weights up to 0.74; the long run (--steps 2000) is where amplification shows, not tested here.
  REQUIRE(r.seed_runs.size() == 1);
  const auto& apart = r.seed_runs.front().apart;
  REQUIRE(apart.size() >= 2);
  CHECK(apart.front().step == 0);
  CHECK(apart.front().weights == 0.0);  // a copy, no arithmetic
  CHECK(apart.front().key_bias == 0.0);
  CHECK(apart.back().step == r.options.steps);
  for (const auto& a : apart) {
    INFO("step " << a.step);
    CHECK(a.weights < 2e-5);
  }
  CHECK(symmetry_of(apart) != Symmetry::Broken);
  CHECK(r.seed_runs.front().random_accuracy == r.trained.accuracy);
  CHECK(r.seed_runs.front().identical_accuracy == r.identical_start.accuracy);
  CHECK(r.identical_start.query_key == doctest::Approx(1.0).epsilon(1e-9));
  CHECK(r.identical_start.output_value == doctest::Approx(1.0).epsilon(1e-9));
  CHECK(r.identical_start.attention == doctest::Approx(1.0).epsilon(1e-9));
  // d_model must split evenly into the heads.
  CHECK(r.indivisible_error.find("not divisible") != std::string::npos);
  CHECK(r.own_width_parameters == 4 * 30 * 32 + 3 * 32 + 30);  // with head_dim 8: Q, K, V, out and their biases
}

// The mechanism runs each head through its own calls of the same shapes, so these hold exactly,
// under every kernel and thread count: nothing here is rounding luck.
TEST_CASE("lesson 4: exact copies stay copies, and a copy moved by ε grows apart at training's rate") {
  const Lesson4Copies r = run_lesson4_copies();
  REQUIRE(r.starts.size() == r.epsilons.size() + 3);
  REQUIRE(r.steps_measured.front() == 0);
  REQUIRE(r.steps_measured.back() == r.steps);
  const auto& exact = r.starts.front();
  CHECK(exact.gradients_apart == 0.0);  // identical gradients at every step
  for (double a : exact.apart) CHECK(a == 0.0);
  for (size_t i = 1; i <= r.epsilons.size(); ++i) {
    const auto& moved = r.starts[i];
    const double epsilon = r.epsilons[i - 1];
    INFO("ε = " << epsilon);
    CHECK(moved.apart.front() <= epsilon);
    CHECK(moved.apart.front() > 0.9 * epsilon);
    CHECK(moved.gradients_apart > 0.0);
    CHECK(moved.apart.back() > 100.0 * moved.apart.front());  // grew apart
    CHECK(moved.loss_end < exact.loss_end);  // heads that differ fit the teacher better
  }
  // While the gap is small it grows in proportion to its size: the two smallest ε grow by the
  // same factor at every measured step (the printed rate), to float64 rounding of the ε.
  for (size_t k = 1; k < r.steps_measured.size(); ++k) {
    if (r.starts[2].apart[k] > 1e-3) break;
    INFO("step " << r.steps_measured[k]);
    CHECK(r.starts[1].apart[k] / r.epsilons[0] == doctest::Approx(r.starts[2].apart[k] / r.epsilons[1]).epsilon(1e-3));
  }
  CHECK(growth_per_step(r) > 1.05);
  // Dropout's masks differ per head: copies part at the first step.
  const auto& dropped = r.starts[r.epsilons.size() + 1];
  CHECK(dropped.dropout > 0.0);
  CHECK(dropped.apart.front() == 0.0);
  CHECK(dropped.apart[1] > 1e-3);
  CHECK(dropped.loss_end < exact.loss_end);
  // The default initialisation: heads differ from the start, by the weights' own size.
  const auto& random = r.starts.back();
  CHECK(random.apart.front() > 0.1);
  CHECK(random.loss_end < exact.loss_end);
}

TEST_CASE("lesson 4: the verdict on identical heads follows their gap") {
  using A = Lesson4::Apart;
  CHECK(symmetry_of({A{0, 0.0}, A{1, 0.0}, A{2000, 0.0}}) == Symmetry::ExactCopies);
  CHECK(symmetry_of({A{0, 0.0}, A{1, 7e-9}, A{2000, 6e-6}}) == Symmetry::RoundingLevel);
  CHECK(symmetry_of({A{0, 0.0}, A{1, 7e-9}, A{2000, 0.17}}) == Symmetry::Broken);
  CHECK(rounding_seed({A{0, 0.0}, A{1, 0.0}, A{3, 1.5e-8}, A{10, 3e-8}}) == 1.5e-8);
  CHECK(rounding_seed({A{0, 0.0}, A{1, 0.0}}) == 0.0);
}

TEST_CASE("lesson 5: a fully masked row gives NaN by hand but zeros and finite gradients in cppgrad") {
  const Lesson5 r = run_lesson5();
  CHECK(std::isinf(r.row_max));
  CHECK(r.row_max < 0);
  CHECK(std::isnan(r.shifted));
  CHECK(std::isnan(r.shifted_weight));
  CHECK(r.unshifted_sum == 0.0);
  CHECK(std::isnan(r.unshifted_weight));
  CHECK(r.naive_nonfinite_outputs > 0);
  CHECK(r.naive_nonfinite_value_gradients == r.value_gradients);  // one bad row spoils all of V
  CHECK(r.cppgrad_nonfinite_outputs == 0);
  CHECK(r.cppgrad_nonfinite_gradients == 0);
  CHECK(r.masked_query_output == 0.0);
  CHECK(r.masked_query_weights == 0.0);
}

TEST_CASE("lesson 5: large scores overflow without max subtraction and the scale keeps softmax from saturating") {
  const Lesson5 r = run_lesson5();
  REQUIRE(r.big_scores.size() == 6);
  const double expected[3] = {1.0 / (1.0 + std::exp(-1.0) + std::exp(-2.0)),
                              std::exp(-1.0) / (1.0 + std::exp(-1.0) + std::exp(-2.0)),
                              std::exp(-2.0) / (1.0 + std::exp(-1.0) + std::exp(-2.0))};
  for (size_t i = 0; i < 6; ++i) {
    CHECK(std::isnan(r.big_unshifted[i]));  // inf/inf on the +1e4 row, 0/0 on the -1e4 row
    CHECK(r.big_shifted[i] == doctest::Approx(expected[i % 3]).epsilon(1e-12));
    CHECK(r.big_cppgrad[i] == doctest::Approx(expected[i % 3]).epsilon(1e-12));
  }
  // d_k = 64: q·k has standard deviation about 8 without the scale, about 1 with it.
  CHECK(r.unscaled.score_std == doctest::Approx(8.0).epsilon(0.15));
  CHECK(r.scaled.score_std == doctest::Approx(1.0).epsilon(0.15));
  CHECK(r.unscaled.top_weight > 0.7);
  CHECK(r.scaled.top_weight < 0.4);
  CHECK(r.scaled.gradient_norm > 1.5 * r.unscaled.gradient_norm);  // measured 1.9x
  // ...but q and k get more gradient unscaled, not less (measured 4.1x and 6.3x): the scale
  // multiplies the way back too. Nothing vanishes.
  CHECK(r.unscaled.q_gradient_norm > 3.0 * r.scaled.q_gradient_norm);
  CHECK(r.unscaled.k_gradient_norm > 3.0 * r.scaled.k_gradient_norm);
}

TEST_CASE("lesson 5: without the scale, more rows pass no usable gradient as d_k grows, a masked NaN") {
  const Lesson5 r = run_lesson5();
  REQUIRE(r.sweep.size() == 5);
  CHECK(r.sweep.front().d_k == 64);
  CHECK(r.sweep.back().d_k == 1024);
  for (size_t i = 0; i < r.sweep.size(); ++i) {
    const auto& p = r.sweep[i];
    INFO("d_k " << p.d_k);
    CHECK(p.dead_rows_scaled == 0.0);  // with the scale no row is one-hot
    CHECK(p.top_weight_scaled < 0.3);  // the same temperature at every width (measured 0.24-0.25)
    if (i > 0) {
      CHECK(p.dead_rows_unscaled >= r.sweep[i - 1].dead_rows_unscaled);
      CHECK(p.top_weight_unscaled > r.sweep[i - 1].top_weight_unscaled);
    }
    CHECK(p.largest_dead_row_gradient < 1e-6);  // float32: below 2^-24 of the upstream gradient
  }
  CHECK(r.sweep.back().dead_rows_unscaled > 0.2);  // measured 33.6% (float32, one draw of 512 rows)
  // A NaN at the padded memory position: the function spreads it, the layer does not.
  CHECK(r.padded_nan_outputs == 64);
  CHECK(r.padded_nan_sdpa_nonfinite == 32);  // all of sequence 1
  CHECK(r.padded_nan_mha_nonfinite == 0);
  CHECK(r.padded_nan_mha_nonfinite_gradients == 0);
}

TEST_CASE("lesson 5: a mask with PyTorch 2.x's convention hides every real key") {
  const Lesson5 r = run_lesson5();
  // Sequence 0 has no padding, so all its rows are fully masked: 4 rows of 8 outputs.
  CHECK(r.inverted_outputs == 64);
  CHECK(r.inverted_textbook_nonfinite == 32);
  CHECK(r.inverted_cppgrad_nonfinite == 0);
  CHECK(r.inverted_rows == 8);
  CHECK(r.inverted_zero_rows == 4);
  CHECK(r.inverted_padding_weight == doctest::Approx(1.0).epsilon(1e-12));  // only the padding is seen
  CHECK(r.inverted_vs_correct > 0.1);
  CHECK(r.inverted_fixed_vs_padding_mask == 0.0);  // the same mask, the same path: exactly equal
}

TEST_CASE("lesson 6: a tied weight gets the sum of the gradients of both uses and is stepped once") {
  const Lesson6 r = run_lesson6();
  CHECK(r.weight_is_shared);
  CHECK(r.parameter_names == std::vector<std::string>{"embed.weight", "mix.weight", "mix.bias"});
  CHECK(r.tied_vs_sum < 1e-14);
  CHECK(r.tied_vs_embedding_use > 1e-3);
  CHECK(r.tied_vs_output_use > 1e-3);
  CHECK(r.sgd_parameters == 3);
  CHECK(r.sgd_step_vs_once < 1e-15);
  CHECK(r.sgd_step_vs_twice > 1e-3);
  CHECK(r.adam_largest_move <= 0.1 + 1e-12);
  CHECK(r.adam_largest_move > 0.09);
  CHECK(r.copies_apart_after_one_step > 1e-3);
}

TEST_CASE("lesson 7: the encoder layer's backward by hand equals autograd's, and each classic mistake shows") {
  const Lesson7 r = run_lesson7();
  // float64 throughout, the same formulas summed in different orders: ~1e-15.
  CHECK(r.forward_diff < 1e-12);
  REQUIRE(r.gradients.size() == 17);  // x and 16 parameter blocks
  for (const auto& g : r.gradients) {
    INFO(g.name);
    CHECK(g.diff < 1e-12);
  }
  // Indices into r.gradients.
  enum { X, WQ, WK, WV, BQ, BK, BV, WO, BO, G1, B1, W1, BB1, W2, BB2, G2, B2 };
  CHECK(r.gradients[BK].size < 1e-12);  // a key bias cannot change a softmax: its gradient is 0
  REQUIRE(r.mistakes.size() == 3);
  auto spoiled = [&](size_t m, std::initializer_list<int> which) {
    for (int i : which) {
      INFO("mistake " << m + 1 << ", " << r.gradients[i].name);
      CHECK(r.mistakes[m].errors[i].diff > 1e-2);
    }
  };
  auto untouched = [&](size_t m, std::initializer_list<int> which) {
    for (int i : which) {
      INFO("mistake " << m + 1 << ", " << r.gradients[i].name);
      CHECK(r.mistakes[m].errors[i].diff < 1e-12);
    }
  };
  // 1. No -p·(Σ dp·p): everything below the softmax is wrong, b_K gets a gradient.
  spoiled(0, {X, WQ, WK, BQ, BK});
  untouched(0, {WV, BV, WO, BO, G1, B1, W1, BB1, W2, BB2, G2, B2});
  // 2. No 1/√d_k in the backward: dq, dk are √d_k times too large, so the error on W_Q is
  // (√d_k - 1) times its gradient.
  spoiled(1, {X, WQ, WK, BQ});
  untouched(1, {BK, WV, BV, WO, BO, G1, B1, W1, BB1, W2, BB2, G2, B2});
  const double sqrt_d_k = std::sqrt(static_cast<double>(r.d_model / r.heads));
  CHECK(r.mistakes[1].errors[WQ].diff == doctest::Approx((sqrt_d_k - 1.0) * r.gradients[WQ].size).epsilon(1e-9));
  // 3. LayerNorm's mean terms dropped: all but LayerNorm 2's own γ and β.
  spoiled(2, {X, WQ, WK, WV, BQ, BV, WO, BO, G1, B1, W1, BB1, W2, BB2});
  untouched(2, {G2, B2});
  // The tiny traced attention: hand = autograd, and gradcheck passes.
  CHECK(r.trace.size() > 20);
  CHECK(r.trace_vs_autograd < 1e-12);
  CHECK(r.trace_gradcheck);
  CHECK(r.trace_gradcheck_error.empty());
  // Every softmax row of the trace sums to 1, and every ds row to 0.
  for (const auto& [what, t] : r.trace) {
    INFO(what);
    if (what.find("p = softmax") != std::string::npos)
      for (double s : values(t.sum({-1}))) CHECK(s == doctest::Approx(1.0).epsilon(1e-12));
    if (what.find(": ds = ") != std::string::npos)
      for (double s : values(t.sum({-1}))) CHECK(std::abs(s) < 1e-12);
  }
}

// Lesson 8 trains a model per head count and seed; these tests run short configurations (100
// steps) and check what the lesson's tables, readings and verdicts are made of. Which head count
// wins after 1000 or 2000 steps is float32 training, which moves with the kernel and the threads:
// the verdict is asserted to follow the figures, never to name a head count.
TEST_CASE("lesson 8: the head count changes neither the parameters nor the model, only its grouping") {
  Lesson8Options o;
  o.task = "reverse";
  o.vocab = 12;
  o.seeds = 1;
  o.steps = 100;
  o.eval_every = 50;
  const Lesson8 r = run_lesson8(o);
  REQUIRE(r.runs.size() == 4);
  REQUIRE(r.pictures.size() == 4);
  for (size_t i = 0; i < r.runs.size(); ++i) {
    const auto& run = r.runs[i];
    INFO("heads " << run.heads);
    CHECK(run.heads == o.head_counts[i]);
    CHECK(run.heads * run.d_k == o.d_model);
    CHECK(run.parameters == r.runs.front().parameters);  // lesson 3's point, on the whole model
    REQUIRE(run.accuracy_at.size() == 2);                 // steps 50 and 100
    CHECK(run.accuracy_at.back().first == o.steps);
    CHECK(run.accuracy == run.accuracy_at.back().second);
    for (const auto& [step, acc] : run.accuracy_at) {
      CHECK(acc >= 0.0);
      CHECK(acc <= 100.0);
      if (acc >= 99.0) CHECK(run.steps_to_99 <= step);
    }
    if (run.steps_to_99 < 0)
      for (const auto& [step, acc] : run.accuracy_at) CHECK(acc < 99.0);
    REQUIRE(run.mirrored_weight.size() == static_cast<size_t>(run.heads));
    for (double w : run.mirrored_weight) CHECK((w >= 0.0 && w <= 1.0));
    // Each head's picture is a softmax per output position: every row sums to 1.
    REQUIRE(r.pictures[i].maps.size() == static_cast<size_t>(run.heads));
    for (const auto& map : r.pictures[i].maps) {
      REQUIRE(map.size() == static_cast<size_t>(o.seq_len + 1));
      for (const auto& row : map) {
        double sum = 0.0;
        for (double w : row) sum += w;
        CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));  // float32 softmax
      }
    }
  }
  CHECK(r.example_source.size() == static_cast<size_t>(o.seq_len + 1));
  const auto summary = summarise(r);
  REQUIRE(summary.size() == 4);
  for (size_t i = 0; i < summary.size(); ++i) {
    CHECK(summary[i].accuracy == r.runs[i].accuracy);  // one seed
    CHECK(summary[i].spread == 0.0);
    for (const auto& other : summary) CHECK(!beats(summary[i], other));  // one seed names no winner
  }
}

// The default task, on two seeds: each head's weight on both operands, per model, and the
// seeds' spread behind every verdict.
TEST_CASE("lesson 8: on mirror-sum, each model's heads are read one by one and the seeds give a spread") {
  Lesson8Options o;  // mirror-sum, 4 symbols
  CHECK(o.task == "mirror-sum");
  CHECK(o.seeds >= 3);
  o.steps = 100;
  o.seeds = 2;
  o.head_counts = {1, 4};
  const Lesson8 r = run_lesson8(o);
  REQUIRE(r.runs.size() == 4);  // 2 head counts x 2 seeds
  for (const auto& run : r.runs) {
    INFO("heads " << run.heads << ", seed " << run.seed);
    REQUIRE(run.same_weight.size() == static_cast<size_t>(run.heads));
    REQUIRE(run.mirrored_weight.size() == static_cast<size_t>(run.heads));
    for (size_t h = 0; h < run.same_weight.size(); ++h) {
      // Two positions' weights in one softmax row: each in [0, 1] (at t = len-1-t, the middle of
      // an odd length, both count the same position).
      CHECK((run.same_weight[h] >= 0.0 && run.mirrored_weight[h] >= 0.0));
      CHECK(run.same_weight[h] <= 1.0);
      CHECK(run.mirrored_weight[h] <= 1.0);
    }
  }
  const auto summary = summarise(r);
  REQUIRE(summary.size() == 2);
  for (const auto& s : summary) {
    INFO("heads " << s.heads);
    CHECK(s.seeds == 2);
    double a = -1.0, b = -1.0;
    for (const auto& run : r.runs)
      if (run.heads == s.heads) (a < 0 ? a : b) = run.accuracy;
    CHECK(s.accuracy == doctest::Approx((a + b) / 2.0));
    CHECK(s.spread == doctest::Approx(std::abs(a - b) / std::sqrt(2.0)));  // two seeds' standard deviation
  }
}

// The lesson's answer on its default task and run (mirror-sum, 3 seeds, 1000 steps), for one
// head against eight: eight heads learn it better on every seed and by more than the seeds'
// spread, under the
// kernels of today's CPUs (Haswell, SkylakeX, Cooperlake). Three seeds decide little: under another
// kernel the spread may exceed the gap (it did under Nehalem's, of the eleven tried:
// results/2026-11-30-lesson8-under-eleven-kernels.md), so there the test asks only that eight
// heads' mean is the higher, and says so. The 2 and 4 heads of the default run are left out for time.
TEST_CASE("lesson 8: on mirror-sum eight heads beat one on every seed and by more than the spread") {
  Lesson8Options o;
  o.head_counts = {1, 8};
  o.eval_every = o.steps;
  const Lesson8 r = run_lesson8(o);
  const auto summary = summarise(r);
  REQUIRE(summary.size() == 2);
  INFO("1 head " << summary[0].accuracy << "% ± " << summary[0].spread << ", 8 heads " << summary[1].accuracy << "% ± "
                 << summary[1].spread);
  CHECK(summary[0].seeds == 3);
  CHECK(!beats(summary[0], summary[1]));
  const bool todays_kernel = r.blas_kernel == "Haswell" || r.blas_kernel == "SkylakeX" || r.blas_kernel == "Cooperlake";
  if (todays_kernel) {
    CHECK(beats(summary[1], summary[0]));
  } else {
    MESSAGE("under OpenBLAS's " << r.blas_kernel << " kernel only that eight heads' mean is the higher is checked, "
            "not that the gap exceeds the seeds' spread (that is asserted under Haswell, SkylakeX and Cooperlake)");
    CHECK(summary[1].accuracy > summary[0].accuracy);
  }
}

TEST_CASE("lesson 8: a winner only higher on every seed and beyond the spread, and a head's reading") {
  auto summary = [](std::vector<double> per_seed) {
    HeadCountSummary s;
    s.per_seed = per_seed;
    return s;
  };
  CHECK(beats(summary({82.8, 60.2, 62.5}), summary({40.6, 50.0, 47.7})));   // 8 heads and 1, Cooperlake
  CHECK(!beats(summary({40.6, 50.0, 47.7}), summary({82.8, 60.2, 62.5})));
  CHECK(!beats(summary({53.9, 49.2, 53.1}), summary({40.6, 50.0, 47.7})));  // 6 points beyond a 4.9 spread, but
                                                                            // seed 2 went the other way
  CHECK(!beats(summary({85.9, 85.9, 85.9}), summary({85.9, 85.9, 85.9})));  // a tie is no win
  CHECK(!beats(summary({61.0, 90.0, 99.0}), summary({60.0, 70.0, 98.0})));  // higher on every seed, 7 points
                                                                            // within a 20-point spread
  CHECK(!beats(summary({90.0}), summary({50.0})));                          // one seed: spread unknown
  CHECK(clearly_higher({3.0, 4.0}, {1.0, 2.0}));                            // 2 apart, spread 0.71
  CHECK(spread({1.0, 2.0, 3.0}) == doctest::Approx(1.0));
  CHECK(reads(0.53, 0.14) == Reads::SamePosition);
  CHECK(reads(0.12, 0.52) == Reads::MirroredPosition);
  CHECK(reads(0.30, 0.23) == Reads::Both);
  CHECK(reads(0.40, 0.20) == Reads::SamePosition);  // twice: one operand
}

TEST_CASE("lesson 9: the checklist's measurements say what its items claim") {
  const Lesson9 r = run_lesson9();
  // Without positions the layer is permutation-equivariant up to float64 rounding (measured
  // 6.7e-16; the shuffled rows are summed in another order); with them it is not.
  CHECK(r.no_positions_equivariance < 1e-13);
  CHECK(r.with_positions_equivariance > 0.1);
  // The causal mask keeps output 0 from seeing the last token at all (the masked weight is
  // exactly 0); without it the change shows.
  CHECK(r.causal_leak == 0.0);
  CHECK(r.no_causal_leak > 1e-2);
  // One batch overfits (measured 2.617 -> 0.0003), and the recipe beats its schedule without the
  // warm-up (0.0774 against 2.2775 in float64; bounds with margins all the same).
  CHECK(r.one_batch_loss_end < 0.1 * r.one_batch_loss_start);
  // ...from near a uniform guess's ln V (2.617 against ln 12 = 2.485 measured).
  CHECK(std::abs(r.one_batch_loss_start - std::log(static_cast<double>(r.vocab))) < 0.25 * std::log(static_cast<double>(r.vocab)));
  CHECK(r.recipe_loss < 0.5 * r.no_warmup_loss);
  CHECK(r.no_warmup_rates[0] / r.recipe_rates[0] == doctest::Approx(1000.0));  // 100^1.5: the first step
  CHECK(r.no_warmup_rates[1] / r.recipe_rates[1] == doctest::Approx(10.0));    // the peaks: step 1 and step 100
  REQUIRE(r.gradient_norms.size() == 4);  // embed, 1 encoder layer, 1 decoder layer, generator
  for (const auto& [part, n] : r.gradient_norms) {
    INFO(part);
    CHECK(std::isfinite(n));
    CHECK(n > 0.0);
  }
}
