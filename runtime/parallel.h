// One knob for every thread cppgrad uses: OpenBLAS's and our own OpenMP loops, and how that
// count gives way when other programs take the cores.
#pragma once

#include <cstdint>

namespace cppgrad {

// Sets the thread count for BLAS and the framework's parallel loops alike (default: the cores,
// or OMP_NUM_THREADS).
void set_num_threads(int n);
int get_num_threads();  // the count set (or the default), even while a busy machine lowers it

// Below this much work (elements × work per element) a loop runs on one thread. Each parallel
// region is a fork and a barrier: on a busy machine a barrier can wait a whole scheduler slice
// for a thread that lost its core, so small loops are not worth it (the grain was set on a loaded
// 2-core machine: results/2026-11-23-suite-quiet.md).
int64_t parallel_grain();
void set_parallel_grain(int64_t work);  // tests lower it to exercise the threaded paths

// ---- The same bits at any thread count --------------------------------------------------------
// On (the default), a seeded run gives the same bits at 1 thread, at 2, and whatever the load
// load below does to the count, for a given BLAS kernel: BLAS always runs on one thread, and cppgrad's own
// threads split each large matrix product into blocks of rows (or columns) of the result at
// boundaries set by the shapes alone (tensor/kernels/gemm.h), as every other parallel loop of
// cppgrad does. (OpenBLAS's OpenMP build takes OpenMP's default count as its own at every call,
// so OpenMP's default count, omp_get_max_threads(), is 1 in this mode; cppgrad's own regions ask
// for get_num_threads().) Off, BLAS runs on the set count and splits each product its own way, which
// rounds differently at 1 and 2 threads (OpenBLAS's Haswell kernel does). The environment's
// CPPGRAD_DETERMINISTIC=0 starts it off. bench/README.md measures what it costs.
bool deterministic_threads();
void set_deterministic_threads(bool on);

// ---- Busy machines ----------------------------------------------------------------------------
// When another program takes a core, a parallel region waits at its end for the thread that
// lost it, and OpenMP's waiting threads spin (libgomp: ~300,000 rounds, milliseconds) on the
// cores that are left. A training step is hundreds of regions (ours and OpenBLAS's), so one
// busy program beside it can make 2 threads many times slower than 1
// (results/2026-11-23-suite-busy-machine.md).
//
// So each region runs on the cores that other programs leave free, at least 1 and at most the
// count set: runtime/load.h counts other processes' runnable tasks over the last 100 ms (a count
// of tasks, not one region's wait: on a virtual machine a late wake-up is no sign of load). On a
// quiet machine that is the count set.
//
// The OpenMP runtime reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when the program starts and
// before any library code runs, so a library cannot choose how threads wait. A user who sets
// OMP_WAIT_POLICY, GOMP_SPINCOUNT or OMP_DYNAMIC has chosen how threads share the machine: then
// the count stays as set (threads_adapt_to_load() is false). set_threads_adapt_to_load(false)
// does the same from code, e.g. for a machine reserved for the program.
bool threads_adapt_to_load();
void set_threads_adapt_to_load(bool on);

// For tests: every region runs on one thread, exactly as on a busy machine, until called with
// false (then the set count again). It acts whether or not threads adapt to the load.
void force_backed_off(bool on);

// For the loops in iterate.h: how many threads a region starting now gets (1 inside a region).
int region_threads();

}  // namespace cppgrad
