// Gradient accumulation under no_sync() with parameters that some micro-batches do not use:
// whatever a rank's micro-batches touched since the last synchronised backward is averaged,
// so W ranks end where one process ends on the same global loss. The one-process reference
// computes that loss in one backward: the sum over every rank's every micro-batch of its mean
// square error / (micro-batches * ranks), each micro-batch using `branch` or not as it did on
// its rank.
#include <doctest/doctest.h>

#include <algorithm>
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
constexpr int64_t kBatch = 8;  // divisible by 2 micro-batches on 1, 2 and 4 ranks
constexpr int kMicro = 2;
constexpr int kSteps = 4;

std::shared_ptr<Net> make_net(uint64_t seed, bool tied, bool with_spare) {
  manual_seed(seed);
  auto net = std::make_shared<Net>(tied, /*with_branch=*/true, with_spare);
  net->to(kFloat64);
  return net;
}

// Whether micro-batch `micro` of `rank` in `step` adds the branch.
using UsesBranch = std::function<bool(int64_t step, int64_t rank, int micro)>;

// kSteps of SGD with momentum; each rank takes its kBatch/W rows in kMicro micro-batches, all
// but the last under no_sync(). Checks every rank's gradients and weights against the one
// process after every step, and that no rank's `spare` ever got a gradient. Without
// find_unused_parameters the net has no `spare`, and every parameter must have been used
// since the last sync on every rank.
void accumulation_against_one_process(const UsesBranch& uses_branch, bool tied, bool find_unused = true) {
  const int64_t world = world_size(), share = kBatch / world, part = share / kMicro;
  REQUIRE(part * kMicro * world == kBatch);
  auto reference = make_net(21, tied, find_unused);
  auto model = make_net(21 + rank(), tied, find_unused);  // DDP's broadcast gives it rank 0's weights
  DistributedDataParallel ddp(model,
                              DistributedDataParallelOptions().find_unused_parameters(find_unused).bucket_cap_mb(0.0002));
  CHECK(ddp.bucket_count() > 1);
  auto initial = make_net(21, tied, find_unused);
  optim::SGD opt_ref(reference->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  for (int64_t step = 0; step < kSteps; ++step) {
    CAPTURE(step);
    Generator gen(500 + step);
    Tensor x = randn({kBatch, 6}, kFloat64, gen), y = randn({kBatch, 3}, kFloat64, gen);
    auto micro_loss = [&](Net& net, int64_t r, int m) {
      const int64_t begin = r * share + m * part;
      return nn::functional::mse_loss(net.forward(x.narrow(0, begin, part), uses_branch(step, r, m)),
                                      y.narrow(0, begin, part)) /
             static_cast<double>(kMicro);
    };

    opt_ref.zero_grad();
    Tensor global = zeros({}, kFloat64);
    for (int64_t r = 0; r < world; ++r)
      for (int m = 0; m < kMicro; ++m) global = global + micro_loss(*reference, r, m);
    (global / static_cast<double>(world)).backward();

    opt.zero_grad();
    for (int m = 0; m < kMicro; ++m) {
      if (m + 1 < kMicro) {
        auto guard = ddp.no_sync();
        micro_loss(*model, rank(), m).backward();
      } else {
        micro_loss(*model, rank(), m).backward();
      }
    }

    // The gradients: the same where the reference has one, absent where it has none (spare,
    // and branch in a step where no micro-batch on any rank used it).
    auto expected = reference->named_parameters(), got = model->named_parameters();
    for (size_t i = 0; i < expected.size(); ++i) {
      CAPTURE(expected[i].first);
      const Tensor& e = expected[i].second.grad();
      const Tensor& g = got[i].second.grad();
      if (!e.defined()) {
        CHECK_FALSE(g.defined());
        continue;
      }
      REQUIRE(g.defined());
      // float64 sums of the same terms grouped differently (per rank, then averaged): rounding
      // of about 1e-16 relative on gradients of order 1.
      CHECK((g - e).abs().max().item<double>() < 1e-12);
    }
    opt_ref.step();
    opt.step();
    // Momentum carries each step's error forward; a few steps keep it far below 1e-12.
    CHECK(max_difference(*model, *reference) < 1e-12);
  }
  CHECK(max_difference(*model, *initial) > 1e-3);  // training moved the weights
  if (model->spare) CHECK_FALSE(model->spare->weight.grad().defined());
}
}  // namespace

TEST_CASE("ddp accumulation: a parameter used only in the no_sync micro-batches keeps its gradient") {
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    // Every rank uses the branch in its first micro-batch only: in the synchronised backward no
    // rank reaches it, yet its accumulated gradient must still be averaged.
    accumulation_against_one_process([](int64_t, int64_t, int m) { return m == 0; }, tied);
  }
}

TEST_CASE("ddp accumulation: ranks that used a parameter in different micro-batches agree") {
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    // Rank 0 uses the branch only in its no_sync micro-batch, rank 1 only in its last one, the
    // others never; and in odd steps nobody uses it, so its gradient must stay unset there.
    accumulation_against_one_process(
        [](int64_t step, int64_t r, int m) { return step % 2 == 0 && ((r == 0 && m == 0) || (r == 1 && m == kMicro - 1)); },
        tied);
    // Every micro-batch on every rank uses it: the ordinary path, for contrast.
    accumulation_against_one_process([](int64_t, int64_t, int) { return true; }, tied);
  }
}

TEST_CASE("ddp accumulation: without find_unused_parameters, a parameter used since the last sync is not unused") {
  // Every rank uses the branch in its first micro-batch only; every parameter has a gradient
  // since the last sync, so this is no error, and the average is the one process's.
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    accumulation_against_one_process([](int64_t, int64_t, int m) { return m == 0; }, tied, /*find_unused=*/false);
  }
}
