// The lessons of issue #7: seven questions learners ask about multi-head attention, each
// answered by a computation whose numbers prove the answer.
//
// Each lesson is a pair: run_lessonN() computes and returns its numbers (the tests in
// test_lessons.cpp assert them), and print() shows them with the explanation (the `lesson`
// program, main.cpp). The computation and its explanation live in lessonN_<topic>.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cppgrad.h"

namespace lessons {

// ---- 1. Is the embedding split between the heads, or copied to each? (lesson1_split.cpp) ----
struct Lesson1 {
  int64_t d_model = 16, heads = 4;
  cppgrad::Shape w_q_head_shape;                     // W_Q_i as stored: (d_k, d_model), the paper's transposed
  std::vector<std::vector<double>> gradient_by_head;  // ∂ sum(Q_i) / ∂x_j at token 0, per head i
  std::vector<int64_t> features_read;                // per head: how many of those are nonzero
  std::vector<double> gradient_if_cut;               // the same, had head 0 read only its slice
  int64_t features_read_if_cut = 0;
  double fused_vs_per_head = 0.0;  // max |reshape(x·W_Q)[head i] - x·W_Q_i|
};
Lesson1 run_lesson1();
void print(const Lesson1& r);

// ---- 2. Why 3 Linear layers for Q, K, V and not 3·h? (lesson2_fused.cpp) ------------------
struct Lesson2 {
  int64_t d_model = 16, heads = 4;
  double stacking_identity = 0.0;  // max |x·[W_0 ... W_{h-1}] - [x·W_0 ... x·W_{h-1}]|
  int64_t fused_parameters = 0, per_head_parameters = 0;
  int64_t fused_weight_matrices = 0, per_head_weight_matrices = 0;
  double three_linear_identity = 0.0;  // max |x·[W_Q W_K W_V] - [x·W_Q x·W_K x·W_V]|: 3 Linear(E,E) = 1 (3E,E)
  // (what, max |MultiheadAttention - PerHeadAttention|) for the output and every gradient
  std::vector<std::pair<std::string, double>> differences;
  // Multiply-adds of the Q, K, V projections, from the layers' weight shapes: equal.
  int64_t fused_projection_macs = 0, per_head_projection_macs = 0;
  // Cost, float32, a larger layer (d_model 128, 8 heads, batch 8 of 32 tokens), forward+backward.
  int64_t timed_d_model = 128, timed_heads = 8;
  int64_t fused_gemm_calls = 0, per_head_gemm_calls = 0;  // BLAS calls in one forward+backward
  double fused_ms = 0.0, per_head_ms = 0.0;               // medians, measured side by side (not asserted)
  // "The same" needs the same weights: left to their defaults (d_model 512, 8 heads) the two
  // layers start differently. Standard deviation of the query weights, largest |query bias|.
  int64_t init_d_model = 512;
  double fused_init_weight_std = 0.0, per_head_init_weight_std = 0.0;
  double fused_init_bias_max = 0.0, per_head_init_bias_max = 0.0;
};
Lesson2 run_lesson2();
void print(const Lesson2& r);

// ---- 3. Do more heads mean more parameters, or different outputs? (lesson3_heads.cpp) ------
struct Lesson3 {
  int64_t d_model = 512;
  std::vector<int64_t> head_counts{1, 2, 4, 8};
  std::vector<int64_t> fused_parameters, per_head_parameters;  // one per head count
  double random_weights_diff = 0.0;    // max |out(h=1) - out(h=8)|, the same random weights
  double ones_diff = 0.0;              // ... every weight and bias set to one
  double heads_differ_by = 0.0;        // h = 8, all ones: max |head i's attention - head 0's|
  double largest_score_h8 = 0.0;       // all ones: the largest |score| at h = 8
  int64_t one_hot_rows_h1 = 0, rows_h1 = 0, one_hot_rows_h8 = 0, rows_h8 = 0;
  double ones_small_input_diff = 0.0;  // all ones, inputs / 100: max |out(h=1) - out(h=8)|
  double ones_small_input_size = 0.0;  // ... and max |out(h=1)|, for scale
  // The identity behind it, any weights: the h = 1 score is (1/√h)·Σ of the h heads' scores.
  double score_identity = 0.0;         // max |S(h=1) - (1/√8)·Σ_i S_i(h=8)|, random weights
  double score_identity_size = 0.0;    // max |S(h=1)|, for scale
  // All ones, over 20 random inputs each of 12 and 64 tokens: how many give h = 1 and h = 8
  // bit-identical outputs, and the largest difference (relative to the output's size) otherwise.
  int64_t ones_inputs = 20, ones_identical_12 = 0, ones_identical_64 = 0;
  double ones_worst_relative_diff = 0.0;
  double ones_smallest_top_gap = 0.0;  // all ones, h = 8: min over rows of (largest - second) score
  double ones_median_top_gap = 0.0;    // ... and its median
  // PyTorch's names and shapes of the d_model 512 layer's parameters, and their counts.
  std::vector<std::pair<std::string, cppgrad::Shape>> parameter_shapes;
  std::vector<int64_t> parameter_counts;
};
Lesson3 run_lesson3();
void print(const Lesson3& r);

// ---- 4. How do heads stay diverse? (lesson4_diversity.cpp) -------------------------------
// The small seq2seq model and recipe lessons 4 and 8 train (training.h): d_model 32, 1+1 layers,
// sequences of up to 8 symbols, Adam with the paper's warm-up (factor 1, 100 steps), no dropout.
struct SmallSeq2Seq {
  int64_t d_model = 32, heads = 4, layers = 1, ff = 64;
  int64_t steps = 200, batch = 32, seq_len = 8, vocab = 12, warmup = 100;
};

struct Lesson4Options : SmallSeq2Seq {
  std::string task = "copy";  // or reverse, sort
  uint64_t seed = 1;
  int64_t seeds = 1;       // --seeds N: the identical-heads comparison on seeds seed .. seed+N-1
  int64_t held_out = 128;  // sequences the figures are measured on
  // A `seq2seq --save` checkpoint to use as the trained model instead of training one here.
  // Its task and sizes replace the ones above; seq_len must match the run that wrote it.
  std::string checkpoint;
};
// How alike the heads of each attention layer are, as the mean pairwise cosine similarity,
// averaged over the model's attention layers. 1 = copies; what unrelated heads score is the
// freshly initialised model's figure (about 0 for the weight products, but far above 0 for the
// attention maps, whose nearly even rows all look alike).
struct Diversity {
  double w_q = 0.0;           // of the raw query blocks W_Q_i (misleading: see the lesson)
  double query_key = 0.0;     // of the query-key products W_Q_iᵀ·W_K_i (d_model, d_model)
  double output_value = 0.0;  // of the output-value products W_O_i·W_V_i (d_model, d_model)
  double attention = 0.0;     // of the heads' attention maps on held-out inputs
  double largest_weight = 0.0;  // how sharp the maps are: mean over rows of the largest weight
  double even_weight = 0.0;     // ... and what it would be if every row spread its weight evenly
  double accuracy = 0.0;   // held-out sequences answered exactly, in %
  // Copy task: per head of the last cross-attention layer, the mean weight that target
  // position t puts on source position t, the symbol it must copy.
  std::vector<double> copied_symbol_weight;
  struct Layer {
    std::string name;  // "transformer.encoder.layers.0.self_attn", ...
    double w_q = 0.0, query_key = 0.0, output_value = 0.0, attention = 0.0;
  };
  std::vector<Layer> layers;  // the cosines, layer by layer
};
// The mechanism, kernel-independent (lesson4_copies.cpp): a two-head attention layer, each head
// its own tensors and calls, fits a teacher layer whose heads differ, from starts that differ
// by 0 (exact copies), by ε, by attention dropout's masks, and by the default initialisation.
struct Lesson4Copies {
  int64_t d_model = 16, heads = 2, tokens = 6, sequences = 32, steps = 300;
  uint64_t seed = 4;
  double lr = 0.01, dropout = 0.1;
  std::vector<double> epsilons{1e-12, 1e-9, 1e-6, 1e-3};
  double target_size = 0.0;            // the teacher's output's mean square, for the losses' scale
  std::vector<int64_t> steps_measured;  // 0, 1, 3, 10, 30, ... and the last
  struct Start {
    std::string what;
    double epsilon = 0.0, dropout = 0.0;
    std::vector<double> apart;       // max |head i's weights - head 0's| at steps_measured
    double gradients_apart = 0.0;    // max |head i's gradient - head 0's| over every step
    double loss_end = 0.0;           // after the last step, without dropout
  };
  // exact copies; one copy moved by each ε; exact copies with dropout; the default initialisation
  std::vector<Start> starts;
};
Lesson4Copies run_lesson4_copies();
void print(const Lesson4Copies& r);
// The smallest ε's gap, per step, over the last two measured steps at which it is below 1e-3.
double growth_per_step(const Lesson4Copies& r);

struct Lesson4 {
  Lesson4Options options;
  Lesson4Copies copies;  // the mechanism; the rest is the seq2seq model's figures
  std::string trained_on;  // "copy task, 200 steps here" or the checkpoint's path
  std::string blas_kernel;  // OpenBLAS's core, e.g. "Haswell": the trained figures depend on it
  int threads = 1;          // ... and on the thread count
  Diversity at_init, trained, identical_start;
  double projections_moved = -1.0;  // |ΔW| / |W| of W_Q, W_K, W_V over training; -1 with a checkpoint
  // Head 0 of a float64 layer, its W_Q and W_K (and their biases) negated:
  double negated_w_q_cosine = 0.0;        // cosine(W_Q_0, -W_Q_0): -1
  double negated_query_key_cosine = 0.0;  // cosine of the query-key products before and after: 1
  double negated_weights_diff = 0.0;      // max |attention weights before - after|
  double negated_output_diff = 0.0;       // max |output before - after|
  // Identical start, measured at training steps 0 (the copy itself), 1, 3, 10, 30, ... and
  // the last: the largest difference between any head's parameters and head 0's.
  struct Apart {
    int64_t step = 0;
    double weights = 0.0;   // W_Q, W_K, W_V rows, the query and value biases, W_O's columns
    double key_bias = 0.0;  // the key bias: no effect on any score, so its exact gradient is 0
  };
  // One seed's heads started as copies, trained, beside a random start of the same seed.
  struct SeedRun {
    uint64_t seed = 0;
    std::vector<Apart> apart;  // the gap at the steps above
    double random_accuracy = 0.0, identical_accuracy = 0.0;  // held-out, after training, in %
    double identical_maps = 0.0;  // identical start, trained: its maps' mean pairwise cosine
  };
  std::vector<SeedRun> seed_runs;  // [0] is options.seed, the model measured in full above
  double identical_heads_weight_size = 0.0;  // the largest |weight| of in_proj_weight, for scale
  std::string indivisible_error;             // what MultiheadAttention(30, 4) says
  int64_t own_width_parameters = 0;          // MultiheadAttention(30, 4) with head_dim 8: it builds
};
// What training did to heads started as copies, read from their gap at the last step:
// exactly 0 (this kernel rounds every head alike), still at float32 rounding (below 1e-3), or
// amplified into heads that differ (symmetry broken).
enum class Symmetry { ExactCopies, RoundingLevel, Broken };
Symmetry symmetry_of(const std::vector<Lesson4::Apart>& apart);
// The first nonzero gap (the seed rounding planted), 0 if there is none.
double rounding_seed(const std::vector<Lesson4::Apart>& apart);
Lesson4 run_lesson4(const Lesson4Options& options = {});
void print(const Lesson4& r);

// ---- 5. Why does attention give NaN? (lesson5_nan.cpp) ------------------------------------
struct Lesson5 {
  // A fully masked row (all -inf), by the textbook formulas.
  double row_max = 0.0, shifted = 0.0, shifted_weight = 0.0;  // max, -inf - max, weight
  double unshifted_sum = 0.0, unshifted_weight = 0.0;         // Σ exp(-inf), 0/0
  // That row inside attention: hand-written with the textbook softmax, then cppgrad's.
  int64_t outputs = 0, gradients = 0, value_gradients = 0;
  int64_t naive_nonfinite_outputs = 0, naive_nonfinite_value_gradients = 0;
  int64_t cppgrad_nonfinite_outputs = 0, cppgrad_nonfinite_gradients = 0;
  double masked_query_output = 0.0, masked_query_weights = 0.0;  // largest |value| in that row
  // Rows of scores ±1e4: exp(s)/Σ, exp(s - max)/Σ, and cppgrad's softmax.
  std::vector<double> big_scores, big_unshifted, big_shifted, big_cppgrad;
  // The 1/√d_k scale.
  int64_t d_k = 64;
  struct Softmax {
    double score_std = 0.0, top_weight = 0.0;
    double gradient_norm = 0.0;    // mean per-row |∂L/∂scores|
    double q_gradient_norm = 0.0;  // mean per-row |∂L/∂q|
    double k_gradient_norm = 0.0;  // mean per-row |∂L/∂k|
  };
  Softmax unscaled, scaled;
  // The same for d_k = 64 to 1024 (512 queries, 16 keys, float32): the share of query rows that
  // are one-hot in float32 (largest weight exactly 1), which pass their scores no usable
  // gradient, without and with the scale, and the mean largest weight.
  struct Sweep {
    int64_t d_k = 0;
    double largest_dead_row_gradient = 0.0;  // the largest |∂L/∂score| in any one-hot row
    double dead_rows_unscaled = 0.0, dead_rows_scaled = 0.0;  // fractions of the rows
    double top_weight_unscaled = 0.0, top_weight_scaled = 0.0;
  };
  std::vector<Sweep> sweep;
  // A NaN at a masked position (uninitialised padding: sequence 1's last memory position, the
  // keys and values of a cross-attention), the padding mask given. Non-finite outputs of F::scaled_dot_product_attention, and of
  // nn::MultiheadAttention with key_padding_mask, and its parameters' non-finite gradients.
  int64_t padded_nan_outputs = 0;
  int64_t padded_nan_sdpa_nonfinite = 0, padded_nan_mha_nonfinite = 0, padded_nan_mha_nonfinite_gradients = 0;
  // A mask written for PyTorch 2.x's scaled_dot_product_attention (true = takes part), passed
  // to cppgrad's (true = masked out) as it is. Two sequences of 4 keys; sequence 1's last key
  // is padding, sequence 0 has none.
  int64_t inverted_outputs = 0;               // output elements
  int64_t inverted_textbook_nonfinite = 0;    // NaN from the textbook softmax
  int64_t inverted_cppgrad_nonfinite = 0;     // ... from cppgrad's
  int64_t inverted_zero_rows = 0, inverted_rows = 0;  // cppgrad: query rows whose output is all zero
  double inverted_padding_weight = 0.0;       // cppgrad, sequence 1: the weight each query puts on the padding key
  double inverted_vs_correct = 0.0;           // max |output with the mask as is - with it inverted|
  double inverted_fixed_vs_padding_mask = 0.0;  // logical_not() of it against the intended mask: 0
};
Lesson5 run_lesson5();
void print(const Lesson5& r);

// ---- 6. Do tied weights get their gradients? (lesson6_tied.cpp) --------------------------
struct Lesson6 {
  int64_t vocab = 10, dim = 6;
  std::vector<std::string> parameter_names;
  bool weight_is_shared = false;
  double tied_vs_sum = 0.0;            // max |dW - (dW_in + dW_out)|
  double tied_vs_embedding_use = 0.0;  // max |dW - dW_in|
  double tied_vs_output_use = 0.0;     // max |dW - dW_out|
  int64_t sgd_parameters = 0;          // distinct parameters SGD keeps of the 4 listed
  double sgd_step_vs_once = 0.0;       // max |step - lr·dW|
  double sgd_step_vs_twice = 0.0;      // max |step - 2·lr·dW|
  double adam_largest_move = 0.0;
  double copies_apart_after_one_step = 0.0;
};
Lesson6 run_lesson6();
void print(const Lesson6& r);

// ---- 7. The backward pass written out by hand (lesson7_backward.cpp) --------------------------
struct Lesson7 {
  int64_t batch = 2, tokens = 4, d_model = 8, heads = 2, ff = 16;
  double forward_diff = 0.0;  // max |hand forward - nn::TransformerEncoderLayer's|
  struct Gradient {
    std::string name;
    double diff = 0.0;  // max |hand (or wrong) gradient - autograd's|
    double size = 0.0;  // max |autograd's gradient|, for scale
  };
  std::vector<Gradient> gradients;  // "x" and every parameter (W_Q, W_K, W_V split)
  struct Mistake {
    std::string what;
    std::vector<Gradient> errors;  // in the order of `gradients`
  };
  std::vector<Mistake> mistakes;  // 1 softmax Jacobian, 2 the 1/√d_k, 3 LayerNorm's means
  // The tiny MultiheadAttention (T 3, E 4, h 2), traced: (what, value) in the order computed.
  std::vector<std::pair<std::string, cppgrad::Tensor>> trace;
  std::vector<cppgrad::Tensor> trace_hand;  // dx, dW_in, dW_O by hand
  double trace_vs_autograd = 0.0;           // max |hand - autograd| over those three
  bool trace_gradcheck = false;
  std::string trace_gradcheck_error;
};
Lesson7 run_lesson7();
void print(const Lesson7& r);

// ---- 8. Does the number of heads matter on a task? (lesson8_head_count.cpp) ----------------
struct Lesson8Options : SmallSeq2Seq {
  // Mirror-sum (output t = symbol t + symbol len-1-t, modulo the 4 symbols) needs two source
  // positions for every output; reverse, sort and copy need one.
  std::string task = "mirror-sum";
  std::vector<int64_t> head_counts{1, 2, 4, 8};
  uint64_t seed = 1;
  int64_t seeds = 3;         // seeds seed .. seed+seeds-1, each head count trained on each
  int64_t eval_every = 100;  // held-out accuracy measured every this many steps
  int64_t held_out = 128;
  Lesson8Options() {  // the default run; the lesson's README gives the long one
    steps = 1000;
    vocab = 3 + 4;
  }
};
// What one cross-attention head of a mirror-sum model reads: one operand (at least twice the
// weight on it as on the other) or both.
enum class Reads { SamePosition, MirroredPosition, Both };
Reads reads(double same_weight, double mirrored_weight);
struct Lesson8 {
  Lesson8Options options;
  std::string blas_kernel;  // OpenBLAS's core: float32 training depends on it and on the threads
  int threads = 1;
  struct Run {
    int64_t heads = 0, d_k = 0;
    uint64_t seed = 0;
    int64_t parameters = 0;
    std::vector<std::pair<int64_t, double>> accuracy_at;  // (step, held-out accuracy %)
    int64_t steps_to_99 = -1;  // the first measured step at 99% or more; -1 if none
    double accuracy = 0.0;     // at the last step
    // Reverse: per head of the cross-attention, the mean weight target position t puts on
    // source position len-1-t, the symbol it must write.
    std::vector<double> mirrored_weight;
    // Mirror-sum: the same for source position t, the task's other operand.
    std::vector<double> same_weight;
  };
  std::vector<Run> runs;  // head counts in order, for each seed
  // The first seed's cross-attention maps on one held-out example, per head count:
  // maps[head][target position][source position], and the example's source symbols.
  struct Picture {
    int64_t heads = 0;
    std::vector<std::vector<std::vector<double>>> maps;
  };
  std::vector<Picture> pictures;
  std::vector<int64_t> example_source, example_target;
  std::string example_error;  // empty when every model decodes the example right
};
Lesson8 run_lesson8(const Lesson8Options& options = {});
void print(const Lesson8& r);
// For each head count in order: the accuracy on each seed, their mean and spread (the seeds'
// standard deviation, 0 for one seed), and the mean steps to 99% over the seeds that got there
// (-1 if none) with how many did.
struct HeadCountSummary {
  int64_t heads = 0;
  std::vector<double> per_seed;  // in seed order, the same seeds for every head count
  double accuracy = 0.0, spread = 0.0, steps_to_99 = -1.0;
  int64_t reached_99 = 0, seeds = 0;
};
std::vector<HeadCountSummary> summarise(const Lesson8& r);
// Whether a learned better than b: clearly_higher (measure.h) over their seeds, higher on every
// seed and by more than the larger spread.
bool beats(const HeadCountSummary& a, const HeadCountSummary& b);

// ---- 9. "My Transformer doesn't learn": a checklist, each item measured (lesson9_checklist.cpp) --
struct Lesson9 {
  // Positions: an encoder layer (float64, no dropout) fed a permuted sequence.
  double no_positions_equivariance = 0.0;    // max |f(P·x) - P·f(x)|: 0 up to rounding
  double with_positions_equivariance = 0.0;  // the same with sinusoidal positions added: far from 0
  // Causal mask: how much output 0 moves when the last input token changes.
  double causal_leak = 0.0, no_causal_leak = 0.0;
  // Overfit one batch first: the small seq2seq model on one fixed copy batch, 150 steps.
  double one_batch_loss_start = 0.0, one_batch_loss_end = 0.0;
  int64_t vocab = 0;  // its output's classes: a uniform guess scores ln vocab, where a start belongs
  // Warm-up: the same model and batches, 150 steps, the recipe (warm-up 100) against its schedule
  // with no warm-up: the loss at the end, and the learning rate at step 1 and at its largest.
  double recipe_loss = 0.0, no_warmup_loss = 0.0;
  std::array<double, 2> recipe_rates{}, no_warmup_rates{};
  // Gradient norms per part of the model at initialisation, one batch: (name, norm).
  std::vector<std::pair<std::string, double>> gradient_norms;
};
Lesson9 run_lesson9();
void print(const Lesson9& r);

}  // namespace lessons
