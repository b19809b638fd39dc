// Lesson 11's claims, asserted (lesson11_positions.cpp): without positions the model is
// permutation-equivariant and cannot learn to reverse; with RoPE the scores depend on m − n
// only; added positions (sinusoidal, learned) learn the reverse task within the budget, rotary
// ones learn it more slowly. The steps each took move with the BLAS kernel and the thread count
// (float32 training), so only what holds on all is asserted.
#include <doctest/doctest.h>

#include <cmath>

#include "lessons/lesson11_positions.h"

using namespace lessons;

TEST_CASE("lesson 11: no positions cannot tell a sequence from its permutation, RoPE is relative, added positions learn reverse") {
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
  // No positions: never a sequence right by more than luck (the chance of 8 right digits is nil).
  for (double a : r.final_accuracy[0]) CHECK(a < 5.0);
  CHECK(r.steps_to_99[0][0] == -1);
  // The added positions hand the model what reversing needs: both reach 99% within the budget
  // (200 and 60 steps here; the step counts move with the BLAS kernel, not whether they arrive).
  for (size_t i : {1, 2}) {
    INFO(scheme_name(r.schemes[i]));
    for (int64_t steps : r.steps_to_99[i]) CHECK(steps > 0);
  }
  // Rotary positions are relative: the encoder has to infer where it stands from the ends of the
  // sequence. Within the short budget it is learning (well above none), not done.
  for (double a : r.final_accuracy[3]) CHECK(a > 5.0);
  CHECK(r.parameters[1] == r.parameters[0]);  // sinusoids are computed, not learned
  CHECK(r.parameters[2] == r.parameters[0] + r.options.seq_len * r.options.d_model);
  CHECK(r.parameters[3] == r.parameters[0]);  // rotations have no parameters
}
