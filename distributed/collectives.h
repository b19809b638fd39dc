// Collectives on tensors, across the ranks of the process group (process_group.h).
//
// Every rank calls the same collectives in the same order, with tensors of the same shape
// and dtype (float32, float64 or int64). Shapes may be anything, empty included; a
// non-contiguous tensor is copied to a contiguous buffer and the result written back.
//
//   all_reduce(grad, ReduceOp::Average);        // in place, like torch.distributed
//   Work w = all_reduce_async(grad);            // starts it; ...compute...; w.wait();
//
// In a world of one every collective is a copy (or nothing), so code runs unchanged.
// In-place results bump the tensor's version counter, as every in-place write does.
#pragma once

#include <functional>
#include <memory>

#include "../tensor/tensor.h"

namespace cppgrad::distributed {

// Average is the sum divided by the world size (floating point only, as in PyTorch).
enum class ReduceOp { Sum, Average, Max };

// A collective in flight. wait() blocks until it is done and this rank's result is in place;
// it may be called more than once. A Work that is destroyed unwaited waits first, since MPI
// is still reading and writing its buffers.
class Work {
 public:
  Work();
  Work(Work&&) noexcept;
  Work& operator=(Work&& other) noexcept;
  ~Work();
  void wait();
  bool is_completed();  // done already? (a test that also lets MPI make progress)

  struct State;  // the request, the buffers, what to do when it completes
  explicit Work(std::unique_ptr<State> state);

 private:
  std::unique_ptr<State> state_;
};

// ---- how a rank waits for a collective ---------------------------------------------------------
// Spin: test in a loop, as MPI_Wait does (the shortest wait when every rank has a core).
// Polite: test, then sleep between tests, giving the core to the ranks being waited for (the
// faster one on a machine with more runnable tasks than cores). Adaptive (the default): spin
// while the machine has a core for every runnable task, politely when it has not.
enum class WaitPolicy { Adaptive, Spin, Polite };
void set_wait_policy(WaitPolicy policy);
WaitPolicy get_wait_policy();

// ---- all_reduce: every rank ends with the reduction of all ranks' tensors -------------------
// From 64 KiB up between 2 or 3 ranks: a ring (reduce-scatter + all-gather, pipelined in
// segments: RingPipeline below), each rank sending 2(N-1)/N of the bytes; below 64 KiB between 2 ranks, one exchange of the whole tensor;
// otherwise MPI_Iallreduce, which Open MPI runs as a binomial tree (below 4 ranks or 64 KiB)
// or as recursive halving + doubling. docs/scaling.md has the costs.
void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
// Which one all_reduce runs for `bytes` on `world` ranks (the cost model of docs/scaling.md
// and bench/cost_model.h use it too).
enum class AllReduceAlgorithm { Ring, Exchange, BinomialTree, HalvingDoubling };
AllReduceAlgorithm all_reduce_algorithm(int64_t bytes, int world);
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
// the way. Both chosen with bench/bench_allreduce --segments (docs/scaling.md). Every rank of
// a job must set the same values before its all-reduces; reset_ring_pipeline() returns to the
// default.
struct RingPipeline {
  int64_t segment_bytes = 256 << 10;
  int in_flight = 4;
  int64_t whole_chunk_bytes = 0;
};
void set_ring_pipeline(RingPipeline pipeline);
RingPipeline get_ring_pipeline();
void reset_ring_pipeline();
Work all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);

// ---- broadcast: every rank ends with `root`'s tensor ----------------------------------------
void broadcast(const Tensor& tensor, int root = 0);
Work broadcast_async(const Tensor& tensor, int root = 0);

// ---- all_gather: output [world_size, *input.shape] holds every rank's input, by rank ----------
Tensor all_gather(const Tensor& input);
void all_gather(const Tensor& output, const Tensor& input);
Work all_gather_async(const Tensor& output, const Tensor& input);

// ---- reduce_scatter: reduces `input` over the ranks and leaves each rank its share of dim 0 ----
// Dim 0 (of size n) is cut as evenly as it goes: rank r gets rows shard_range(n, r).
// Output has input's shape with dim 0 of that share's length.
Tensor reduce_scatter(const Tensor& input, ReduceOp op = ReduceOp::Sum);
void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
Work reduce_scatter_async(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);

// Rows [begin, end) of n that rank `rank` of `world` owns: the first n % world ranks get one
// row more than the others (n = 10, world = 4: 3, 3, 2, 2).
struct Range {
  int64_t begin, end;
};
Range shard_range(int64_t n, int rank, int world);

}  // namespace cppgrad::distributed
