// DDP's buckets after the first synchronised backward: laid out again in the order the
// gradients became ready, the same on every rank, and training unchanged by it.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "cppgrad.h"
#include "distributed/distributed.h"

using namespace cppgrad;
using namespace cppgrad::distributed;

namespace {
constexpr int64_t kBatch = 8;  // divisible by 1, 2 and 4 ranks

// Registered output-first, used input-first: reverse registration order puts fc1, whose
// gradients backward produces last, in the first bucket, which then holds back every other.
// `branch` is used only where forward() is told to.
class BackwardsNet : public nn::Module {
 public:
  BackwardsNet() {
    head = register_module("head", std::make_shared<nn::Linear>(6, 3));
    branch = register_module("branch", std::make_shared<nn::Linear>(6, 3));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(6, 6));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 6));
  }
  Tensor forward(const Tensor& x, bool use_branch = false) {
    Tensor h = fc2->forward(fc1->forward(x).tanh()).tanh();
    Tensor y = head->forward(h);
    if (use_branch) y = y + branch->forward(h);
    return y;
  }
  std::shared_ptr<nn::Linear> head, branch, fc2, fc1;
};

std::shared_ptr<BackwardsNet> make_net(uint64_t seed) {
  manual_seed(seed);
  auto net = std::make_shared<BackwardsNet>();
  net->to(kFloat64);
  return net;
}

int64_t bucket_of(const DistributedDataParallel& ddp, const std::string& name) {
  const auto buckets = ddp.bucket_parameter_names();
  for (size_t b = 0; b < buckets.size(); ++b)
    if (std::find(buckets[b].begin(), buckets[b].end(), name) != buckets[b].end()) return static_cast<int64_t>(b);
  return -1;
}

// Every rank's bucket of every parameter, checked equal across the ranks (max == min).
bool same_layout_on_every_rank(const DistributedDataParallel& ddp, const nn::Module& model) {
  const auto named = model.named_parameters();
  Tensor highest = zeros({static_cast<int64_t>(named.size())}, kInt64);
  for (size_t i = 0; i < named.size(); ++i) highest.data<int64_t>()[i] = bucket_of(ddp, named[i].first);
  Tensor negated_lowest = -highest;  // (the collectives have Max, not Min)
  all_reduce(highest, ReduceOp::Max);
  all_reduce(negated_lowest, ReduceOp::Max);
  return (highest + negated_lowest).abs().max().item<int64_t>() == 0;
}
}  // namespace

