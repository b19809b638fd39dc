// DistributedDataParallel::join: ranks with different numbers of batches (one with none at 3
// ranks) train inside join() and all return from it, with the weights of one process that, at
// each step, took the gradient of the ranks still training summed and divided by the whole world
// size (PyTorch's divide_by_initial_world_size). One more step after join, every rank training,
// shows the ranks left it in step with one another (the same buckets, the same weights).
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cppgrad.h"
#include "ddp_net.h"
#include "distributed/distributed.h"

using namespace cppgrad;
using namespace cppgrad::distributed;
using ddptest::max_difference;
using ddptest::Net;

namespace {

// Rank r's batches: 3 and 5 at 2 ranks; 3, 5 and 0 at 3.
int64_t batches_of(int r) { return std::vector<int64_t>{3, 5, 0}[static_cast<size_t>(r % 3)]; }

struct Batch {
  Tensor x, y;
};
Batch batch(int64_t step, int r) {  // rank r's batch at `step`: its own rows
  Generator gen(static_cast<uint64_t>(2000 + 10 * step + r));
  return {randn({4, 6}, kFloat64, gen), randn({4, 3}, kFloat64, gen)};
}

std::shared_ptr<Net> make_net(uint64_t seed, bool extras) {
  manual_seed(seed);
  auto net = std::make_shared<Net>(/*tied=*/false, /*with_branch=*/extras, /*with_spare=*/extras);
  net->to(kFloat64);
  return net;
}

std::unique_ptr<optim::Optimizer> sgd(std::vector<Tensor> p) {
  return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions(0.1).momentum(0.9));
}

// One process's step on the batches of the ranks in `training`: Σ their mean losses / W.
void reference_step(Net& net, optim::Optimizer& opt, int64_t step, const std::vector<int>& training) {
  opt.zero_grad();
  Tensor loss = scalar_tensor(0.0, kFloat64);
  for (int r : training) {
    const Batch b = batch(step, r);
    loss = loss + nn::functional::mse_loss(net.forward(b.x), b.y);
  }
  (loss / static_cast<double>(world_size())).backward();
  opt.step();
}

}  // namespace

TEST_CASE("ddp join: uneven batch counts end together, at the weights of one process") {
  for (bool find_unused : {false, true}) {
    CAPTURE(find_unused);
    auto reference = make_net(42, find_unused);  // find_unused: a branch and a spare layer nothing uses
    auto initial = make_net(42, find_unused);
    auto model = make_net(42 + static_cast<uint64_t>(rank()), find_unused);
    DistributedDataParallel ddp(model, DistributedDataParallelOptions().bucket_cap_mb(0.0002).find_unused_parameters(find_unused));
    CHECK(ddp.bucket_count() > 1);
    auto opt = sgd(model->parameters());
    auto opt_ref = sgd(reference->parameters());

    int64_t steps_taken = 0;
    ddp.join([&] {
      for (int64_t step = 0; step < batches_of(rank()); ++step) {
        const Batch b = batch(step, rank());
        opt->zero_grad();
        nn::functional::mse_loss(model->forward(b.x), b.y).backward();
        opt->step();
        ++steps_taken;
      }
    });
    CHECK(steps_taken == batches_of(rank()));

    int64_t longest = 0;
    for (int r = 0; r < world_size(); ++r) longest = std::max(longest, batches_of(r));
    for (int64_t step = 0; step < longest; ++step) {
      std::vector<int> training;
      for (int r = 0; r < world_size(); ++r)
        if (step < batches_of(r)) training.push_back(r);
      reference_step(*reference, *opt_ref, step, training);
    }
    CHECK(max_difference(*model, *initial) > 1e-3);  // the weights did move
    // float64, the same gradients summed in another order: rounding only.
    CHECK(max_difference(*model, *reference) < 1e-12);

    // Every rank trains one more step, outside join: the ranks agree on the buckets and weights.
    // (A joined rank's momenta are those of its last step, as in PyTorch: plain SGD here.)
    auto opt_after = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
    auto opt_ref_after = std::make_unique<optim::SGD>(reference->parameters(), optim::SGDOptions(0.1));
    const Batch b = batch(longest, rank());
    opt_after->zero_grad();
    nn::functional::mse_loss(model->forward(b.x), b.y).backward();
    opt_after->step();
    std::vector<int> everyone;
    for (int r = 0; r < world_size(); ++r) everyone.push_back(r);
    reference_step(*reference, *opt_ref_after, longest, everyone);
    CHECK(max_difference(*model, *reference) < 1e-12);
  }
}

TEST_CASE("ddp join: join inside join is refused") {
  auto model = make_net(7, false);
  DistributedDataParallel ddp(model);
  if (world_size() == 1) return;  // a world of one runs the body as it is: nothing to refuse
  bool refused = false;
  ddp.join([&] {
    try {
      ddp.join([] {});
    } catch (const Error& e) {
      refused = std::string(e.what()).find("already inside join") != std::string::npos;
    }
  });
  CHECK(refused);
}
