// A job in which the last rank stops itself (SIGSTOP: alive, its connections open, never
// answering) while the others wait for it in an all-reduce: the collectives' watchdog must end
// the whole job, naming that rank, soon after CPPGRAD_COLLECTIVE_TIMEOUT (watchdog_test.sh).
#include <csignal>
#include <cstdio>

#include "cppgrad.h"
#include "distributed/distributed.h"

int main(int argc, char** argv) {
  using namespace cppgrad;
  distributed::ProcessGroup world(argc, argv);
  const int last = world.world_size() - 1;
  distributed::barrier();
  if (world.rank() == last) std::raise(SIGSTOP);
  Tensor x = ones({4});
  distributed::all_reduce(x);  // never completes: the last rank is stopped
  std::printf("rank %d: the all-reduce completed without the last rank\n", world.rank());
  return 0;
}
