// ZeroRedundancyOptimizer (ZeRO-1) against DDP with the same optimizer unsharded: the same
// parameters step for step, 1/N of the state on each rank, checkpoints that resume exactly, and
// misuse refused. Every rank trains both runs itself and checks its own weights.
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <unistd.h>

#include "cppgrad.h"
#include "../common/check.h"
#include "ddp_net.h"
#include "distributed/distributed.h"
#include "distributed/zero.h"

using namespace cppgrad;
using namespace cppgrad::distributed;
using ddptest::max_difference;

namespace {

constexpr int64_t kBatch = 12;  // divisible by 1, 2, 3 and 4 ranks

// 67 parameters' elements in 5 tensors (one 0-d): at 2 ranks shards of 34 and 33, at 3 of 23, 23
// and 21, so that shards are uneven and a weight straddles two of them.
class Small : public nn::Module {
 public:
  Small() {
    a = register_module("a", std::make_shared<nn::Linear>(5, 7));
    b = register_module("b", std::make_shared<nn::Linear>(7, 3));
    gain = register_parameter("gain", full({}, 1.0, kFloat64));
  }
  Tensor forward(const Tensor& x) { return b->forward(a->forward(x).tanh()) * gain; }
  std::shared_ptr<nn::Linear> a, b;
  Tensor gain;
};

// Each rank seeds differently: equal starting weights come only from DDP's or ZeRO's broadcast.
std::shared_ptr<Small> make_small(uint64_t seed) {
  manual_seed(seed + static_cast<uint64_t>(rank()));
  auto model = std::make_shared<Small>();
  model->to(kFloat64);
  return model;
}

// Weight decay on the matrices only, and another rate for the rest: two groups.
std::vector<optim::ParamGroup> groups_of(const nn::Module& model) {
  optim::ParamGroup decay{.weight_decay = 0.1, .name = "decay"}, rest{.lr = 0.005, .weight_decay = 0.0, .name = "rest"};
  for (const auto& [name, p] : model.named_parameters()) (p.dim() == 2 ? decay : rest).params.push_back(p);
  return {decay, rest};
}

using Factory = ZeroRedundancyOptimizer::Factory;
const Factory adamw = ZeroRedundancyOptimizer::of<optim::AdamW>(optim::AdamWOptions(0.01).weight_decay(0.1));
const Factory sgd = ZeroRedundancyOptimizer::of<optim::SGD>(optim::SGDOptions(0.05).momentum(0.9).nesterov(true));

enum class Kind { Unsharded, Zero, ZeroReduceScatter };

struct Run {
  std::shared_ptr<Small> model;
  std::unique_ptr<DistributedDataParallel> ddp;  // none with reduce_scatter: ZeRO averages
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::StepLR> schedule;       // the rate halves every 2 steps
  ZeroRedundancyOptimizer& zero() { return dynamic_cast<ZeroRedundancyOptimizer&>(*opt); }
  NamedTensors model_state() const {  // a copy (state_dict's tensors are the live weights)
    NamedTensors out = model->state_dict();
    for (auto& entry : out) entry.second = entry.second.clone();
    return out;
  }
};

Run make_run(Kind kind, const Factory& make, uint64_t seed) {
  Run run;
  run.model = make_small(seed);
  if (kind != Kind::ZeroReduceScatter) run.ddp = std::make_unique<DistributedDataParallel>(run.model);
  if (kind == Kind::Unsharded)
    run.opt = make(groups_of(*run.model));
  else
    run.opt = std::make_unique<ZeroRedundancyOptimizer>(
        groups_of(*run.model), make, ZeroRedundancyOptimizerOptions().reduce_scatter(kind == Kind::ZeroReduceScatter));
  run.schedule = std::make_unique<optim::StepLR>(*run.opt, 2, 0.5);
  return run;
}

// Steps [from, to): each rank's rows of the step's global batch.
void train(Run& run, int64_t from, int64_t to) {
  const int64_t share = kBatch / world_size();
  for (int64_t step = from; step < to; ++step) {
    Generator gen(500 + step);
    Tensor x = randn({kBatch, 5}, kFloat64, gen), y = randn({kBatch, 3}, kFloat64, gen);
    run.opt->zero_grad();
    nn::functional::mse_loss(run.model->forward(x.narrow(0, rank() * share, share)), y.narrow(0, rank() * share, share))
        .backward();
    run.opt->step();
    run.schedule->step();
  }
}

double max_entry_difference(const NamedTensors& a, const NamedTensors& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].first == b[i].first);
    REQUIRE(a[i].second.shape() == b[i].second.shape());
    const Tensor d = (a[i].second.to(kFloat64) - b[i].second.to(kFloat64)).abs();
    if (d.numel() > 0) worst = std::max(worst, d.max().item<double>());
  }
  return worst;
}

