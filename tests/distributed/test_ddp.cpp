// DistributedDataParallel against one process: W ranks with B/W examples each must end where
// one process with all B examples ends, step for step. Every rank also trains that one-process
// reference itself (no hooks on it), so each rank checks its own weights against it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "cppgrad.h"
#include "ddp_net.h"
#include "distributed/distributed.h"

using namespace cppgrad;
using namespace cppgrad::distributed;
using ddptest::max_difference;
using ddptest::Net;

namespace {
constexpr int64_t kBatch = 8;  // divisible by the world sizes the tests run at (1, 2, 4)

struct Data {
  Tensor x, y;
};
Data make_data(int64_t step, DType dtype) {
  Generator gen(1000 + step);
  return {randn({kBatch, 6}, dtype, gen), randn({kBatch, 3}, dtype, gen)};
}
Data rows(const Data& d, int64_t begin, int64_t length) { return {d.x.narrow(0, begin, length), d.y.narrow(0, begin, length)}; }

// Same initial weights on every rank only through DDP's broadcast: each rank seeds differently.
std::shared_ptr<Net> make_net(uint64_t seed, DType dtype, bool tied = false, bool extras = false) {
  manual_seed(seed);
  auto net = std::make_shared<Net>(tied, /*with_branch=*/extras, /*with_spare=*/extras);
  net->to(dtype);
  return net;
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// 5 steps of DDP (each rank its B/W rows, in `micro` micro-batches, all but the last under
// no_sync) against 5 steps of one process on all B rows. Returns the largest difference of any
// weight, after checking that training moved the weights.
double ddp_against_one_process(DType dtype, const MakeOptimizer& make_optimizer, int micro = 1, bool tied = false) {
  const int64_t share = kBatch / world_size();
  REQUIRE(share * world_size() == kBatch);
  REQUIRE(share % micro == 0);
  auto reference = make_net(42, dtype, tied);
  auto model = make_net(42 + rank(), dtype, tied);  // rank 0 has the reference's weights
  DistributedDataParallel ddp(model, DistributedDataParallelOptions().bucket_cap_mb(0.0002));  // several buckets
  CHECK(ddp.bucket_count() > 1);
  CHECK(max_difference(*model, *reference) == 0.0);  // the broadcast gave everyone rank 0's weights
  auto initial = make_net(42, dtype, tied);
  auto opt_ref = make_optimizer(reference->parameters());
  auto opt = make_optimizer(model->parameters());
  for (int64_t step = 0; step < 5; ++step) {
    Data all = make_data(step, dtype);
    opt_ref->zero_grad();
    nn::functional::mse_loss(reference->forward(all.x), all.y).backward();
    opt_ref->step();

    opt->zero_grad();
    const int64_t part = share / micro;
    for (int m = 0; m < micro; ++m) {
      Data mine = rows(all, rank() * share + m * part, part);
      // Each micro-batch's mean, divided by their number: the mean over this rank's rows.
      auto micro_backward = [&] { (nn::functional::mse_loss(model->forward(mine.x), mine.y) / micro).backward(); };
      if (m + 1 < micro) {
        auto guard = ddp.no_sync();
        micro_backward();
      } else {
        micro_backward();
      }
    }
    opt->step();
  }
  CHECK(max_difference(*model, *initial) > 1e-3);  // the weights did move
  return max_difference(*model, *reference);
}

MakeOptimizer sgd = [](std::vector<Tensor> p) {
  return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions(0.1).momentum(0.9));
};
MakeOptimizer adam = [](std::vector<Tensor> p) {
  return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions(0.01));
};
}  // namespace

// float64: the ranks' gradients differ from the one-process gradient only by rounding (a mean
// of W half-means against one mean), about 1e-16 relative; five steps keep that far below 1e-12.
TEST_CASE("ddp: SGD and Adam on W ranks equal one process on the global batch (float64, 1e-12)") {
  const double sgd_error = ddp_against_one_process(kFloat64, sgd);
  const double adam_error = ddp_against_one_process(kFloat64, adam);
  MESSAGE("rank " << rank() << " of " << world_size() << ": float64 max |ddp - single| SGD " << sgd_error << ", Adam "
                  << adam_error);
  CHECK(sgd_error < 1e-12);
  CHECK(adam_error < 1e-12);
}

// float32: the same, with rounding of 6e-8 relative per operation; Adam divides by √v, which
// can magnify it where gradients are small. 1e-5 on weights of order 0.5 is about 100 ulps.
TEST_CASE("ddp: SGD and Adam on W ranks stay close to one process (float32)") {
  const double sgd_error = ddp_against_one_process(kFloat32, sgd);
  const double adam_error = ddp_against_one_process(kFloat32, adam);
  MESSAGE("rank " << rank() << ": float32 max |ddp - single| SGD " << sgd_error << ", Adam " << adam_error);
  CHECK(sgd_error < 1e-5);
  CHECK(adam_error < 1e-5);
}

TEST_CASE("ddp: no_sync over two micro-batches equals one process (float64)") {
  if (kBatch / world_size() % 2 != 0) return;  // (world 8 would leave one row per rank)
  CHECK(ddp_against_one_process(kFloat64, sgd, /*micro=*/2) < 1e-12);
  CHECK(ddp_against_one_process(kFloat64, adam, /*micro=*/2) < 1e-12);
}

TEST_CASE("ddp: tied weights are one parameter, reduced once, and train as in one process") {
  auto model = make_net(5 + rank(), kFloat64, /*tied=*/true);
  DistributedDataParallel ddp(model);
  int64_t listed = 0;
  for (const auto& bucket : ddp.bucket_parameter_names()) listed += static_cast<int64_t>(bucket.size());
  // fc1.weight (which is also fc2_weight), fc1.bias, head.weight, head.bias: no second copy
  // of the shared weight, so its gradient (the sum of both uses) is averaged once.
  CHECK(listed == 4);
  CHECK(ddp_against_one_process(kFloat64, sgd, 1, /*tied=*/true) < 1e-12);
  CHECK(ddp_against_one_process(kFloat64, adam, 1, /*tied=*/true) < 1e-12);
}

