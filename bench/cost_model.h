// The all-reduce cost model of docs/scaling.md, for the algorithm cppgrad's all_reduce really
// runs (distributed::tuning::all_reduce_algorithm): the time of one all-reduce of S bytes on N
// ranks over links of bandwidth B (bytes/s) and latency alpha (s, one message one way).
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
//
// The endpoints have a bandwidth too: a rank's own path through MPI, the kernel's TCP and (on
// the emulated link) bench/netdelay moves at most H bytes/s each way while it sends and
// receives at once (measured on an unshaped loopback: bench_allreduce --exchange-only). A
// round takes as long as the slower of the two, link or endpoints (their bandwidths are the
// min, not a serial sum: measured, a 10 Gbit/s link took no longer than no shaping at all, and
// at 1 Gbit/s the link alone predicts within 5%): a ring round is
//       alpha + max(link bytes / B, S/N / H)
// and likewise for the others, each rank's bytes of a round over H. H = 0: endpoints as fast
// as any link (the model of the projections to 8 and 64 machines). bench_allreduce prints the
// serial sum (link time + endpoint time) beside it, so that the runs can tell them apart.
#pragma once

#include <algorithm>
#include <cmath>

#include "distributed/internal/collectives_tuning.h"

namespace bench {

struct Link {
  double bytes_per_second;
  double alpha;              // seconds
  bool half_duplex = false;  // one queue for every direction (a shaped loopback)
  double endpoint_bytes_per_second = 0;  // H: what a rank's own path moves each way at once (0: no limit)
  bool in_series = false;  // the alternative the measurements refute: link and endpoint times add up
};

// Seconds to move one round: `on_link` bytes through the link, `per_rank` bytes in and out
// of each rank, whichever is slower.
inline double round_seconds(double on_link, double per_rank, const Link& link) {
  const double through_link = on_link / link.bytes_per_second;
  const double through_endpoints = link.endpoint_bytes_per_second > 0 ? per_rank / link.endpoint_bytes_per_second : 0;
  return link.in_series ? through_link + through_endpoints : std::max(through_link, through_endpoints);
}

inline const char* algorithm_name(cppgrad::distributed::tuning::AllReduceAlgorithm a) {
  using cppgrad::distributed::tuning::AllReduceAlgorithm;
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
  using cppgrad::distributed::tuning::AllReduceAlgorithm;
  if (n <= 1) return 0;
  const double S = bytes, a = link.alpha;
  switch (cppgrad::distributed::tuning::all_reduce_algorithm(static_cast<int64_t>(bytes), n)) {
    case AllReduceAlgorithm::Ring: {
      const double rounds = 2.0 * (n - 1);
      const double bytes_per_round = link.half_duplex ? S : S / n;
      return rounds * (a + round_seconds(bytes_per_round, S / n, link));
    }
    case AllReduceAlgorithm::Exchange: return a + round_seconds(link.half_duplex ? 2 * S : S, S, link);
    case AllReduceAlgorithm::BinomialTree: return 2 * std::ceil(std::log2(n)) * (a + round_seconds(S, S, link));
    case AllReduceAlgorithm::HalvingDoubling: {
      const double steps = std::log2(n);
      return 2 * steps * a +
             round_seconds(link.half_duplex ? 2.0 * (n - 1) * S : 2.0 * (n - 1) / n * S, 2.0 * (n - 1) / n * S, link);
    }
  }
  return 0;
}

// The binomial tree at every size, what cppgrad ran before (MPI_IN_PLACE): for comparison.
inline double tree_seconds(double bytes, int n, const Link& link) {
  return n <= 1 ? 0 : 2 * std::ceil(std::log2(n)) * (link.alpha + bytes / link.bytes_per_second);
}

}  // namespace bench
