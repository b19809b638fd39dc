// A job in which the last rank throws while the others wait for it in an all-reduce: the whole
// job must end within seconds, with that rank's message and a non-zero exit (failure_test.sh).
#include <cstdio>

#include "cppgrad.h"
#include "distributed/distributed.h"

int main(int argc, char** argv) {
  using namespace cppgrad;
  distributed::ProcessGroup world(argc, argv);
  const int last = world.world_size() - 1;
  distributed::barrier();
  if (world.rank() == last)
    throw Error(fmt::format("rank {} failed on purpose", last));
  Tensor x = ones({4});
  distributed::all_reduce(x);  // never completes: the last rank does not come
  std::printf("rank %d: the all-reduce completed without the last rank\n", world.rank());
  return 0;
}
