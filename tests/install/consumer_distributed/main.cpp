// Runs as a world of one (no mpirun) or of N (mpirun -np N): an all-reduce of ones sums to N,
// and DistributedDataParallel averages a gradient over the ranks during backward.
#include <cppgrad/cppgrad.h>
#include <cppgrad/distributed/distributed.h>
#include <fmt/core.h>

int main(int argc, char** argv) {
  using namespace cppgrad;
  distributed::ProcessGroup world(argc, argv);
  const int n = world.world_size();
  Tensor t = ones({3});
  distributed::all_reduce(t, distributed::ReduceOp::Sum);
  const double sum = t.sum().item();

  // Rank r's input is r + 1 everywhere, so d(sum of outputs)/d(weight) is r + 1 in every entry
  // on rank r, and their average over the ranks is (n + 1) / 2: exact in float32.
  auto model = std::make_shared<nn::Linear>(3, 2);
  distributed::DistributedDataParallel ddp(model);
  model->forward(full({1, 3}, world.rank() + 1.0)).sum().backward();
  const double expected = (n + 1) / 2.0;
  const double worst = (model->weight.grad() - expected).abs().max().item();

  fmt::print("rank {} of {}: all-reduced sum {} (expected {}), DDP gradient off by {}\n", world.rank(), n, sum, 3 * n,
             worst);
  return sum == 3.0 * n && worst == 0.0 ? 0 : 1;
}
