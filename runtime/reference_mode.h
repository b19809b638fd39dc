#pragma once
// One switch between the two forms of every op. The reference form is written as plainly as the
// op's math, and is what a reader of the tour reads; the fast form (a fused kernel, a vectorised
// loop, an in-place accumulation) computes the same thing faster and lives where the tour says to
// skip. Reference mode runs every op on its reference, so a test (or a doubtful user) can compare
// the two: CTest runs the gradient checks, the parity cases and the examples' learning tests in
// both modes.
//
// The switch starts from the environment (CPPGRAD_REFERENCE=1 turns it on) and is changed by
// set_reference_mode. Flip it between steps, not while another thread runs an op.
#include "scoped_flag.h"

namespace cppgrad {

bool reference_mode();
void set_reference_mode(bool on);

// Reference mode on (or off) for a scope, then back to what it was.
struct ReferenceModeGuard : ScopedFlag<reference_mode, set_reference_mode> {
  explicit ReferenceModeGuard(bool on = true) : ScopedFlag(on) {}
};

}  // namespace cppgrad
