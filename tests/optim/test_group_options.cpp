// Parameter groups inherit the optimizer's options, as in PyTorch: a group that sets only its
// weight decay trains at the optimizer's lr, momentum and betas, and a group that sets its own
// betas, momentum, eps or lr uses them. Each optimizer, saving and loading such groups, and the
// schedules acting on them.
#include <doctest/doctest.h>

#include <cmath>

#include "cppgrad.h"
#include "optim_helpers.h"

using namespace cppgrad;
using namespace cppgrad::optim;
using optimtest::contains;
using optimtest::error_message;
using optimtest::param;
using optimtest::values;

namespace {

// Σ p·c + ½Σ p²: the gradient of p is c + p, so it changes from step to step (momentum and
// Adam's moments get exercised).
Tensor loss_of(const Tensor& p, const std::vector<double>& c) {
  return (p * tensor(c, {static_cast<int64_t>(c.size())})).sum() + (p * p).sum() * 0.5;
}

const std::vector<double> kStartA{1.0, -2.0, 0.5}, kStartB{3.0, 0.25};
const std::vector<double> kCoefA{0.5, -1.5, 2.0}, kCoefB{-1.0, 4.0};

// Steps `opt` three times on loss_of(a) + loss_of(b).
void run(Optimizer& opt, const Tensor& a, const Tensor& b) {
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    (loss_of(a, kCoefA) + loss_of(b, kCoefB)).backward();
    opt.step();
  }
}

// Steps `opt` three times on loss_of(p, coef).
void run_one(Optimizer& opt, const Tensor& p, const std::vector<double>& coef) {
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    loss_of(p, coef).backward();
    opt.step();
  }
}

// The values of `p` equal `q`'s exactly: the same arithmetic in the same order.
void check_same(const Tensor& p, const Tensor& q) { CHECK(values(p) == values(q)); }

}  // namespace

TEST_CASE("SGD: a group that sets only weight_decay trains at the optimizer's lr and momentum") {
  // The case from the issue: before, this group trained at lr 0.001 without momentum.
  Tensor a = param(kStartA), b = param(kStartB);
  SGD opt({ParamGroup{.params = {a}, .weight_decay = 5e-4}, ParamGroup{.params = {b}}}, SGDOptions(0.1).momentum(0.9));
  const ParamGroup& g0 = opt.param_groups()[0];
  CHECK(g0.lr == 0.1);
  CHECK(g0.momentum == 0.9);
  CHECK(g0.weight_decay == 5e-4);
  CHECK(g0.dampening == 0.0);
  CHECK(g0.nesterov == false);
  CHECK(opt.param_groups()[1].weight_decay == 0.0);
  CHECK_FALSE(g0.beta1.has_value());  // not an SGD option
  run(opt, a, b);

  // Each group moves exactly as one single-group SGD with the same options would.
  Tensor a1 = param(kStartA), b1 = param(kStartB);
  SGD alone_a({a1}, SGDOptions(0.1).momentum(0.9).weight_decay(5e-4));
  SGD alone_b({b1}, SGDOptions(0.1).momentum(0.9));
  run_one(alone_a, a1, kCoefA);
  run_one(alone_b, b1, kCoefB);
  check_same(a, a1);
  check_same(b, b1);
}

TEST_CASE("SGD: a group's own lr, momentum, dampening and nesterov override the optimizer's") {
  Tensor a = param(kStartA), b = param(kStartB);
  SGD opt({ParamGroup{.params = {a}, .lr = 0.05, .momentum = 0.5, .nesterov = true},
           ParamGroup{.params = {b}, .momentum = 0.8, .dampening = 0.3}},
          SGDOptions(0.2).momentum(0.9).weight_decay(0.01));
  run(opt, a, b);
  Tensor a1 = param(kStartA), b1 = param(kStartB);
  SGD alone_a({a1}, SGDOptions(0.05).momentum(0.5).nesterov(true).weight_decay(0.01));
  SGD alone_b({b1}, SGDOptions(0.2).momentum(0.8).dampening(0.3).weight_decay(0.01));
  run_one(alone_a, a1, kCoefA);
  run_one(alone_b, b1, kCoefB);
  check_same(a, a1);
  check_same(b, b1);
}

