// One knob for every thread cppgrad uses: OpenBLAS's and our own OpenMP loops.
#pragma once

#include <cstdint>

namespace cppgrad {

// Sets the thread count for BLAS and the framework's parallel loops alike (default: the cores).
void set_num_threads(int n);
int get_num_threads();

// Below this many elements a loop runs on one thread: starting threads costs more than it saves.
inline constexpr int64_t kParallelGrain = 32768;

}  // namespace cppgrad
