// What the cost model (cost_model.h) needs from the path between the ranks, measured in the
// run: the latency alpha of one message, and the endpoints' bandwidth H that scripts/netns
// --probe measured before it shaped the link. Every rank calls measure_alpha() at once.
#pragma once

#include <mpi.h>

#include <cstdlib>
#include <vector>

#include "distributed/distributed.h"
#include "harness.h"

namespace bench {

// Half the median round trip of a 4-byte message between ranks 0 and 1: one message's latency.
inline double measure_alpha() {
  if (cppgrad::distributed::world_size() < 2) return 0;
  float value = 0;
  std::vector<double> trips;
  for (int i = 0; i < 220; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double s = bench::seconds([&] {
      if (cppgrad::distributed::rank() == 0) {
        MPI_Send(&value, 1, MPI_FLOAT, 1, 7, MPI_COMM_WORLD);
        MPI_Recv(&value, 1, MPI_FLOAT, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (cppgrad::distributed::rank() == 1) {
        MPI_Recv(&value, 1, MPI_FLOAT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&value, 1, MPI_FLOAT, 0, 7, MPI_COMM_WORLD);
      }
    });
    if (i >= 20) trips.push_back(s);  // after the warm-up
  }
  double alpha = bench::median(trips) / 2;
  MPI_Bcast(&alpha, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return alpha;
}

// H in Gbit/s each way from scripts/netns --probe (bench_allreduce --exchange-only on the
// unshaped loopback), or 0 when the run was not probed: endpoints as fast as any link.
inline double probed_host_gbit() {
  const char* probed = std::getenv("NETNS_HOST_GBIT");
  return probed ? std::atof(probed) : 0;
}

}  // namespace bench
