// The threads of cppgrad's own parallel loops: how many a loop gets (one below the grain, fewer
// on a busy machine: parallel.h), each worker in the caller's float mode (float_mode.h) and
// traced under the caller's kernel (profile.h). The loops themselves are serial, and written
// once: tensor/iterate.h's StridedLoop walks a range of elements, parallel_runs hands each
// thread its range. A first reading skips this file.
#pragma once

#include <omp.h>

#include <cstdint>

#include "float_mode.h"
#include "parallel.h"
#include "profile.h"

namespace cppgrad {

// The threads a loop of `work` (elements × work per element) gets: 1 below parallel_grain(), else
// what region_threads() leaves it on this machine now.
inline int threads_for(int64_t work) { return work >= parallel_grain() ? region_threads() : 1; }

// Calls part_fn(part, parts) once on each of `threads` threads (part 0 on the caller's).
template <class PartFn>
void run_on_threads(int threads, PartFn&& part_fn) {
  const char* kernel = profile::current_scope_name();  // a worker's share is traced under its name
#pragma omp parallel num_threads(threads)
  {
    adopt_float_mode();  // the caller's set_flush_denormal
    const int64_t parts = omp_get_num_threads(), part = omp_get_thread_num();
    profile::Span share("worker", part == 0 || kernel == nullptr ? "" : kernel);  // thread 0's is the kernel's own
    part_fn(part, parts);
  }
}

// loop.for_each_run(body) on threads: the loop's numel() elements, in row-major order, cut into
// one equal range per thread, each walked by loop.for_runs_in(body, first, last). A range starts
// or ends inside a run when it must, so a single contiguous run goes parallel too; each element
// is written by exactly one thread, so the result does not depend on the thread count.
template <class Loop, class Body>
void parallel_runs(const Loop& loop, Body&& body) {
  const int64_t total = loop.numel();
  const int threads = threads_for(total);
  if (threads <= 1) return loop.for_each_run(body);
  run_on_threads(threads, [&](int64_t part, int64_t parts) {
    // A copy per thread, so the compiler keeps the body's captures in registers (see parallel_for).
    auto local = body;
    loop.for_runs_in(local, total * part / parts, total * (part + 1) / parts);
  });
}

}  // namespace cppgrad