// A file every rank can name: rank 0's process id.
std::string shared_path(const std::string& stem) {
  Tensor pid = scalar_tensor(static_cast<double>(::getpid()), kInt64).reshape({1});
  broadcast(pid, 0);
  return (std::filesystem::temp_directory_path() / fmt::format("cppgrad_zero_{}_{}.safetensors", stem, pid.item<int64_t>()))
      .string();
}

}  // namespace

// Adam(W) and SGD update every element from its own gradient and state, so sharding changes
// nothing but which rank computes it; the gradients are DDP's (the same tensors) or a
// reduce-scatter's average (the same sum in another order: ~1e-16 relative). Six steps,
// two parameter groups, weight decay and a schedule keep the difference far below 1e-12.
TEST_CASE("zero: sharded AdamW and SGD equal DDP with the unsharded optimizer (float64, 1e-12)") {
  for (const Factory* make : {&adamw, &sgd}) {
    const std::string name = make == &adamw ? "AdamW" : "SGD";
    Run reference = make_run(Kind::Unsharded, *make, 11);
    Run zero = make_run(Kind::Zero, *make, 11);
    Run scattered = make_run(Kind::ZeroReduceScatter, *make, 11);
    auto initial = make_small(11 - static_cast<uint64_t>(rank()));  // rank 0's weights, untrained
    train(reference, 0, 6);
    train(zero, 0, 6);
    train(scattered, 0, 6);
    CHECK(max_difference(*reference.model, *initial) > 1e-2);  // training moved the weights
    const double with_ddp = max_difference(*zero.model, *reference.model);
    const double with_reduce_scatter = max_difference(*scattered.model, *reference.model);
    MESSAGE("rank " << rank() << " of " << world_size() << ", " << name << ": max |zero - ddp| " << with_ddp
                    << ", reduce-scatter " << with_reduce_scatter);
    CHECK(with_ddp < 1e-12);
    CHECK(with_reduce_scatter < 1e-12);
  }
}

// Adam keeps per parameter a step count (8 bytes) and two moments of its shape; sharded, this
// rank keeps the moments of its shard's elements and a step count per piece.
TEST_CASE("zero: each rank holds 1/N of AdamW's state (bytes counted)") {
  Run reference = make_run(Kind::Unsharded, adamw, 3);
  Run zero = make_run(Kind::Zero, adamw, 3);
  train(reference, 0, 1);
  train(zero, 0, 1);
  const int64_t total = 67, tensors = 5, world = world_size();
  const int64_t unsharded = ZeroRedundancyOptimizer::state_bytes(*reference.opt);
  CHECK(unsharded == tensors * 8 + 2 * total * 8);
  const ZeroRedundancyOptimizer& z = zero.zero();
  CHECK(z.numel() == total);
  const int64_t mine = z.shard_end() - z.shard_begin();
  CHECK(mine == std::min(total, (rank() + 1) * ((total + world - 1) / world)) -
                    std::min(total, rank() * ((total + world - 1) / world)));
  // The pieces: the parameters (flat, in group order: a.weight 35, b.weight 21, a.bias 7,
  // b.bias 3, gain 1) that overlap this rank's elements.
  const int64_t sizes[] = {35, 21, 7, 3, 1};
  int64_t pieces = 0, offset = 0;
  for (int64_t n : sizes) {
    if (offset < z.shard_end() && offset + n > z.shard_begin()) ++pieces;
    offset += n;
  }
  const int64_t sharded = z.state_bytes();
  CHECK(sharded == pieces * 8 + 2 * mine * 8);
  CHECK(sharded == ZeroRedundancyOptimizer::state_bytes(*zero.opt));
  // ~1/N: at most one shard's moments (ceil(67 / N) elements) and a step count per tensor.
  CHECK(sharded <= 2 * 8 * ((total + world - 1) / world) + tensors * 8);
  Tensor moments = scalar_tensor(static_cast<double>(2 * mine * 8), kInt64).reshape({1});
  all_reduce(moments);
  CHECK(moments.item<int64_t>() == 2 * total * 8);  // the shards cover every element once
  MESSAGE("rank " << rank() << " of " << world << ": AdamW state " << sharded << " bytes sharded, " << unsharded
                  << " unsharded (" << static_cast<double>(sharded) / static_cast<double>(unsharded) << ")");
}

