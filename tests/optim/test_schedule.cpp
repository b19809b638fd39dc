// Learning-rate schedules: their values at chosen steps against the formulas written out here,
// every group's rate set, any optimizer driven, and their state saved and restored.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "cppgrad.h"
#include "optim_helpers.h"

using namespace cppgrad;
using namespace cppgrad::optim;
using optimtest::check_values;
using optimtest::param;
using optimtest::values;

namespace {

// Vaswani et al. (2017), §5.3: lrate = d_model^-0.5 · min(n^-0.5, n · warmup^-1.5), n ≥ 1.
double noam(double factor, double d_model, double warmup, double n) {
  return factor * std::pow(d_model, -0.5) * std::min(std::pow(n, -0.5), n * std::pow(warmup, -1.5));
}

// nanoGPT's get_lr (train.py) at it = step: a linear warm-up reaching the base rate at step
// warmup, then half a cosine down to min_lr.
double warmup_cosine(double base, double min_lr, int64_t warmup, int64_t total, int64_t step) {
  if (step < warmup) return base * static_cast<double>(step + 1) / static_cast<double>(warmup + 1);
  double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  if (progress > 1.0) progress = 1.0;
  return min_lr + (base - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

// Advances `sched` to `step` scheduler steps (from where it is).
void advance_to(LRScheduler& sched, int64_t step) {
  while (sched.last_step() < step) sched.step();
}

}  // namespace

TEST_CASE("NoamLR follows the paper's formula with n = last_step + 1") {
  Tensor p = param({0.0});
  Adam opt({p}, AdamOptions(123.0));  // the group's own rate is not used
  NoamLR sched(opt, /*d_model=*/512, /*warmup=*/4000, /*factor=*/2.0);
  CHECK(sched.last_step() == 0);
  CHECK(opt.lr() == doctest::Approx(2.0 / std::sqrt(512.0) * std::pow(4000.0, -1.5)));  // n = 1
  for (int64_t step : {0, 1, 10, 1999, 3998, 3999, 4000, 4001, 10000, 20000}) {
    advance_to(sched, step);
    INFO("step " << step);
    const double expected = noam(2.0, 512.0, 4000.0, static_cast<double>(step + 1));
    CHECK(opt.lr() == doctest::Approx(expected).epsilon(1e-12));
    CHECK(sched.last_lr() == opt.lr());
    CHECK(sched.lr_at(step, 123.0) == doctest::Approx(expected).epsilon(1e-12));
  }
  // The peak is at n = warmup, where both branches agree: d_model^-0.5 · warmup^-0.5.
  CHECK(sched.lr_at(3999, 0.0) == doctest::Approx(2.0 / std::sqrt(512.0 * 4000.0)).epsilon(1e-12));
  CHECK(sched.lr_at(3998, 0.0) < sched.lr_at(3999, 0.0));
  CHECK(sched.lr_at(4000, 0.0) < sched.lr_at(3999, 0.0));
}

TEST_CASE("WarmupCosineLR warms up linearly then decays on a half cosine to min_lr") {
  Tensor p = param({0.0});
  SGD opt({p}, SGDOptions(0.1));
  WarmupCosineLR sched(opt, /*warmup=*/5, /*total=*/25, /*min_lr=*/0.01);
  for (int64_t step = 0; step <= 30; ++step) {
    advance_to(sched, step);
    INFO("step " << step);
    CHECK(opt.lr() == doctest::Approx(warmup_cosine(0.1, 0.01, 5, 25, step)).epsilon(1e-12));
  }
  // Landmarks, by hand: 0.1·1/6 and 0.1·5/6 in the warm-up.
  CHECK(sched.lr_at(0, 0.1) == doctest::Approx(0.1 / 6));
  CHECK(sched.lr_at(4, 0.1) == doctest::Approx(0.5 / 6));
  CHECK(sched.lr_at(5, 0.1) == doctest::Approx(0.1));
  CHECK(sched.lr_at(15, 0.1) == doctest::Approx(0.055));  // halfway: the mean of base and min
  CHECK(sched.lr_at(25, 0.1) == doctest::Approx(0.01));
  CHECK(sched.lr_at(1000, 0.1) == doctest::Approx(0.01));
}

TEST_CASE("WarmupCosineLR's first steps are nanoGPT's get_lr: lr·(it+1)/(warmup+1), not lr·(it+1)/warmup") {
  // nanoGPT's defaults scaled down: learning_rate 1e-3, warmup_iters 10, lr_decay_iters 100, min_lr 1e-4.
  Tensor p = param({0.0});
  AdamW opt({p}, AdamWOptions(1e-3));
  WarmupCosineLR sched(opt, 10, 100, 1e-4);
  // Written out from nanoGPT's formula: 1e-3·1/11, 1e-3·2/11, 1e-3·3/11, ..., 1e-3·10/11, then 1e-3.
  const std::vector<double> expected{9.0909090909090909e-5, 1.8181818181818182e-4, 2.7272727272727273e-4,
                                     3.6363636363636364e-4, 4.5454545454545455e-4, 5.4545454545454545e-4,
                                     6.3636363636363636e-4, 7.2727272727272727e-4, 8.1818181818181818e-4,
                                     9.0909090909090909e-4, 1e-3};
  for (int64_t step = 0; step < static_cast<int64_t>(expected.size()); ++step) {
    advance_to(sched, step);
    INFO("step " << step);
    CHECK(opt.lr() == doctest::Approx(expected[static_cast<size_t>(step)]).epsilon(1e-14));
  }
  // and the cosine from there: half-way through the decay, the mean of the two rates
  CHECK(sched.lr_at(55, 1e-3) == doctest::Approx(5.5e-4).epsilon(1e-14));
}

TEST_CASE("WarmupCosineLR without warm-up starts at the base rate") {
  Tensor p = param({0.0});
  SGD opt({p}, SGDOptions(0.2));
  WarmupCosineLR sched(opt, 0, 10);
  CHECK(opt.lr() == doctest::Approx(0.2));
  advance_to(sched, 5);
  CHECK(opt.lr() == doctest::Approx(0.1));
  advance_to(sched, 10);
  CHECK(opt.lr() == doctest::Approx(0.0).scale(1.0));
}

TEST_CASE("StepLR multiplies every group's base rate by gamma every step_size steps") {
  Tensor a = param({0.0}), b = param({0.0});
  SGD opt({ParamGroup{{a}, 0.1, 0.0, "a"}, ParamGroup{{b}, 0.4, 0.0, "b"}}, SGDOptions(1.0));
  StepLR sched(opt, /*step_size=*/3, /*gamma=*/0.5);
  const std::vector<double> factor{1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125};
  for (int64_t step = 0; step < static_cast<int64_t>(factor.size()); ++step) {
    advance_to(sched, step);
    INFO("step " << step);
    CHECK(opt.param_groups()[0].lr == doctest::Approx(0.1 * factor[step]));
    CHECK(opt.param_groups()[1].lr == doctest::Approx(0.4 * factor[step]));
  }
}

TEST_CASE("LambdaLR multiplies each group's base rate by lambda of the step") {
  Tensor a = param({0.0}), b = param({0.0});
  Adam opt({ParamGroup{{a}, 0.1, 0.0, "a"}, ParamGroup{{b}, 0.3, 0.0, "b"}});
  LambdaLR sched(opt, [](int64_t step) { return 1.0 / static_cast<double>(1 + step * step); });
  for (int64_t step : {0, 1, 2, 7}) {
    advance_to(sched, step);
    const double f = 1.0 / static_cast<double>(1 + step * step);
    CHECK(opt.param_groups()[0].lr == doctest::Approx(0.1 * f));
    CHECK(opt.param_groups()[1].lr == doctest::Approx(0.3 * f));
  }
}

TEST_CASE("a schedule drives SGD's steps") {
  // Σ p·c has gradient c, so each SGD step moves p by exactly -lr·c at that step's rate.
  Tensor p = param({1.0, -1.0});
  Tensor c = tensor({2.0, 1.0}, kFloat64);
  SGD opt({p}, SGDOptions(0.1));
  StepLR sched(opt, 2, 0.1);
  std::vector<double> expected = values(p);
  for (int step = 0; step < 5; ++step) {
    const double lr = 0.1 * std::pow(0.1, step / 2);
    CHECK(opt.lr() == doctest::Approx(lr));
    opt.zero_grad();
    (p * c).sum().backward();
    opt.step();
    sched.step();
    expected[0] -= lr * 2.0;
    expected[1] -= lr * 1.0;
    check_values(p, expected);
  }
}

TEST_CASE("a schedule drives Adam's steps") {
  // Adam's first step moves each element by lr·g/(|g| + ε), which is lr to 1e-8.
  Tensor p = param({1.0, -1.0});
  Adam opt({p}, AdamOptions(1.0));
  NoamLR sched(opt, 64, 10);
  (p * tensor({2.0, -3.0}, kFloat64)).sum().backward();
  opt.step();
  const double lr = noam(1.0, 64.0, 10.0, 1.0);
  check_values(p, {1.0 - lr, -1.0 + lr}, 1e-9);
  sched.step();
  CHECK(opt.lr() == doctest::Approx(noam(1.0, 64.0, 10.0, 2.0)));
}

TEST_CASE("a schedule's state restores its step on a fresh optimizer") {
  Tensor p = param({0.0});
  SGD opt({ParamGroup{{p}, 0.1, 0.0, "g"}}, SGDOptions(1.0));
  WarmupCosineLR sched(opt, 3, 20, 0.001);
  advance_to(sched, 7);
  nn::NamedTensors state = sched.state_dict();
  // last_step and one base rate per group.
  REQUIRE(state.size() == 2);
  CHECK(state[0].first == "last_step");
  CHECK(state[0].second.item<int64_t>() == 7);
  CHECK(state[1].first == "base_lrs.0");
  CHECK(state[1].second.item<double>() == 0.1);

  // A fresh optimizer whose group starts at a different rate: the saved base rate wins.
  Tensor q = param({0.0});
  SGD fresh({ParamGroup{{q}, 5.0, 0.0, "g"}}, SGDOptions(1.0));
  WarmupCosineLR resumed(fresh, 3, 20, 0.001);
  resumed.load_state_dict(state);
  CHECK(resumed.last_step() == 7);
  CHECK(fresh.lr() == opt.lr());
  sched.step();
  resumed.step();
  CHECK(fresh.lr() == opt.lr());
  CHECK(fresh.lr() == doctest::Approx(warmup_cosine(0.1, 0.001, 3, 20, 8)));
}

TEST_CASE("a schedule's rates pass the optimizer's own checks: a NaN, negative or huge rate is refused") {
  Tensor a = param({0.0});
  SGD opt({a}, SGDOptions(0.1));
  CHECK_THROWS_WITH_AS(StepLR(opt, 1, std::nan("")), doctest::Contains("gamma must be finite and non-negative"), Error);
  CHECK_THROWS_WITH_AS(StepLR(opt, 1, -1.0), doctest::Contains("gamma"), Error);
  CHECK_THROWS_WITH_AS(NoamLR(opt, 8, 4, -1.0), doctest::Contains("factor must be finite"), Error);
  CHECK_THROWS_WITH_AS(WarmupCosineLR(opt, 0, 10, std::nan("")), doctest::Contains("min_lr must be in"), Error);
  // A rate that grows past kMaxLearningRate is refused at the step that reaches it, and the
  // group keeps the rate it had.
  StepLR growing(opt, 1, 10.0);
  for (int i = 0; i < 4; ++i) growing.step();  // 0.1 · 10⁴ = 1000: the limit itself is allowed
  CHECK(opt.lr() == doctest::Approx(1000.0));
  CHECK_THROWS_WITH_AS(growing.step(), doctest::Contains("at step 5 it gives group 0 the learning rate 10000"), Error);
  CHECK(opt.lr() == doctest::Approx(1000.0));
  CHECK(growing.last_step() == 4);
  SGD other({param({0.0})}, SGDOptions(0.1));
  LambdaLR bad(other, [](int64_t step) { return step < 2 ? 1.0 : std::nan(""); });
  bad.step();
  CHECK_THROWS_WITH_AS(bad.step(), doctest::Contains("learning rate nan"), Error);
}
