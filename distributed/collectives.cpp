// Collectives on tensors over MPI's non-blocking collectives; the blocking forms start one and
// wait for it. See collectives.h.
#include "collectives.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>
#include <vector>

#include "../autograd/node.h"
#include "process_group.h"

namespace cppgrad::distributed {

// What MPI reads and writes (kept alive until it is done), and what to do once it is.
struct Work::State {
  MPI_Request request = MPI_REQUEST_NULL;
  bool done = false;
  std::vector<Tensor> buffers;
  std::function<void()> finish;
};

Work::Work() = default;
Work::Work(Work&&) noexcept = default;
Work::Work(std::unique_ptr<State> state) : state_(std::move(state)) {}

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    if (state_) wait();
    state_ = std::move(other.state_);
  }
  return *this;
}

Work::~Work() {
  if (state_ && !state_->done) wait();
}

namespace {
// MPI_Wait polls without ever giving up its core, and on a busy machine (or with more ranks
// than cores) that steals the time the rank we wait for needs to get here. So: poll briefly,
// then sleep between polls (MPI progresses in each MPI_Test), backing off to 100 us.
void wait_for(MPI_Request& request) {
  int done = 0;
  for (int polls = 0; polls < 200 && !done; ++polls) MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  auto pause = std::chrono::microseconds(5);
  while (!done) {
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(100));
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  }
}
}  // namespace

void barrier() {
  if (!is_initialized()) return;
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  wait_for(request);
}

void Work::wait() {
  if (!state_ || state_->done) return;
  if (state_->request != MPI_REQUEST_NULL) wait_for(state_->request);
  state_->done = true;
  if (state_->finish) state_->finish();
  state_->buffers.clear();
}

bool Work::is_completed() {
  if (!state_ || state_->done) return true;
  int flag = 1;
  if (state_->request != MPI_REQUEST_NULL) MPI_Test(&state_->request, &flag, MPI_STATUS_IGNORE);
  if (flag) wait();  // the request is null now: wait() only finishes
  return state_->done;
}

namespace {

MPI_Datatype mpi_type(const Tensor& t, const char* op) {
  switch (t.dtype()) {
    case kFloat32: return MPI_FLOAT;
    case kFloat64: return MPI_DOUBLE;
    case kInt64: return MPI_INT64_T;
    default: break;
  }
  throw Error(fmt::format("{}: dtype {} is not supported (float32, float64 or int64)", op, dtype_name(t.dtype())));
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

void check_tensor(const Tensor& t, const char* op) {
  CPPGRAD_CHECK(t.defined(), "{}: the tensor is undefined", op);
  mpi_type(t, op);
  CPPGRAD_CHECK(t.numel() <= INT_MAX, "{}: {} elements is more than one MPI call can send ({})", op, t.numel(),
                INT_MAX);
}

void check_op(const Tensor& t, ReduceOp op, const char* name) {
  CPPGRAD_CHECK(op != ReduceOp::Average || t.is_floating_point(),
                "{}: ReduceOp::Average of a {} tensor (an integer average would round; use Sum and divide)", name,
                dtype_name(t.dtype()));
}

// The contiguous memory MPI works on: the tensor itself when it is contiguous, else a copy.
Tensor contiguous_buffer(const Tensor& t) {
  NoGradGuard no_grad;
  return t.is_contiguous() ? t.detach() : t.contiguous().detach();
}

// After MPI wrote `buffer`: divide for an average, then copy back when it was a copy of `target`.
std::function<void()> write_back(Tensor target, Tensor buffer, bool average) {
  return [target, buffer, average]() mutable {
    NoGradGuard no_grad;
    if (average) buffer.div_(static_cast<double>(world_size()));
    if (buffer.storage() != target.storage())
      target.detach().copy_(buffer);
    else if (!average)
      target.bump_version();  // MPI wrote into it behind the version counter's back
  };
}

Work finished(std::function<void()> finish = nullptr) {
  auto state = std::make_unique<Work::State>();
  state->finish = std::move(finish);
  Work work(std::move(state));
  work.wait();
  return work;
}

}  // namespace

// ---- all_reduce -------------------------------------------------------------------------------
Work all_reduce_async(const Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "all_reduce");
  check_op(tensor, op, "all_reduce");
  if (!is_initialized() || tensor.numel() == 0) return finished();  // x / 1 == x
  auto state = std::make_unique<Work::State>();
  // Out of place, at the cost of one copy back: given MPI_IN_PLACE, Open MPI's non-blocking
  // all-reduce (4.1's libnbc) always takes a binomial tree, which sends every byte log2(N)
  // times; with a separate result buffer it may choose reduce-scatter + all-gather
  // (Rabenseifner's algorithm), whose bytes per rank do not grow with N, when N >= 4 and the
  // message is at least 64 KiB. (With 2 or 3 ranks it keeps the tree either way.)
  Tensor send = contiguous_buffer(tensor);
  Tensor result = empty(send.shape(), send.dtype());
  MPI_Iallreduce(send.raw_data(), result.raw_data(), static_cast<int>(send.numel()), mpi_type(send, "all_reduce"),
                 mpi_op(op), MPI_COMM_WORLD, &state->request);
  state->finish = write_back(tensor, result, op == ReduceOp::Average);
  state->buffers = {send, result};
  return Work(std::move(state));
}

void all_reduce(const Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op).wait(); }

