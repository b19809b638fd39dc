// The all-reduce cost model of docs/scaling.md, for the algorithm cppgrad's all_reduce really
// runs (distributed::all_reduce_algorithm): the time of one all-reduce of S bytes on N ranks
// over links of bandwidth B (bytes/s) and latency alpha (s, one message one way).
//
//   ring (N < 4, S >= 64 KiB): 2(N-1) rounds; in each every rank sends S/N to the next
//       T = 2(N-1) alpha + 2(N-1)/N S/B
//   exchange (N = 2, S < 64 KiB): each rank sends all of S to the other at once
//       T = alpha + S/B   (2S/B on a half-duplex link)
//   binomial tree (N = 3 below 64 KiB, any N below it): a reduce to rank 0 and a broadcast back, ceil(log2 N) rounds
//       each, every round carrying all S:   T = 2 ceil(log2 N) (alpha + S/B)
//   recursive halving + doubling (Rabenseifner; N >= 4, S >= 64 KiB): log2 N rounds each way,
//       halving what is sent:   T = 2 log2(N) alpha + 2(N-1)/N S/B   (N a power of two)
//
// A full-duplex link (Ethernet, a veth pair) carries both directions at B at once. One
// loopback shaped by one qdisc is half duplex: every rank's bytes pass the same queue, so a
// round in which all N ranks send S/N takes S/B, not S/(N B).
#pragma once

#include <cmath>

#include "distributed/collectives.h"

namespace bench {

struct Link {
  double bytes_per_second;
  double alpha;              // seconds
  bool half_duplex = false;  // one queue for every direction (a shaped loopback)
};

inline const char* algorithm_name(cppgrad::distributed::AllReduceAlgorithm a) {
  using cppgrad::distributed::AllReduceAlgorithm;
  switch (a) {
    case AllReduceAlgorithm::Ring: return "ring";
    case AllReduceAlgorithm::Exchange: return "exchange";
    case AllReduceAlgorithm::BinomialTree: return "binomial tree";
    case AllReduceAlgorithm::HalvingDoubling: return "halving+doubling";
  }
  return "?";
}

// Seconds for one all-reduce of `bytes` on `n` ranks, as cppgrad runs it.
inline double all_reduce_seconds(double bytes, int n, const Link& link) {
  using cppgrad::distributed::AllReduceAlgorithm;
  if (n <= 1) return 0;
  const double S = bytes, B = link.bytes_per_second, a = link.alpha;
  switch (cppgrad::distributed::all_reduce_algorithm(static_cast<int64_t>(bytes), n)) {
    case AllReduceAlgorithm::Ring: {
      const double rounds = 2.0 * (n - 1);
      const double bytes_per_round = link.half_duplex ? S : S / n;
      return rounds * (a + bytes_per_round / B);
    }
    case AllReduceAlgorithm::Exchange: return a + (link.half_duplex ? 2 * S : S) / B;
    case AllReduceAlgorithm::BinomialTree: return 2 * std::ceil(std::log2(n)) * (a + S / B);
    case AllReduceAlgorithm::HalvingDoubling: {
      const double steps = std::log2(n);
      return 2 * steps * a + (link.half_duplex ? 2.0 * (n - 1) * S : 2.0 * (n - 1) / n * S) / B;
    }
  }
  return 0;
}

// The binomial tree at every size, what cppgrad ran before (MPI_IN_PLACE): for comparison.
inline double tree_seconds(double bytes, int n, const Link& link) {
  return n <= 1 ? 0 : 2 * std::ceil(std::log2(n)) * (link.alpha + bytes / link.bytes_per_second);
}

}  // namespace bench
