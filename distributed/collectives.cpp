// Collectives on tensors over MPI's non-blocking collectives; the blocking forms start one and
// wait for it. See collectives.h; the ring all-reduce that all_reduce runs from 64 KiB up
// between 2 or 3 ranks is ring.cpp.
#include "collectives.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "../autograd/node.h"
#include "../runtime/load.h"
#include "internal/collectives_tuning.h"
#include "internal/work_state.h"
#include "process_group.h"
#include "watchdog.h"

namespace cppgrad::distributed {

using tuning::AllReduceAlgorithm;
using tuning::WaitPolicy;

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

std::optional<int64_t> number_from_env(const char* name, int64_t least) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  CPPGRAD_CHECK(end != v && *end == '\0' && n >= least, "{}={}: expected a whole number of at least {}", name, v,
                least);
  return n;
}

namespace {

// A word from the environment variable `name`, one of `words` (its index); nothing when unset.
template <size_t N>
std::optional<size_t> word_from_env(const char* name, const char* const (&words)[N]) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  for (size_t i = 0; i < N; ++i)
    if (std::string_view(v) == words[i]) return i;
  throw Error(fmt::format("{}={}: expected one of {}", name, v, fmt::join(words, ", ")));
}

std::optional<WaitPolicy> chosen_wait;  // set_wait_policy's

WaitPolicy wait_policy() {
  if (!chosen_wait) {
    static const char* const words[] = {"adaptive", "spin", "polite"};
    const std::optional<size_t> word = word_from_env("CPPGRAD_ALLREDUCE_WAIT", words);
    chosen_wait = word ? static_cast<WaitPolicy>(*word) : WaitPolicy::Adaptive;
  }
  return *chosen_wait;
}

// Has the machine no core for this rank? The runtime's signal of load (runtime/load.h), which
// the thread pool follows too: the mean count of other processes' runnable tasks over the last
// 100 ms leaves no core free. Where it cannot be read (not Linux): busy, so the wait is polite
// and never steals a core.
bool machine_is_busy() {
  const std::optional<load::Load> load = load::machine_load();
  return !load || load->free_cores < 1;
}

// Waits until `test()` (MPI_Test: MPI progresses in it) says Done. Two ways of waiting:
// - spinning, as MPI_Wait does: the shortest wait when every rank has a core of its own, since
//   the answer is seen the moment it arrives;
// - politely: poll briefly, then sleep between polls (5 us doubling to 100 us). On a machine
//   with more runnable tasks than cores a spinning rank may steal the time that the rank it
//   waits for needs to get here; sleeping gives it back.
// Adaptive spins while the machine leaves this rank a core (machine_is_busy, asked again every
// millisecond of a long wait). When it has not, it still spins after each step of progress for
// as long as the step's bytes may plausibly take to move, 100 us plus 1 us per KiB (a MiB
// moves in about a millisecond between two processes here), and only then turns polite: a
// late rank is then most likely descheduled, and sleeping gives it the core. The next step of
// progress turns it back to spinning: the rank it waited for runs again, and the steps that
// follow come at the pace of the copies, not of the sleeps (staying polite, a 4 MB ring that
// slept once paid a sleep at every segment after it: docs/scaling.md). Measured loaded (builds
// at a lower priority on both cores) the polite wait added a millisecond to a 1 MB all-reduce
// that spinning did not; bench/bench_allreduce measures the three side by side.
template <class Test>
void wait_until(Test test, int64_t bytes = 0) {
  watchdog::Wait watch;  // past the collective timeout: names the ranks that do not answer, ends the job
  using Clock = std::chrono::steady_clock;
  const auto kSpinWhenBusy = std::chrono::microseconds(100 + bytes / 1024);
  const WaitPolicy policy = wait_policy();
  const bool adaptive = policy == WaitPolicy::Adaptive;
  bool spinning = policy != WaitPolicy::Polite;
  bool busy = adaptive && machine_is_busy();
  auto look_again = Clock::now() + std::chrono::milliseconds(1);
  auto spin_until = Clock::now() + kSpinWhenBusy;
  auto pause = std::chrono::microseconds(5);
  for (int polite_polls = 0;;) {
    if (spinning) {
      for (int polls = 0; polls < 32; ++polls) {
        const Progress p = test();
        if (p == Progress::Done) return;
        if (p == Progress::Advanced) spin_until = Clock::now() + kSpinWhenBusy;
      }
      watch.poll();
      if (!adaptive) continue;  // WaitPolicy::Spin
      const auto now = Clock::now();
      if (now > look_again) {
        busy = machine_is_busy();
        look_again = now + std::chrono::milliseconds(1);
      }
      if (busy && now > spin_until) {
        spinning = false;
        pause = std::chrono::microseconds(5);
      }
      continue;
    }
    const Progress p = test();
    if (p == Progress::Done) return;
    watch.poll();
    if (p == Progress::Advanced) {
      if (adaptive) {  // the ranks waited for run again: spin through the steps that follow
        spinning = true;
        spin_until = Clock::now() + kSpinWhenBusy;
        continue;
      }
      pause = std::chrono::microseconds(5);
    }
    if (polite_polls++ < 200 && policy == WaitPolicy::Polite) continue;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(100));
  }
}

