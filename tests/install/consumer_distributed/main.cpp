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
  fmt::print("rank {} of {}: sum {}\n", world.rank(), world.world_size(), sum);
  return world.world_size() == 1 && sum == 3.0 ? 0 : 1;
}
