// The process group: the N copies of one program that mpirun started, each knowing its rank.
//
//   int main(int argc, char** argv) {
//     cppgrad::distributed::ProcessGroup world(argc, argv);   // MPI up until the end of main
//     if (world.rank() == 0) fmt::print("{} processes\n", world.world_size());
//     ...
//   }
//
// Launched without mpirun, the program is a world of one: rank 0 of 1, every collective is a
// copy, and MPI is never started, so every script runs unchanged (and touches no network).
//
// Failure: an exception that escapes main on one rank ends the whole job with that rank's
// message and exit code 1 (std::terminate calls MPI_Abort), rather than leaving the others
// waiting forever in a collective. A program that catches its own errors calls abort(code)
// after printing them, for the same reason.
#pragma once

#include <cstdint>
#include <string>

namespace cppgrad::distributed {

class ProcessGroup {
 public:
  // Starts MPI (MPI_Init_thread, MPI_THREAD_FUNNELED: only the main thread calls MPI; OpenMP's
  // workers never do) when the program runs under mpirun. Only one may exist at a time.
  ProcessGroup(int& argc, char**& argv);
  ProcessGroup();
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int world_size() const;
};

// The world's shape, valid while a ProcessGroup exists (rank 0 of 1 when none does).
int rank();
int world_size();
bool is_initialized();  // MPI is running (a ProcessGroup exists and mpirun started us)
// How the ranks reach each other, decided once when MPI starts and the same on every rank:
// SharedMemory when they all run on one machine and MPI may use its shared-memory transport;
// Network when some run on another machine, or when the job allows MPI only its TCP transport
// (Open MPI's `btl` setting; scripts/netns runs jobs so). The ring all-reduce sizes its
// segments by it (collectives.h). A world of one: SharedMemory.
enum class Transport { SharedMemory, Network };
Transport transport();
// The largest message MPI's TCP transport sends at once, without first waiting for the
// receiver's go-ahead (Open MPI's btl_tcp_eager_limit; its default, 64 KiB, where unknown).
int64_t network_eager_limit();
// Every rank waits here until all have arrived.
void barrier();
// Ends every rank of the job with `code` (MPI_Abort); in a world of one, exits the process.
[[noreturn]] void abort(int code);

}  // namespace cppgrad::distributed
