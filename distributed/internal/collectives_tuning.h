// How the collectives run, apart from what they compute: the wait, the all-reduce's algorithm and
// the ring's segments. Internal (not installed): the defaults are measured choices
// (docs/scaling.md), and the benches and tests that compare them set them here, or, for a whole
// run, through the environment:
//
//   CPPGRAD_ALLREDUCE_WAIT=adaptive|spin|polite       how a rank waits (default adaptive)
//   CPPGRAD_ALLREDUCE_ALGORITHM=ring|exchange|mpi     all_reduce's algorithm at every size
//                                                     (exchange: 2 ranks only)
//   CPPGRAD_RING_SEGMENT_BYTES, CPPGRAD_RING_IN_FLIGHT, CPPGRAD_RING_WHOLE_CHUNK_BYTES
//                                                     the ring's pipeline (RingPipeline below)
//
// read when first needed. Every rank of a job must make the same choices.
#pragma once

#include <cstdint>

namespace cppgrad::distributed::tuning {

// ---- how a rank waits for a collective ---------------------------------------------------------
// Spin: test in a loop, as MPI_Wait does (the shortest wait when every rank has a core).
// Polite: test, then sleep between tests, giving the core to the ranks being waited for (the
// faster one on a machine with more runnable tasks than cores). Adaptive (the default): spin
// while the machine has a core for this rank, politely when it has not (runtime/load.h says).
enum class WaitPolicy { Adaptive, Spin, Polite };
void set_wait_policy(WaitPolicy policy);
WaitPolicy get_wait_policy();  // set_wait_policy's, else CPPGRAD_ALLREDUCE_WAIT's, else Adaptive

// ---- which all-reduce -------------------------------------------------------------------------
// From 64 KiB up between 2 or 3 ranks: a ring (reduce-scatter + all-gather, pipelined in
// segments: RingPipeline below), each rank sending 2(N-1)/N of the bytes; below 64 KiB between
// 2 ranks, one exchange of the whole tensor; otherwise MPI_Iallreduce, which Open MPI runs as a
// binomial tree (below 4 ranks or 64 KiB) or as recursive halving + doubling. docs/scaling.md
// has the costs; the cost model of bench/cost_model.h asks this function too.
enum class AllReduceAlgorithm { Ring, Exchange, BinomialTree, HalvingDoubling };
AllReduceAlgorithm all_reduce_algorithm(int64_t bytes, int world);

// ---- the ring's pipeline ------------------------------------------------------------------------
// The ring moves each rank's chunk in segments of `segment_bytes` (the last one of a chunk
// shorter), up to `in_flight` of them on the way at once, so that a segment is added while it
// is still in cache and while the next ones travel (Open MPI's segmented ring and NCCL's
// pipelined one do the same); a chunk of at most `whole_chunk_bytes` moves in one piece.
// segment_bytes <= 0: one segment per chunk (no pipeline). The default depends on transport()
// (process_group.h). Over shared memory: 256 KiB segments, 4 on the way, and chunks up to
// 1 MiB whole: the rank that receives a segment copies it itself there, then adds it, on one
// core, so segments overlap nothing and only keep the copy in cache for the add, which a chunk
// of 1 MiB still is. Over a network: segments small enough for MPI to send without waiting
// for the receiver's go-ahead (32 KiB under Open MPI's default eager limit of 64 KiB), 8 on
// the way. Both chosen with bench/bench_allreduce --segments (docs/scaling.md).
// reset_ring_pipeline() returns to the default (the environment's fields over the transport's).
struct RingPipeline {
  int64_t segment_bytes = 256 << 10;
  int in_flight = 4;
  int64_t whole_chunk_bytes = 0;
};
void set_ring_pipeline(RingPipeline pipeline);
RingPipeline get_ring_pipeline();
void reset_ring_pipeline();

}  // namespace cppgrad::distributed::tuning
