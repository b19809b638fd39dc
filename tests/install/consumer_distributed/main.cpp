// Runs without mpirun: a world of one, where an all-reduce leaves the tensor as it is.
#include <cppgrad/cppgrad.h>
#include <cppgrad/distributed/distributed.h>
#include <fmt/core.h>

int main(int argc, char** argv) {
  using namespace cppgrad;
  distributed::ProcessGroup world(argc, argv);
  auto model = std::make_shared<nn::Linear>(3, 2);
  distributed::DistributedDataParallel ddp(model);
  Tensor t = ones({3});
  distributed::all_reduce(t, distributed::ReduceOp::Sum);
  const double sum = t.sum().item();
  // ZeRO-1 over the model: in a world of one, the whole state on this rank, and a step that moves the weights.
  distributed::ZeroRedundancyOptimizer opt(model->parameters(),
                                           distributed::ZeroRedundancyOptimizer::of<optim::AdamW>(optim::AdamOptions(0.1)));
  const double before = model->weight.sum().item();
  model->forward(ones({1, 3})).sum().backward();
  opt.step();
  const bool stepped = model->weight.sum().item() != before && opt.numel() == 8;
  fmt::print("rank {} of {}: sum {}, ZeroRedundancyOptimizer stepped: {}\n", world.rank(), world.world_size(), sum, stepped);
  return world.world_size() == 1 && sum == 3.0 && stepped ? 0 : 1;
}
