// Lesson 11's claims, asserted (lesson11_positions.cpp): without positions the model is
// permutation-equivariant and cannot learn to reverse; with RoPE the scores depend on m − n
// only; every scheme with positions learns the reverse task. The steps each took move with the
// BLAS kernel and the thread count (float32 training), so only what holds on all is asserted.
#include <doctest/doctest.h>

#include <cmath>

#include "lessons/lesson11_positions.h"

using namespace lessons;

TEST_CASE("lesson 11: no positions cannot tell a sequence from its permutation; RoPE is relative; positions learn reverse") {
  const Lesson11 r = run_lesson11();
  REQUIRE(r.permutation_gap.size() == 4);
  CHECK(r.permutation_changed > 0);
  // float64 logits of order 1 through two blocks: the same sums in another row order, rounding only.
  CHECK(r.permutation_gap[0] < 1e-12);
  for (size_t i = 1; i < 4; ++i) CHECK(r.permutation_gap[i] > 1e-3);  // each scheme sees the shuffle
  // q·k of 16 float64 features of order 1 after rotations by angles up to 115 rad: rounding, 1e-13 at most.
  CHECK(r.rope_shift_gap < 1e-12);
  CHECK(r.rope_diagonal_spread < 1e-12);
  CHECK(r.rope_offset_spread > 1.0);
  CHECK(r.sinusoidal_shift_gap > 0.1);
  REQUIRE(r.steps_to_99.size() == 4);
  for (double a : r.final_accuracy[0]) CHECK(a < 5.0);  // no positions: never a sequence right by more than luck
  CHECK(r.steps_to_99[0][0] == -1);
  for (size_t i = 1; i < 4; ++i) {
    INFO(scheme_name(r.schemes[i]));
    for (size_t s = 0; s < r.steps_to_99[i].size(); ++s) CHECK(r.steps_to_99[i][s] > 0);
  }
  CHECK(r.parameters[1] == r.parameters[0]);  // sinusoids are computed, not learned
  CHECK(r.parameters[2] == r.parameters[0] + r.options.seq_len * r.options.d_model);
  CHECK(r.parameters[3] == r.parameters[0]);  // rotations have no parameters
}