TEST_CASE("Adam: groups inherit lr and betas, and use their own where they set them") {
  Tensor a = param(kStartA), b = param(kStartB);
  Adam opt({ParamGroup{.params = {a}, .weight_decay = 0.1, .beta1 = 0.5, .eps = 1e-3, .amsgrad = true},
            ParamGroup{.params = {b}}},
           AdamOptions(0.05).beta2(0.9));
  const ParamGroup& g0 = opt.param_groups()[0];
  CHECK(g0.lr == 0.05);
  CHECK(g0.beta1 == 0.5);
  CHECK(g0.beta2 == 0.9);
  CHECK(g0.eps == 1e-3);
  CHECK(g0.amsgrad == true);
  CHECK(opt.param_groups()[1].beta1 == 0.9);
  CHECK(opt.param_groups()[1].weight_decay == 0.0);
  CHECK_FALSE(g0.momentum.has_value());  // not an Adam option
  run(opt, a, b);
  Tensor a1 = param(kStartA), b1 = param(kStartB);
  Adam alone_a({a1}, AdamOptions(0.05).beta1(0.5).beta2(0.9).eps(1e-3).weight_decay(0.1).amsgrad(true));
  Adam alone_b({b1}, AdamOptions(0.05).beta2(0.9));
  run_one(alone_a, a1, kCoefA);
  run_one(alone_b, b1, kCoefB);
  check_same(a, a1);
  check_same(b, b1);
}

TEST_CASE("AdamW: groups keep the optimizer's decoupled weight decay unless they set their own") {
  // Before, groups built this way had weight decay 0.
  Tensor a = param(kStartA), b = param(kStartB);
  AdamW opt({ParamGroup{.params = {a}, .beta2 = 0.95}, ParamGroup{.params = {b}, .lr = 0.02, .weight_decay = 0.0}},
            AdamWOptions(0.1).weight_decay(0.3));
  CHECK(opt.param_groups()[0].weight_decay == 0.3);
  CHECK(opt.param_groups()[0].lr == 0.1);
  CHECK(opt.param_groups()[1].weight_decay == 0.0);
  run(opt, a, b);
  Tensor a1 = param(kStartA), b1 = param(kStartB);
  AdamW alone_a({a1}, AdamWOptions(0.1).weight_decay(0.3).beta2(0.95));
  AdamW alone_b({b1}, AdamWOptions(0.02).weight_decay(0.0));
  run_one(alone_a, a1, kCoefA);
  run_one(alone_b, b1, kCoefB);
  check_same(a, a1);
  check_same(b, b1);

  SUBCASE("with AdamW's default options, a group that sets nothing decays by 0.01") {
    Tensor p = param({1.0});
    AdamW defaults({ParamGroup{.params = {p}}});
    CHECK(defaults.param_groups()[0].weight_decay == 0.01);
    CHECK(defaults.param_groups()[0].lr == 1e-3);
  }
}

TEST_CASE("a group that sets an option its optimizer does not have, or a bad value, is an error") {
  Tensor p = param({1.0});
  CHECK(contains(error_message([&] { SGD opt({ParamGroup{.params = {p}, .beta1 = 0.5}}, SGDOptions(0.1)); }),
                 "SGD: parameter group 0 ('') sets beta1, which SGD does not have"));
  CHECK(contains(error_message([&] { Adam opt({ParamGroup{.params = {p}, .name = "w", .momentum = 0.9}}); }),
                 "Adam: parameter group 0 ('w') sets momentum, which Adam does not have"));
  CHECK(contains(error_message([&] {
                   AdamW opt({ParamGroup{.params = {p}}, ParamGroup{.params = {param({2.0})}, .beta2 = 1.0}});
                 }),
                 "AdamW: parameter group 1: betas must be in [0, 1), got (0.9, 1)"));
  CHECK(contains(error_message([&] { SGD opt({ParamGroup{.params = {p}, .nesterov = true}}, SGDOptions(0.1)); }),
                 "Nesterov"));
  // Nesterov is fine in a group that has momentum, even if the optimizer's options have none.
  CHECK(error_message([&] { SGD opt({ParamGroup{.params = {p}, .momentum = 0.9, .nesterov = true}}, SGDOptions(0.1)); })
            .empty());
}

