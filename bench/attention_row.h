// One row of the attention table (bench_attention, bench_attention_torch): its command line and
// the tab-separated line it prints, shared by the cppgrad and libtorch programs so that both
// measure and report alike.
//
//   <program> --one <side> <T> <causal 0|1> [--threads N] [--budget S]
//
// prints  side  T  causal  threads  median_ms  min_ms  reps  row_mb  alloc_mb
// where row_mb is the process's peak resident size (VmHWM) minus its resident size just before
// the row's tensors were made, and alloc_mb cppgrad's allocator peak of live tensor bytes (NAN
// for libtorch, which has no such count on the CPU).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "harness.h"

namespace bench {

// Batch 1, 8 heads, head dim 64: the shape.
constexpr long kAttentionBatch = 1, kAttentionHeads = 8, kAttentionHeadDim = 64;

struct AttentionRow {
  std::string side;  // fused, materialize, torch
  long T = 0;
  bool causal = false;
  int threads = 1;
  double budget_s = 2.0;
};

// Reads `--one side T causal [--threads N] [--budget S]`; false (with a message) on anything else.
inline bool parse_attention_row(int argc, char** argv, AttentionRow& row) {
  if (argc < 5 || std::strcmp(argv[1], "--one") != 0) return false;
  row.side = argv[2];
  row.T = std::atol(argv[3]);
  row.causal = std::atoi(argv[4]) != 0;
  for (int i = 5; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) row.threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--budget")) row.budget_s = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return false;
    }
  }
  if (row.T <= 0 || row.threads <= 0) {
    std::fprintf(stderr, "--one: T and --threads must be positive\n");
    return false;
  }
  return true;
}

// The long rows (seconds a step) get one warm-up and three timed steps; short ones fill the budget.
inline Budget attention_budget(const AttentionRow& row) {
  return {.budget_s = row.budget_s, .warm_up = 1, .min_reps = 3};
}

inline void print_attention_line(const AttentionRow& row, const Timing& t, double rss_before_mb,
                                 double alloc_mb) {
  std::printf("%s\t%ld\t%d\t%d\t%.3f\t%.3f\t%d\t%.1f\t%.1f\n", row.side.c_str(), row.T, row.causal ? 1 : 0,
              row.threads, t.median_s * 1e3, t.min_s * 1e3, t.reps, memory_mb("VmHWM") - rss_before_mb, alloc_mb);
  std::fflush(stdout);
}

}  // namespace bench