TEST_CASE("ddp: a parameter without a gradient is a clear error by default") {
  auto model = make_net(9 + rank(), kFloat64, false, /*extras=*/true);
  DistributedDataParallel ddp(model);
  Data all = make_data(0, kFloat64);
  // Every rank leaves `branch` and `spare` out, so every rank throws in the same backward.
  Tensor loss = nn::functional::mse_loss(model->forward(all.x), all.y);
  if (world_size() == 1) {
    loss.backward();  // a world of one has nothing to reduce: DDP stays out of backward
    CHECK_FALSE(model->spare->weight.grad().defined());
  } else {
    CHECK_THROWS_WITH_AS(loss.backward(),
                         doctest::Contains("got no gradient in this backward: spare.bias, spare.weight, branch.bias, "
                                           "branch.weight; every rank must reduce every parameter"),
                         Error);
  }
  // The next backward that uses everything goes through.
  model->zero_grad();
  Tensor loss2 = nn::functional::mse_loss(model->forward(all.x, true), all.y) + 0.0 * model->spare->forward(all.x).sum();
  loss2.backward();
  CHECK(model->spare->weight.grad().defined());
}

TEST_CASE("ddp: find_unused_parameters counts a parameter a rank did not use as a zero gradient") {
  auto model = make_net(11 + rank(), kFloat64, false, /*extras=*/true);
  DistributedDataParallel ddp(model, DistributedDataParallelOptions().find_unused_parameters(true).bucket_cap_mb(0.0001));
  auto local = make_net(11, kFloat64, false, /*extras=*/true);  // rank 0's weights, no hooks
  Data mine = rows(make_data(1, kFloat64), 0, kBatch / world_size());
  const bool use_branch = rank() == 0;  // only rank 0 uses `branch`; nobody uses `spare`
  for (int step = 0; step < 2; ++step) {
    model->zero_grad();
    local->zero_grad();
    nn::functional::mse_loss(model->forward(mine.x, use_branch), mine.y).backward();
    nn::functional::mse_loss(local->forward(mine.x, use_branch), mine.y).backward();
    // The average over the ranks of each rank's local gradient, zero where a rank had none.
    for (const auto& [name, p] : local->named_parameters()) {
      CAPTURE(name);
      Tensor expected = p.grad().defined() ? p.grad().clone() : zeros_like(p);
      all_reduce(expected, ReduceOp::Average);
      Tensor got;
      for (const auto& [n, q] : model->named_parameters())
        if (n == name) got = q.grad();
      if (name.rfind("spare.", 0) == 0) {
        CHECK_FALSE(got.defined());  // no rank used it: .grad left alone, as PyTorch does
        continue;
      }
      REQUIRE(got.defined());
      CHECK((got - expected).abs().max().item<double>() < 1e-15);
    }
  }
}

TEST_CASE("ddp: a backward that throws half-way leaves the next one right") {
  auto model = make_net(13 + rank(), kFloat64);
  auto reference = make_net(13, kFloat64);
  DistributedDataParallel ddp(model, DistributedDataParallelOptions().bucket_cap_mb(0.0001));
  Data all = make_data(2, kFloat64);
  Data mine = rows(all, rank() * (kBatch / world_size()), kBatch / world_size());
  // On every rank: the head's gradients are final (and their buckets started) when a hook
  // further down throws.
  Tensor h = model->fc1->forward(mine.x).tanh();
  h.register_hook([](const Tensor&) -> Tensor { throw Error("a hook failed on purpose"); });
  Tensor y = model->head->forward(model->fc2->forward(h).tanh());
  CHECK_THROWS_WITH_AS(nn::functional::mse_loss(y, mine.y).backward(), "a hook failed on purpose", Error);
  model->zero_grad();
  nn::functional::mse_loss(model->forward(mine.x), mine.y).backward();
  nn::functional::mse_loss(reference->forward(all.x), all.y).backward();
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    Tensor a = model->parameters()[i].grad(), b = reference->parameters()[i].grad();
    REQUIRE(a.defined());
    CHECK((a - b).abs().max().item<double>() < 1e-15);
  }
}

TEST_CASE("ddp: ranks whose models differ are refused at construction, the first difference named") {
  // The last rank's hidden layer is one wider (as a rank given another --ff would build it).
  const bool odd_one = world_size() > 1 && rank() == world_size() - 1;
  manual_seed(5);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, odd_one ? 5 : 4),
                                                std::make_shared<nn::Linear>(odd_one ? 5 : 4, 3));
  if (world_size() == 1) {
    DistributedDataParallel ddp(model);  // one rank: nothing to differ from
    return;
  }
  if (odd_one) {
    const std::string expected = fmt::format("rank {}'s model differs from rank 0's: parameter 0 ('0.weight') is "
                                             "float32 [5,6] here and float32 [4,6] on rank 0", rank());
    CHECK_THROWS_WITH_AS(DistributedDataParallel{model}, doctest::Contains(expected.c_str()), Error);
  }
  else
    CHECK_THROWS_WITH_AS(DistributedDataParallel{model},
                         doctest::Contains("1 other rank(s) built a model that differs from rank 0's"), Error);
  // The same model everywhere goes through afterwards: the refusal left the ranks in step.
  auto same = std::make_shared<nn::Linear>(6, 4);
  DistributedDataParallel ddp(same);
  CHECK(ddp.bucket_count() >= 1);
}
