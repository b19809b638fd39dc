// Lesson 11: positions. Sinusoidal, learned or rotary, and what happens with none?
// (lesson11_positions.cpp). Kept apart from lessons.h, as lesson 10: run_lesson11() computes,
// print() explains from what it measured, test_lesson11.cpp asserts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lessons {

// How a model learns where each token stands: not at all, the paper's sinusoids added to the
// embeddings, a learned vector per position added, or RoPE's rotation of queries and keys.
enum class PositionScheme { None, Sinusoidal, Learned, Rotary };
std::string scheme_name(PositionScheme s);

struct Lesson11Options {
  int64_t seq_len = 8, vocab = 10;        // the reverse task: 8 digits in, the same 8 reversed out
  int64_t d_model = 32, heads = 4, layers = 2;
  int64_t batch = 32, max_steps = 800, eval_every = 20;
  int64_t seeds = 1;                      // per scheme; the lesson's long run uses more
};

struct Lesson11 {
  Lesson11Options options;
  std::vector<PositionScheme> schemes{PositionScheme::None, PositionScheme::Sinusoidal, PositionScheme::Learned,
                                      PositionScheme::Rotary};
  // 1. A permutation π of the input: max |f(π·x) − π·f(x)| of the untrained model's logits, per
  // scheme, in float64. 0 (to rounding) means the model cannot tell x from π·x but by
  // permuting its answer.
  std::vector<double> permutation_gap;
  int64_t permutation_changed = 0;  // positions the permutation moves (of seq_len)
  // 2. The score of a query at position m and a key at n, for m, n < 16, d_k 16, in float64:
  double rope_shift_gap = 0.0;        // max |s(m + 100, n + 100) − s(m, n)| with RoPE
  double rope_diagonal_spread = 0.0;  // the largest spread of s(m, n) over pairs of one offset m − n
  double rope_offset_spread = 0.0;    // max − min of s over all pairs: the offset does matter
  double sinusoidal_shift_gap = 0.0;  // the same shift with sinusoids added to q and k
  // 3. Reverse: held-out exact-sequence accuracy (%), per scheme (the rows) and seed.
  std::vector<std::vector<int64_t>> steps_to_99;  // -1: not reached within max_steps
  std::vector<std::vector<double>> final_accuracy;  // at the step where it stopped
  std::vector<int64_t> parameters;                  // per scheme
  double chance_token_accuracy = 0.0;               // 1 / vocab: a token guessed
};
Lesson11 run_lesson11(const Lesson11Options& options = {});
void print(const Lesson11& r);

}  // namespace lessons