TEST_CASE("ddp buckets: rebuilt in the order gradients become ready, training unchanged") {
  auto reference = make_net(31);
  auto model = make_net(31 + rank());
  // 104 bytes: every weight (288 or 144 bytes of float64) is a bucket of its own.
  DistributedDataParallel ddp(model, DistributedDataParallelOptions().bucket_cap_mb(0.0001).find_unused_parameters(true));
  // branch is never used here; it goes wherever, the others in reverse registration order.
  CHECK(bucket_of(ddp, "fc1.weight") < bucket_of(ddp, "head.weight"));
  optim::SGD opt_ref(reference->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  std::vector<std::vector<std::string>> after_first;
  for (int64_t step = 0; step < 4; ++step) {
    CAPTURE(step);
    Generator gen(700 + step);
    Tensor x = randn({kBatch, 6}, kFloat64, gen), y = randn({kBatch, 3}, kFloat64, gen);
    const int64_t share = kBatch / world_size();
    opt_ref.zero_grad();
    nn::functional::mse_loss(reference->forward(x), y).backward();
    opt_ref.step();
    opt.zero_grad();
    nn::functional::mse_loss(model->forward(x.narrow(0, rank() * share, share)),
                             y.narrow(0, rank() * share, share))
        .backward();
    opt.step();
    // float64, a mean of per-rank means against one mean: rounding of about 1e-16 relative,
    // carried a few steps by momentum.
    double worst = 0;
    for (size_t i = 0; i < model->parameters().size(); ++i)
      worst = std::max(worst, (model->parameters()[i] - reference->parameters()[i]).abs().max().item<double>());
    CHECK(worst < 1e-12);

    if (world_size() == 1) continue;  // no hooks: nothing is rebuilt, nothing overlaps
    if (step == 0) {
      // The first backward ran on the old layout: the bucket holding fc1 waited for fc1's
      // gradients, the last to come, so at most that one bucket started before them.
      CHECK(ddp.last_overlapped_buckets() <= 1);
      after_first = ddp.bucket_parameter_names();
      // Now the head, whose gradients come first, is in front and fc1 at the back (before
      // only the never-used branch, which goes last).
      CHECK(bucket_of(ddp, "head.weight") < bucket_of(ddp, "fc2.weight"));
      CHECK(bucket_of(ddp, "fc2.weight") < bucket_of(ddp, "fc1.weight"));
      CHECK(bucket_of(ddp, "fc1.weight") < bucket_of(ddp, "branch.weight"));
    } else {
      CHECK(ddp.bucket_parameter_names() == after_first);  // rebuilt once only
      // Every bucket before the one that holds fc1's last gradient (the last of backward)
      // started while backward was still running; after it come only that one and branch's,
      // which the end of backward fills.
      const int64_t last = std::max(bucket_of(ddp, "fc1.weight"), bucket_of(ddp, "fc1.bias"));
      CHECK(last >= 3);  // head's and fc2's weights and biases are in front
      CHECK(ddp.last_overlapped_buckets() == last);
    }
    CHECK(same_layout_on_every_rank(ddp, *model));
  }
}

TEST_CASE("ddp buckets: ranks that saw different orders take rank 0's") {
  // In a world of one nothing is rebuilt and rank 0 is the only order (the case above covers it).
  if (world_size() == 1) return;
  auto model = make_net(41 + rank());
  DistributedDataParallel ddp(model, DistributedDataParallelOptions().bucket_cap_mb(0.0001).find_unused_parameters(true));
  Generator gen(800);
  Tensor x = randn({kBatch / world_size(), 6}, kFloat64, gen), y = randn({kBatch / world_size(), 3}, kFloat64, gen);
  // Rank 0 never reaches branch, the others do (early in their backward): their ready orders
  // differ, and the buckets must still start in the same order everywhere.
  nn::functional::mse_loss(model->forward(x, /*use_branch=*/rank() != 0), y).backward();
  CHECK(same_layout_on_every_rank(ddp, *model));
  CHECK(bucket_of(ddp, "branch.weight") == ddp.bucket_count() - 1);  // rank 0's: last
  // And the next backward, on that layout, completes with the same average everywhere.
  model->zero_grad();
  nn::functional::mse_loss(model->forward(x, rank() != 0), y).backward();
  Tensor grad = model->branch->weight.grad().clone();
  Tensor highest = grad.clone(), negated_lowest = -grad;
  all_reduce(highest, ReduceOp::Max);
  all_reduce(negated_lowest, ReduceOp::Max);
  CHECK((highest + negated_lowest).abs().max().item<double>() == 0.0);  // one all-reduce result, copied
}

namespace {
// The identity whose backward waits, a millisecond at a time, until the first bucket's
// all-reduce has been seen complete: a stretch of backward in which no gradient arrives, which
// ends on the event it waits for (the rest of the chain then passes straight through).
const DistributedDataParallel* watched_ddp = nullptr;
struct WaitForFirstBucket : autograd::Function<WaitForFirstBucket> {
  static Tensor forward(autograd::FunctionCtx&, const Tensor& x) { return x.clone(); }
  static std::vector<Tensor> backward(autograd::FunctionCtx&, const std::vector<Tensor>& grad_outputs) {
    if (watched_ddp && watched_ddp->completed_buckets_so_far() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return {grad_outputs[0]};
  }
};
}  // namespace

TEST_CASE("ddp buckets: an all-reduce started in backward completes before backward's end") {
  if (world_size() == 1) return;  // no hooks, nothing to reduce
  // first -> 5,000 waiting nodes -> last, no biases: backward brings last.weight (bucket 0 of
  // the rebuilt layout), then runs parameter-free nodes until bucket 0's all-reduce is seen
  // complete, then brings first.weight, the last gradient. MPI moves an all-reduce on only
  // inside MPI calls: had it been tested only when a gradient arrives, it could not complete on
  // every rank before the last one. A rank that completes first stops waiting and waits at the
  // end of backward inside MPI, which moves the other rank's side on. (The chain's length only
  // bounds a broken build's wait: 5 s.)
  manual_seed(51);
  auto first = std::make_shared<nn::Linear>(6, 6, /*bias=*/false);
  auto last = std::make_shared<nn::Linear>(6, 3, /*bias=*/false);
  auto model = std::make_shared<nn::Sequential>(first, last);
  DistributedDataParallel ddp(model, DistributedDataParallelOptions().bucket_cap_mb(0.0001));
  Generator gen(900 + rank());
  Tensor x = randn({2, 6}, kFloat32, gen);
  auto backward = [&] {
    Tensor h = first->forward(x);
    for (int i = 0; i < 5000; ++i) h = WaitForFirstBucket::apply(h);
    last->forward(h).square().sum().backward();
  };
  backward();  // lays the buckets out again, in the order the gradients came
  REQUIRE(ddp.bucket_parameter_names() == std::vector<std::vector<std::string>>{{"1.weight"}, {"0.weight"}});
  model->zero_grad();
  watched_ddp = &ddp;
  backward();
  CHECK(ddp.last_overlapped_buckets() == 1);
  CHECK(ddp.last_completed_buckets() == 1);
  watched_ddp = nullptr;
}