// One test: the collective's own `advance` (the ring's), or the current round's requests and,
// when they are all done, `next` (the exchange adds what it received).
Progress progress(Work::State& state) {
  if (state.advance) return state.advance();
  bool advanced = false;
  for (;;) {
    if (!state.requests.empty()) {
      int all_done = 0;
      MPI_Testall(static_cast<int>(state.requests.size()), state.requests.data(), &all_done, MPI_STATUSES_IGNORE);
      if (!all_done) return advanced ? Progress::Advanced : Progress::None;
      state.requests.clear();
    }
    if (!state.next || !state.next()) return Progress::Done;
    advanced = true;
  }
}

}  // namespace

void tuning::set_wait_policy(WaitPolicy policy) { chosen_wait = policy; }
WaitPolicy tuning::get_wait_policy() { return wait_policy(); }

void barrier() {
  if (!is_initialized()) return;
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  wait_until([&] {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    return done ? Progress::Done : Progress::None;
  });
}

void Work::wait() {
  if (!state_ || state_->done) return;
  wait_until([&] { return progress(*state_); }, state_->bytes);
  state_->done = true;
  state_->next = nullptr;
  state_->advance = nullptr;
  if (state_->finish) state_->finish();
  state_->buffers.clear();
}

bool Work::is_completed() {
  if (!state_ || state_->done) return true;
  if (progress(*state_) == Progress::Done) wait();  // nothing left in flight: wait() only finishes
  return state_->done;
}

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

namespace {

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

// A slot for one more request of the current round.
MPI_Request* new_request(Work::State& state) { return &state.requests.emplace_back(MPI_REQUEST_NULL); }

Work finished(std::function<void()> finish = nullptr) {
  auto state = std::make_unique<Work::State>();
  state->finish = std::move(finish);
  Work work(std::move(state));
  work.wait();
  return work;
}

}  // namespace

// ---- all_reduce -------------------------------------------------------------------------------
namespace {

// Below 4 ranks Open MPI's MPI_Iallreduce (4.1's libnbc) takes a binomial tree whatever the
// buffers: a reduce to rank 0 and a broadcast back, each carrying the whole message, so that
// between 2 ranks every byte crosses the link twice each way where a ring sends it once. From
// this size up cppgrad runs its own ring there (bench/bench_allreduce measures both sides of it).
constexpr int64_t kRingMinBytes = 64 << 10;

// Between 2 ranks below kRingMinBytes: one round, each rank sends its whole tensor to the other
// and adds what it receives (x1 + x0 on rank 0, x0 + x1 on rank 1: the same bits, IEEE addition
// being commutative). One message's latency where the tree takes two, and the same bytes on a
// full-duplex link; no MPI_Iallreduce schedule to progress, which costs tens of microseconds.
void start_exchange(Work::State& state, const Tensor& buffer, ReduceOp op) {
  static int64_t sequence = 0;
  const int tag = ring_tag(sequence++, 7);  // round 7: never a ring's (they use 0-3)
  const int other = 1 - rank();
  const int count = static_cast<int>(buffer.numel());
  const MPI_Datatype type = mpi_type(buffer, "all_reduce");
  const MPI_Op mpi_reduction = mpi_op(op);
  Tensor received = empty({buffer.numel()}, buffer.dtype());
  state.buffers.push_back(received);
  void* mine = buffer.raw_data();
  void* theirs = received.raw_data();
  MPI_Irecv(theirs, count, type, other, tag, MPI_COMM_WORLD, new_request(state));
  MPI_Isend(mine, count, type, other, tag, MPI_COMM_WORLD, new_request(state));
  state.next = [=, added = false]() mutable {
    if (!added) MPI_Reduce_local(theirs, mine, count, type, mpi_reduction);
    added = true;
    return false;
  };
}

}  // namespace