// The gathered state_dict is the unsharded optimizer's (same keys, values within rounding), in a
// TrainingState file as the example programs write one (every rank gathers, rank 0 writes);
// loaded into a fresh run at the same process count, training continues bit-identically.
TEST_CASE("zero: a gathered checkpoint resumes bit-identically and is the unsharded optimizer's") {
  const std::string path = shared_path("gathered");
  Run zero = make_run(Kind::Zero, adamw, 21);
  Run reference = make_run(Kind::Unsharded, adamw, 21);
  train(zero, 0, 3);
  train(reference, 0, 3);
  optim::TrainingState state;
  state.add("model", *zero.model).add("optim", *zero.opt).add("sched", *zero.schedule);
  const NamedTensors entries = state.state_dict();  // a collective: every rank
  if (rank() == 0) nn::save_safetensors(path, entries);
  barrier();
  CHECK(max_entry_difference(under_prefix("optim.", entries), reference.opt->state_dict()) < 1e-12);

  Run resumed = make_run(Kind::Zero, adamw, 77);  // other weights, no state
  optim::TrainingState load;
  load.add("model", *resumed.model).add("optim", *resumed.opt).add("sched", *resumed.schedule);
  load.load(path);
  barrier();
  if (rank() == 0) std::filesystem::remove(path);
  train(zero, 3, 6);
  train(resumed, 3, 6);
  CHECK(max_difference(*resumed.model, *zero.model) == 0.0);

  // The unsharded optimizer's state (what one process saves) loads into the sharded one, which
  // then trains as the unsharded one goes on to: resharding from 1 process to N.
  Run from_unsharded = make_run(Kind::Zero, adamw, 78);
  from_unsharded.model->load_state_dict(reference.model_state());
  from_unsharded.opt->load_state_dict(reference.opt->state_dict());
  from_unsharded.schedule->load_state_dict(reference.schedule->state_dict());
  train(reference, 3, 6);
  train(from_unsharded, 3, 6);
  CHECK(max_difference(*from_unsharded.model, *reference.model) < 1e-12);
}

