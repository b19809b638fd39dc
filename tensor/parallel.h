// One knob for every thread cppgrad uses: OpenBLAS's and our own OpenMP loops.
#pragma once

#include <cstdint>

namespace cppgrad {

// Sets the thread count for BLAS and the framework's parallel loops alike (default: the cores).
void set_num_threads(int n);
int get_num_threads();

// Below this much work (elements × work per element) a loop runs on one thread. Each parallel
// region is a fork and a barrier: on a busy machine a barrier can wait a whole scheduler slice
// for a thread that lost its core. With a grain of 32768, seq2seq at 2 threads on a loaded
// 2-core machine ran 9x slower than on one thread; with 262144 it runs faster than on one.
int64_t parallel_grain();
void set_parallel_grain(int64_t work);  // tests lower it to exercise the threaded paths

}  // namespace cppgrad
