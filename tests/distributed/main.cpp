// The distributed tests' main: the process group lives around the whole doctest run, so the
// same binary runs as a world of one (plain) or of N (scripts/mpirun N). Every rank runs every
// test case in the same order, so their collectives meet.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "distributed/distributed.h"

int main(int argc, char** argv) {
  cppgrad::distributed::ProcessGroup world(argc, argv);
  doctest::Context context(argc, argv);
  // One rank's failure may leave the others waiting in a collective: end them all.
  const int failed = context.run();
  if (failed != 0 && world.world_size() > 1) cppgrad::distributed::abort(failed);
  return failed;
}