// ---- broadcast --------------------------------------------------------------------------------
Work broadcast_async(const Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast");
  CPPGRAD_CHECK(root >= 0 && root < world_size(), "broadcast: root {} is not a rank of a world of {}", root,
                world_size());
  if (!is_initialized() || tensor.numel() == 0) return finished();
  auto state = std::make_unique<Work::State>();
  Tensor buffer = contiguous_buffer(tensor);
  MPI_Ibcast(buffer.raw_data(), static_cast<int>(buffer.numel()), mpi_type(buffer, "broadcast"), root, MPI_COMM_WORLD,
             &state->request);
  state->finish = write_back(tensor, buffer, false);
  state->buffers = {buffer};
  return Work(std::move(state));
}

void broadcast(const Tensor& tensor, int root) { broadcast_async(tensor, root).wait(); }

// ---- all_gather -------------------------------------------------------------------------------
Work all_gather_async(const Tensor& output, const Tensor& input) {
  check_tensor(input, "all_gather");
  CPPGRAD_CHECK(output.defined(), "all_gather: the output is undefined");
  Shape expected{world_size()};
  expected.insert(expected.end(), input.shape().begin(), input.shape().end());
  CPPGRAD_CHECK(output.shape() == expected && output.dtype() == input.dtype(),
                "all_gather: output {} {} for input {} {} in a world of {}: expected {} {}", shape_str(output.shape()),
                dtype_name(output.dtype()), shape_str(input.shape()), dtype_name(input.dtype()), world_size(),
                shape_str(expected), dtype_name(input.dtype()));
  if (!is_initialized() || input.numel() == 0) {
    NoGradGuard no_grad;
    if (input.numel() > 0) output.detach().select(0, 0).copy_(input);
    return finished();
  }
  auto state = std::make_unique<Work::State>();
  Tensor send = contiguous_buffer(input);
  Tensor receive = contiguous_buffer(output);
  MPI_Datatype type = mpi_type(input, "all_gather");
  const int count = static_cast<int>(input.numel());
  MPI_Iallgather(send.raw_data(), count, type, receive.raw_data(), count, type, MPI_COMM_WORLD, &state->request);
  state->finish = write_back(output, receive, false);
  state->buffers = {send, receive};
  return Work(std::move(state));
}

void all_gather(const Tensor& output, const Tensor& input) { all_gather_async(output, input).wait(); }

Tensor all_gather(const Tensor& input) {
  check_tensor(input, "all_gather");
  Shape shape{world_size()};
  shape.insert(shape.end(), input.shape().begin(), input.shape().end());
  Tensor output = empty(shape, input.dtype());
  all_gather(output, input);
  return output;
}

// ---- reduce_scatter ---------------------------------------------------------------------------
Range shard_range(int64_t n, int rank, int world) {
  CPPGRAD_CHECK(n >= 0 && world >= 1 && rank >= 0 && rank < world, "shard_range: rank {} of {} over {} rows", rank,
                world, n);
  const int64_t base = n / world, extra = n % world;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

Work reduce_scatter_async(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_tensor(input, "reduce_scatter");
  check_op(input, op, "reduce_scatter");
  CPPGRAD_CHECK(input.dim() >= 1, "reduce_scatter: the input must have a dim 0 to cut (got a 0-dim tensor)");
  CPPGRAD_CHECK(output.defined(), "reduce_scatter: the output is undefined");
  const Range mine = shard_range(input.size(0), rank(), world_size());
  Shape expected = input.shape();
  expected[0] = mine.end - mine.begin;
  CPPGRAD_CHECK(output.shape() == expected && output.dtype() == input.dtype(),
                "reduce_scatter: output {} {} for input {} {} on rank {} of {}: expected {} {}",
                shape_str(output.shape()), dtype_name(output.dtype()), shape_str(input.shape()),
                dtype_name(input.dtype()), rank(), world_size(), shape_str(expected), dtype_name(input.dtype()));
  if (!is_initialized() || input.numel() == 0) {
    NoGradGuard no_grad;
    if (input.numel() > 0) output.detach().copy_(input);
    return finished();
  }
  const int64_t row = input.numel() / input.size(0);
  std::vector<int> counts(world_size());
  for (int r = 0; r < world_size(); ++r) {
    const Range range = shard_range(input.size(0), r, world_size());
    counts[r] = static_cast<int>((range.end - range.begin) * row);
  }
  auto state = std::make_unique<Work::State>();
  Tensor send = contiguous_buffer(input);
  Tensor receive = contiguous_buffer(output);
  MPI_Ireduce_scatter(send.raw_data(), receive.raw_data(), counts.data(), mpi_type(input, "reduce_scatter"),
                      mpi_op(op), MPI_COMM_WORLD, &state->request);
  state->finish = write_back(output, receive, op == ReduceOp::Average);
  state->buffers = {send, receive};
  return Work(std::move(state));
}

void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  reduce_scatter_async(output, input, op).wait();
}

Tensor reduce_scatter(const Tensor& input, ReduceOp op) {
  check_tensor(input, "reduce_scatter");
  CPPGRAD_CHECK(input.dim() >= 1, "reduce_scatter: the input must have a dim 0 to cut (got a 0-dim tensor)");
  const Range mine = shard_range(input.size(0), rank(), world_size());
  Shape shape = input.shape();
  shape[0] = mine.end - mine.begin;
  Tensor output = empty(shape, input.dtype());
  reduce_scatter(output, input, op);
  return output;
}

}  // namespace cppgrad::distributed
