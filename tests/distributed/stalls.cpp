// A job in which the last rank stops itself (SIGSTOP: alive, its connections open, never
// answering); the collectives' watchdog must end the whole job, naming that rank, soon after
// CPPGRAD_COLLECTIVE_TIMEOUT (watchdog_test.sh). Where it stops:
//   stalls          while the others wait for it in an all-reduce;
//   stalls --at-end after its last collective, just before the ProcessGroup ends (the others
//                   wait for it in the ProcessGroup's own end).
// Each rank first prints its pid.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string_view>

#include "cppgrad.h"
#include "distributed/distributed.h"

int main(int argc, char** argv) {
  using namespace cppgrad;
  const bool at_end = argc > 1 && std::string_view(argv[1]) == "--at-end";
  distributed::ProcessGroup world(argc, argv);
  const int last = world.world_size() - 1;
  std::printf("rank %d is pid %d\n", world.rank(), static_cast<int>(getpid()));  // for the check that none is left
  std::fflush(stdout);
  distributed::barrier();
  if (world.rank() == last && !at_end) std::raise(SIGSTOP);
  Tensor x = ones({4});
  distributed::all_reduce(x);  // without --at-end, never completes: the last rank is stopped
  if (!at_end) std::printf("rank %d: the all-reduce completed without the last rank\n", world.rank());
  if (world.rank() == last && at_end) std::raise(SIGSTOP);
  return 0;
}