TEST_CASE("zero: a rank's own shard resumes bit-identically, and only at its rank and process count") {
  Run zero = make_run(Kind::Zero, adamw, 31);
  train(zero, 0, 3);
  const NamedTensors shard = zero.zero().local_state_dict();
  const NamedTensors model = zero.model_state(), schedule = zero.schedule->state_dict();
  train(zero, 3, 5);
  Run resumed = make_run(Kind::Zero, adamw, 32);
  resumed.model->load_state_dict(model);
  resumed.zero().load_local_state_dict(shard);
  resumed.schedule->load_state_dict(schedule);
  train(resumed, 3, 5);
  CHECK(max_difference(*resumed.model, *zero.model) == 0.0);

  auto with = [&](const std::string& key, int64_t value) {
    NamedTensors changed = shard;
    for (auto& [name, t] : changed)
      if (name == key) t = scalar_tensor(static_cast<double>(value), kInt64);
    return changed;
  };
  CHECK_THROWS_WITH_AS(resumed.zero().load_local_state_dict(with("world_size", world_size() + 1)),
                       doctest::Contains(fmt::format("of {} processes over 67 elements; this is rank {} of {}",
                                                     world_size() + 1, rank(), world_size())
                                            .c_str()),
                       Error);
  CHECK_THROWS_WITH_AS(resumed.zero().load_local_state_dict(with("rank", (rank() + 1) % (world_size() + 1))),
                       doctest::Contains("load the gathered state_dict() to change the process count"), Error);
  CHECK_THROWS_WITH_AS(resumed.zero().load_local_state_dict(with("numel", 66)), doctest::Contains("over 66 elements"),
                       Error);
}

TEST_CASE("zero: misuse is refused with an Error naming the values, on every rank") {
  const Factory make = adamw;
  auto param = [](const Shape& shape, DType dtype = kFloat64) { return zeros(shape, TensorOptions(dtype).requires_grad()); };
  CHECK_THROWS_WITH_AS(ZeroRedundancyOptimizer({param({2}), param({3}, kFloat32)}, make),
                       doctest::Contains("parameter 1 is float32 and parameter 0 is float64"), Error);
  CHECK_THROWS_WITH_AS(ZeroRedundancyOptimizer({zeros({2}, kInt64)}, make), doctest::Contains("parameters must be"),
                       Error);
  CHECK_THROWS_WITH_AS(ZeroRedundancyOptimizer(std::vector<Tensor>{param({2})}, nullptr),
                       doctest::Contains("no optimizer factory"), Error);

  Run zero = make_run(Kind::Zero, adamw, 41);
  CHECK_THROWS_WITH_AS(zero.opt->state(zero.model->gain), doctest::Contains("holds a shard"), Error);
  NamedTensors bad = zero.opt->state_dict();
  bad.emplace_back("state.0.exp_avg", zeros({2}, kFloat64));
  CHECK_THROWS_WITH_AS(zero.opt->load_state_dict(bad), doctest::Contains("ZeroRedundancyOptimizer::load_state_dict"),
                       Error);

  if (world_size() == 1) {
    MESSAGE("the checks between ranks need 2 or more (distributed/two_ranks runs them)");
    return;
  }
  const bool last = rank() == world_size() - 1;
  // Another parameter count on the last rank.
  std::vector<Tensor> params = {param({2, 3})};
  if (last) params.push_back(param({4}));
  CHECK_THROWS_WITH_AS(ZeroRedundancyOptimizer(params, make),
                       doctest::Contains(fmt::format("rank {} has {} parameters of {} elements (float64), rank 0 has 1 of "
                                                     "6 (float64): every rank must pass the same parameters",
                                                     world_size() - 1, 2, 10)
                                            .c_str()),
                       Error);
  // The same sizes in another order, and the same size in another shape.
  std::vector<Tensor> swapped = last ? std::vector<Tensor>{param({3}), param({2})} : std::vector<Tensor>{param({2}), param({3})};
  CHECK_THROWS_WITH_AS(ZeroRedundancyOptimizer(swapped, make),
                       doctest::Contains(fmt::format("parameter 0 has 3 elements on rank {} and 2 on rank 0",
                                                     world_size() - 1)
                                            .c_str()),
                       Error);
  CHECK_THROWS_WITH_AS(ZeroRedundancyOptimizer({param(last ? Shape{3, 2} : Shape{2, 3})}, make),
                       doctest::Contains("in another shape"), Error);
  // Without DDP and without reduce_scatter, each rank's gradients are its own.
  Run forgot;
  forgot.model = make_small(51);
  forgot.opt = std::make_unique<ZeroRedundancyOptimizer>(forgot.model->parameters(), make);
  forgot.schedule = std::make_unique<optim::StepLR>(*forgot.opt, 2, 0.5);
  CHECK_THROWS_WITH_AS(train(forgot, 0, 1), doctest::Contains("the gradients differ between ranks"), Error);
}