TEST_CASE("state_dict saves every group's options and load_state_dict restores them") {
  auto make = [](const Tensor& a, const Tensor& b, const AdamWOptions& o) {
    return AdamW({ParamGroup{.params = {a}, .weight_decay = 0.2, .name = "decay", .beta1 = 0.6},
                  ParamGroup{.params = {b}, .lr = 0.01, .name = "no_decay", .eps = 1e-4}},
                 o);
  };
  Tensor a = param(kStartA), b = param(kStartB);
  AdamW opt = make(a, b, AdamWOptions(0.05));
  run(opt, a, b);
  nn::NamedTensors state = opt.state_dict();
  std::vector<std::string> group_keys;
  for (const auto& [name, t] : state)
    if (name.starts_with("param_groups.0.")) group_keys.push_back(name);
  CHECK(group_keys == std::vector<std::string>{"param_groups.0.lr", "param_groups.0.weight_decay",
                                               "param_groups.0.beta1", "param_groups.0.beta2", "param_groups.0.eps",
                                               "param_groups.0.amsgrad"});

  // A fresh optimizer built with other options takes the saved ones and continues exactly as the
  // first one does.
  Tensor a2 = a.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  AdamW resumed({ParamGroup{.params = {a2}}, ParamGroup{.params = {b2}}}, AdamWOptions(0.7).beta1(0.1).amsgrad(true));
  resumed.load_state_dict(state);
  CHECK(resumed.param_groups()[0].beta1 == 0.6);
  CHECK(resumed.param_groups()[0].weight_decay == 0.2);
  CHECK(resumed.param_groups()[1].lr == 0.01);
  CHECK(resumed.param_groups()[1].eps == 1e-4);
  CHECK(resumed.param_groups()[1].amsgrad == false);
  CHECK(resumed.param_groups()[0].name.empty());  // names are the program's, not the checkpoint's
  run(opt, a, b);
  run(resumed, a2, b2);
  check_same(a, a2);
  check_same(b, b2);

  SUBCASE("a checkpoint without one of the group's options is refused, naming it, and changes nothing") {
    Tensor p = param({1.0});
    SGD sgd({p}, SGDOptions(0.1).momentum(0.9));
    CHECK(contains(error_message([&] {
                     sgd.load_state_dict({{"param_groups.0.lr", scalar_tensor(0.3, kFloat64)},
                                          {"param_groups.0.weight_decay", scalar_tensor(0.01, kFloat64)}});
                   }),
                   "'param_groups.0.momentum' is missing"));
    CHECK(sgd.param_groups()[0].lr == 0.1);
  }
  SUBCASE("a loaded option out of range is rejected and changes nothing") {
    nn::NamedTensors bad = state;
    for (auto& [name, t] : bad)
      if (name == "param_groups.1.beta1") t = scalar_tensor(1.5, kFloat64);
    CHECK(contains(error_message([&] { resumed.load_state_dict(bad); }), "betas must be in [0, 1)"));
    CHECK(resumed.param_groups()[1].beta1 == 0.9);
  }
}

TEST_CASE("schedules act on every group, from each group's own or inherited rate") {
  Tensor a = param(kStartA), b = param(kStartB);
  SGD opt({ParamGroup{.params = {a}, .weight_decay = 1e-3}, ParamGroup{.params = {b}, .lr = 0.4}},
          SGDOptions(0.1).momentum(0.9));
  StepLR sched(opt, /*step_size=*/2, /*gamma=*/0.5);
  const double factor[] = {1.0, 1.0, 0.5, 0.5, 0.25};
  for (int step = 0; step < 5; ++step) {
    INFO("step " << step);
    CHECK(opt.param_groups()[0].lr == doctest::Approx(0.1 * factor[step]).epsilon(1e-15));
    CHECK(opt.param_groups()[1].lr == doctest::Approx(0.4 * factor[step]).epsilon(1e-15));
    CHECK(opt.param_groups()[0].momentum == 0.9);  // the schedule changes the rate only
    opt.zero_grad();
    (loss_of(a, kCoefA) + loss_of(b, kCoefB)).backward();
    opt.step();
    sched.step();
  }
  // The schedule's saved base rates are the groups' resolved ones.
  nn::NamedTensors s = sched.state_dict();
  CHECK(s[1].first == "base_lrs.0");
  CHECK(s[1].second.item<double>() == 0.1);
  CHECK(s[2].second.item<double>() == 0.4);

  SUBCASE("warm-up + cosine on Adam groups") {
    Tensor p = param({1.0}), q = param({2.0});
    Adam adam({ParamGroup{.params = {p}, .beta1 = 0.8}, ParamGroup{.params = {q}, .lr = 0.5}}, AdamOptions(0.2));
    WarmupCosineLR warm(adam, /*warmup=*/4, /*total=*/10);
    CHECK(adam.param_groups()[0].lr == doctest::Approx(0.2 / 5.0));  // base·(0+1)/(4+1)
    CHECK(adam.param_groups()[1].lr == doctest::Approx(0.5 / 5.0));
    for (int i = 0; i < 4; ++i) warm.step();
    CHECK(adam.param_groups()[0].lr == doctest::Approx(0.2));
    CHECK(adam.param_groups()[1].lr == doctest::Approx(0.5));
    CHECK(adam.param_groups()[0].beta1 == 0.8);
  }
}
