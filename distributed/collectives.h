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

// ---- all_reduce: every rank ends with the reduction of all ranks' tensors -------------------
// Between 2 or 3 ranks from 64 KiB, a pipelined ring (reduce-scatter + all-gather), each rank
// sending 2(N-1)/N of the bytes; docs/scaling.md has the algorithms and their costs.
void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
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
