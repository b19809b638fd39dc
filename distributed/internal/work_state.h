// A collective in flight, as collectives.cpp (the collectives and their wait) and ring.cpp (the
// ring all-reduce) both see it. Internal (not installed).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "../collectives.h"

namespace cppgrad::distributed {

// What one test of a collective found.
enum class Progress { None, Advanced, Done };  // Advanced: a step finished, the next one started

// What MPI reads and writes (kept alive until it is done), and what to do once it is. A
// collective of a few requests has them in `requests`, then `next` (when there is one) to
// finish or start a second round once they are done; one of many steps (the ring all-reduce)
// moves itself on in `advance`.
struct Work::State {
  std::vector<MPI_Request> requests;  // the current round's, in flight
  bool done = false;
  std::vector<Tensor> buffers;
  std::function<bool()> next;  // starts the next round; false when there is none left
  std::function<Progress()> advance;  // tests what is in flight, starts what may start
  std::function<void()> finish;
  int64_t bytes = 0;  // what a step of progress moves: how long the adaptive wait keeps spinning
};

// MPI's type for the tensor's dtype (float32, float64 or int64), or an Error naming `op`.
MPI_Datatype mpi_type(const Tensor& t, const char* op);
MPI_Op mpi_op(ReduceOp op);

// A whole number from the environment variable `name`, at least `least`; nothing when unset.
std::optional<int64_t> number_from_env(const char* name, int64_t least);

// The tag of round `round` (0 to 7) of the `sequence`-th ring or exchange (ring.cpp says why).
int ring_tag(int64_t sequence, int round);

// Starts the ring all-reduce of `buffer` (contiguous) in place; `state` moves it on (ring.cpp).
void start_ring(Work::State& state, const Tensor& buffer, ReduceOp op);

}  // namespace cppgrad::distributed
