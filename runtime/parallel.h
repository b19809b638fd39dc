// One knob for every thread cppgrad uses: OpenBLAS's and our own OpenMP loops, and how that
// count gives way when other programs take the cores.
#pragma once

#include <chrono>
#include <cstdint>

namespace cppgrad {

// Sets the thread count for BLAS and the framework's parallel loops alike (default: the cores,
// or OMP_NUM_THREADS).
void set_num_threads(int n);
int get_num_threads();  // the count set (or the default), even while a busy machine lowers it

// Below this much work (elements × work per element) a loop runs on one thread. Each parallel
// region is a fork and a barrier: on a busy machine a barrier can wait a whole scheduler slice
// for a thread that lost its core. With a grain of 32768, seq2seq at 2 threads on a loaded
// 2-core machine ran 9x slower than on one thread; with 262144 it runs faster than on one.
int64_t parallel_grain();
void set_parallel_grain(int64_t work);  // tests lower it to exercise the threaded paths

// ---- The same bits at any thread count --------------------------------------------------------
// On (the default), a seeded run gives the same bits at 1 thread, at 2, and whatever the load
// back-off below does, for a given BLAS kernel: BLAS always runs on one thread, and cppgrad's own
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
// cores that are left. A training step is hundreds of regions (ours and OpenBLAS's): with one
// busy loop beside it on 2 cores, a copy-task step took 1,560 ms at 2 threads, 45 ms at 1.
//
// So cppgrad watches its own regions. When the calling thread, its share done, waits for the
// others longer than its share took (the region ran slower than it would have on one thread),
// and at least kStallFloor, the machine is busy: every loop and BLAS runs on one thread. After
// 0.2 s the full count is tried again; a try that stalls again within a second waits 4 times as
// long before the next (0.8 s, then 3.2 s at most: a try costs a stall, tens of ms on a very
// busy machine). On a quiet machine no region stalls and nothing changes.
//
// The OpenMP runtime reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when the program starts and
// before any library code runs, so a library cannot choose how threads wait. A user who sets
// OMP_WAIT_POLICY, GOMP_SPINCOUNT or OMP_DYNAMIC has chosen how threads share the machine: then
// the count stays as set (threads_adapt_to_load() is false). set_threads_adapt_to_load(false)
// does the same from code, e.g. for a machine reserved for the program.
bool threads_adapt_to_load();
void set_threads_adapt_to_load(bool on);

// For tests: every region runs on one thread, exactly as while backed off, until called with
// false (then the set count again). It acts whether or not threads adapt to the load.
void force_backed_off(bool on);

// The back-off as a state machine over times in nanoseconds, apart from the clock and from the
// thread counts it leads to (the tests drive it with made-up times).
class LoadBackoff {
 public:
  static constexpr int64_t kStallFloor = 500'000;         // 0.5 ms: below, a thread's wake-up
  static constexpr int64_t kFirstWait = 200'000'000;      // 0.2 s on one thread, then a try
  static constexpr int64_t kGrowth = 4;                   // a try stalling within kProbation: 4x longer
  static constexpr int64_t kLongestWait = 3'200'000'000;  // 3.2 s
  static constexpr int64_t kProbation = 1'000'000'000;    // 1 s

  // Whether regions starting at `now` should run on one thread.
  bool backed_off(int64_t now);
  // A region ran on several threads: the calling thread worked `work` on its share, then waited
  // `wait` at the end for the others. Returns true when this makes it back off. The first region
  // reported is not judged: it is the one that starts the threads.
  bool report(int64_t work, int64_t wait, int64_t now);
  int64_t current_wait() const { return wait_; }

 private:
  int64_t retry_at_ = -1;     // while backed off: when to try the full count again
  int64_t tried_at_ = -1;     // when the full count was last tried again
  int64_t wait_ = kFirstWait;
  bool started_ = false;
};

// For the loops in iterate.h: how many threads a region starting now gets (1 inside a region,
// or while backed off), and how it went: the calling thread worked `work_ns` on its share, then
// waited `wait_ns` for the others (RegionClock measures both).
int region_threads();
void report_parallel_region(int64_t work_ns, int64_t wait_ns);
class RegionClock {
 public:
  static int64_t now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void caller_begins() { begin_ = now(); }  // by thread 0, inside the region
  void caller_ends() { end_ = now(); }
  void report_region() const;  // after the region, on the calling thread

 private:
  int64_t begin_ = 0, end_ = 0;
};

}  // namespace cppgrad
