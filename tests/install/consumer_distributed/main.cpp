// Runs as a world of one (no mpirun) or of N (mpirun -np N): an all-reduce of ones sums to N,
// DistributedDataParallel averages a gradient over the ranks during backward, and a
// ZeroRedundancyOptimizer (ZeRO-1: each rank updates its shard of the state) steps the weights.
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

  auto model = std::make_shared<nn::Linear>(3, 2);
  distributed::DistributedDataParallel ddp(model);
  distributed::ZeroRedundancyOptimizer opt(model->parameters(),
                                           distributed::ZeroRedundancyOptimizer::of<optim::AdamW>(optim::AdamWOptions(0.1)));
  const double before = model->weight.sum().item();
  // Rank r's input is r + 1 everywhere, so d(sum of outputs)/d(weight) is r + 1 in every entry
  // on rank r, and their average over the ranks is (n + 1) / 2: exact in float32.
  model->forward(full({1, 3}, world.rank() + 1.0)).sum().backward();
  const double worst = (model->weight.grad() - (n + 1) / 2.0).abs().max().item();
  opt.step();
  const bool stepped = model->weight.sum().item() != before && opt.numel() == 8;

  fmt::print("rank {} of {}: all-reduced sum {} (expected {}), DDP gradient off by {}, ZeroRedundancyOptimizer "
             "stepped: {}\n",
             world.rank(), n, sum, 3 * n, worst, stepped);
  return sum == 3.0 * n && worst == 0.0 && stepped ? 0 : 1;
}
