// bench_allreduce: all-reduce between the ranks of this machine, against memcpy of the same bytes.
//
//   scripts/mpirun 2 build/release/bench/bench_allreduce            # the table of docs/scaling.md
//
// For each size from 4 KB to 64 MB (float32, sum): the time of one all-reduce, as the slowest
// rank sees it (a barrier, then `reps` back-to-back all-reduces, the mean; the median of 5 such
// rounds), through cppgrad's all_reduce (which waits by polling and sleeping, not spinning) and
// through MPI_Allreduce itself (which spins); the bandwidth bytes / time, and the "bus
// bandwidth" bytes / time · 2(N-1)/N that a ring moves per link (NCCL's convention, equal to
// the first at N = 2); and memcpy of the same bytes on one core.
#include <mpi.h>

#include <cstring>
#include <fmt/core.h>
#include <vector>

#include "cppgrad.h"
#include "distributed/distributed.h"
#include "harness.h"

using namespace cppgrad;
namespace dist = cppgrad::distributed;

namespace {

// The median over 5 rounds of the mean time per call of `reps` calls, the slowest rank's.
double time_collective(const std::function<void()>& call, int reps) {
  for (int i = 0; i < 3; ++i) call();  // warm-up: connections, buffers
  std::vector<double> rounds;
  for (int round = 0; round < 5; ++round) {
    dist::barrier();
    const double s = bench::seconds([&] {
      for (int i = 0; i < reps; ++i) call();
    });
    double slowest = s / reps;
    MPI_Allreduce(MPI_IN_PLACE, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    rounds.push_back(slowest);
  }
  return bench::median(rounds);
}

double time_memcpy(size_t bytes, int reps) {
  std::vector<char> from(bytes, 1), to(bytes, 0);
  std::vector<double> rounds;
  for (int round = 0; round < 5; ++round)
    rounds.push_back(bench::seconds([&] {
                       for (int i = 0; i < reps; ++i) {
                         std::memcpy(to.data(), from.data(), bytes);
                         from[i % bytes] = to[(i + 1) % bytes];  // keeps the copies from being elided
                       }
                     }) /
                     reps);
  return bench::median(rounds);
}

std::string size_str(double bytes) {
  if (bytes >= 1 << 20) return fmt::format("{:.0f} MB", bytes / (1 << 20));
  return fmt::format("{:.0f} KB", bytes / 1024);
}

}  // namespace

int main(int argc, char** argv) {
  dist::ProcessGroup world(argc, argv);
  const bool lead = world.rank() == 0;
  const int n = world.world_size();
  if (lead)
    fmt::print("all-reduce (float32, sum) between {} ranks of one machine; memcpy on one core\n"
               "{:>8} {:>12} {:>12} {:>10} {:>12} {:>10} {:>11} {:>10}\n",
               n, "size", "cppgrad us", "MPI us", "GB/s", "bus GB/s", "MPI GB/s", "memcpy us", "memcpy GB/s");
  for (int64_t bytes = 4 << 10; bytes <= 64 << 20; bytes *= 4) {
    const int64_t count = bytes / 4;
    // about 16 MB moved per round, at least 3 calls
    const int reps = static_cast<int>(std::max<int64_t>(3, (16 << 20) / bytes));
    Tensor t = ones({count});
    const double ours = time_collective([&] { dist::all_reduce(t); }, reps);
    const double mpi = time_collective(
        [&] { MPI_Allreduce(MPI_IN_PLACE, t.data<float>(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
        reps);
    const double copy = time_memcpy(static_cast<size_t>(bytes), reps);
    const double gb = static_cast<double>(bytes) / 1e9;
    if (lead)
      fmt::print("{:>8} {:>12.1f} {:>12.1f} {:>10.2f} {:>12.2f} {:>10.2f} {:>11.1f} {:>10.2f}\n", size_str(bytes),
                 ours * 1e6, mpi * 1e6, gb / ours, gb / ours * 2 * (n - 1) / n, gb / mpi, copy * 1e6, gb / copy);
  }
  return 0;
}