// Without DDP a rank that did not reach a parameter counts as a zero gradient (as DDP's
// find_unused_parameters does), and a parameter no rank reached is not updated and keeps no
// state (as PyTorch skips a .grad of None).
TEST_CASE("zero: parameters some ranks or no rank used train as with DDP's find_unused_parameters") {
  using ddptest::Net;
  auto make_net = [](uint64_t seed) {
    manual_seed(seed + static_cast<uint64_t>(rank()));
    auto net = std::make_shared<Net>(/*tied=*/false, /*with_branch=*/true, /*with_spare=*/true);
    net->to(kFloat64);
    return net;
  };
  auto reference = make_net(61), sharded = make_net(61);
  DistributedDataParallel ddp(reference, DistributedDataParallelOptions().find_unused_parameters(true));
  optim::AdamW plain(reference->parameters(), optim::AdamWOptions(0.01));
  ZeroRedundancyOptimizer zero(sharded->parameters(), ZeroRedundancyOptimizer::of<optim::AdamW>(optim::AdamWOptions(0.01)),
                               ZeroRedundancyOptimizerOptions().reduce_scatter(true));
  const Tensor spare_before = sharded->spare->weight.detach().clone();
  const int64_t share = kBatch / world_size();
  for (int64_t step = 0; step < 4; ++step) {
    Generator gen(700 + step);
    Tensor x = randn({kBatch, 6}, kFloat64, gen).narrow(0, rank() * share, share);
    Tensor y = randn({kBatch, 3}, kFloat64, gen).narrow(0, rank() * share, share);
    const bool use_branch = rank() == 0;  // the others never reach it
    for (auto [net, opt] : {std::pair<Net*, optim::Optimizer*>{reference.get(), &plain}, {sharded.get(), &zero}}) {
      opt->zero_grad();
      nn::functional::mse_loss(net->forward(x, use_branch), y).backward();
      opt->step();
    }
  }
  CHECK(max_difference(*sharded, *reference) < 1e-12);
  CHECK(check::max_abs_diff(check::values(sharded->spare->weight), check::values(spare_before)) == 0.0);
  const NamedTensors state = zero.state_dict();
  // Net's parameters in order: fc1 (2), fc2 (2), head (2), branch (2), spare (2): nothing for 8 and 9.
  for (const auto& entry : state) {
    CHECK(entry.first.rfind("state.8.", 0) != 0);
    CHECK(entry.first.rfind("state.9.", 0) != 0);
  }
  CHECK(max_entry_difference(state, plain.state_dict()) < 1e-12);
}

// More ranks than elements: one 0-d parameter, owned by rank 0; the others own empty shards and
// still take part in every collective.
TEST_CASE("zero: one element over every rank, the other shards empty") {
  Tensor p = full({}, 1.0, TensorOptions(kFloat64).requires_grad());
  ZeroRedundancyOptimizer zero({p}, ZeroRedundancyOptimizer::of<optim::SGD>(optim::SGDOptions(0.1).momentum(0.9)),
                               ZeroRedundancyOptimizerOptions().reduce_scatter(true));
  CHECK(zero.numel() == 1);
  CHECK(zero.shard_end() - zero.shard_begin() == (rank() == 0 ? 1 : 0));
  p.set_grad(full({}, static_cast<double>(rank() + 1), kFloat64));  // averages to (N + 1) / 2
  zero.step();
  const double average = (world_size() + 1) / 2.0;
  CHECK(p.item<double>() == doctest::Approx(1.0 - 0.1 * average).epsilon(1e-15));
  const NamedTensors state = zero.state_dict();
  REQUIRE(state.back().first == "state.0.momentum_buffer");
  CHECK(state.back().second.item<double>() == doctest::Approx(average).epsilon(1e-15));
  CHECK(zero.state_bytes() == (rank() == 0 ? 8 : 0));
}