AllReduceAlgorithm tuning::all_reduce_algorithm(int64_t bytes, int world) {
  static const char* const words[] = {"ring", "exchange", "mpi"};
  static const std::optional<size_t> forced = word_from_env("CPPGRAD_ALLREDUCE_ALGORITHM", words);
  const size_t choice = forced.value_or(SIZE_MAX);
  if (choice == 0) return AllReduceAlgorithm::Ring;
  if (choice == 1) {
    CPPGRAD_CHECK(world == 2, "CPPGRAD_ALLREDUCE_ALGORITHM=exchange: the exchange is between 2 ranks, this job has {}",
                  world);
    return AllReduceAlgorithm::Exchange;
  }
  if (choice == 2 || world >= 4)  // Open MPI's own choice
    return world >= 4 && bytes >= (64 << 10) ? AllReduceAlgorithm::HalvingDoubling : AllReduceAlgorithm::BinomialTree;
  if (world == 2) return bytes >= kRingMinBytes ? AllReduceAlgorithm::Ring : AllReduceAlgorithm::Exchange;
  return bytes >= kRingMinBytes ? AllReduceAlgorithm::Ring : AllReduceAlgorithm::BinomialTree;
}

Work all_reduce_async(const Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "all_reduce");
  check_op(tensor, op, "all_reduce");
  if (!is_initialized() || tensor.numel() == 0) return finished();  // x / 1 == x
  auto state = std::make_unique<Work::State>();
  const int64_t bytes = tensor.numel() * static_cast<int64_t>(dtype_size(tensor.dtype()));
  state->bytes = bytes;
  const AllReduceAlgorithm algorithm = tuning::all_reduce_algorithm(bytes, world_size());
  if (algorithm == AllReduceAlgorithm::Ring || algorithm == AllReduceAlgorithm::Exchange) {
    Tensor buffer = contiguous_buffer(tensor);
    state->buffers.push_back(buffer);
    if (algorithm == AllReduceAlgorithm::Ring)
      start_ring(*state, buffer, op);
    else
      start_exchange(*state, buffer, op);
    state->finish = write_back(tensor, buffer, op == ReduceOp::Average);
    return Work(std::move(state));
  }
  // Out of place, at the cost of one copy back: given MPI_IN_PLACE, Open MPI's non-blocking
  // all-reduce always takes the binomial tree; with a separate result buffer it takes
  // reduce-scatter + all-gather by recursive halving and doubling (Rabenseifner's algorithm),
  // whose bytes per rank do not grow with N, when N >= 4 and the message is at least 64 KiB.
  Tensor send = contiguous_buffer(tensor);
  Tensor result = empty(send.shape(), send.dtype());
  MPI_Iallreduce(send.raw_data(), result.raw_data(), static_cast<int>(send.numel()), mpi_type(send, "all_reduce"),
                 mpi_op(op), MPI_COMM_WORLD, new_request(*state));
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
             new_request(*state));
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
  MPI_Iallgather(send.raw_data(), count, type, receive.raw_data(), count, type, MPI_COMM_WORLD, new_request(*state));
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
                      mpi_op(op), MPI_COMM_WORLD, new_request(*state));
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
