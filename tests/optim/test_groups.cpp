// What the Optimizer base class does for every method: parameter groups with their own rates
// and decay, skipping parameters without a gradient, zero_grad, and tied weights.
#include <doctest/doctest.h>

#include <cmath>

#include "cppgrad.h"
#include "optim_helpers.h"

using namespace cppgrad;
using namespace cppgrad::optim;
using optimtest::check_values;
using optimtest::param;
using optimtest::values;

namespace {

// Σ p·c: the gradient of p is exactly c.
Tensor linear_loss(const Tensor& p, const std::vector<double>& c) {
  return (p * tensor(c, {static_cast<int64_t>(c.size())})).sum();
}

// The names of the per-parameter state entries ("state.<i>.<name>").
std::vector<std::string> state_keys(const Optimizer& opt) {
  std::vector<std::string> keys;
  for (const auto& [name, t] : opt.state_dict())
    if (name.starts_with("state.")) keys.push_back(name);
  return keys;
}

// Adam's first step (m̂ = g, v̂ = g²) after decoupled decay: p(1 - lr·λ) - lr·g/(|g| + ε).
double adamw_first_step(double p, double g, double lr, double wd) {
  return p * (1.0 - lr * wd) - lr * g / (std::abs(g) + 1e-8);
}

}  // namespace

TEST_CASE("parameter groups keep their names and their own lr and weight decay") {
  Tensor a = param({1.0, -2.0}), b = param({0.5, 3.0});
  SGD opt({ParamGroup{{a}, 0.1, 0.01, "decay"}, ParamGroup{{b}, 0.5, 0.0, "no_decay"}}, SGDOptions(1.0));
  REQUIRE(opt.param_groups().size() == 2);
  CHECK(opt.param_groups()[0].name == "decay");
  CHECK(opt.param_groups()[1].name == "no_decay");
  CHECK(opt.lr() == 0.1);  // the first group's

  (linear_loss(a, {2.0, 4.0}) + linear_loss(b, {-1.0, 6.0})).backward();
  opt.step();
  check_values(a, {1.0 - 0.1 * (2.0 + 0.01 * 1.0), -2.0 - 0.1 * (4.0 + 0.01 * -2.0)});
  check_values(b, {0.5 - 0.5 * -1.0, 3.0 - 0.5 * 6.0});

  // A group's rate can be changed between steps.
  opt.param_groups()[1].lr = 0.25;
  opt.step();  // the same gradients again
  check_values(b, {1.0 + 0.25, 0.0 - 0.25 * 6.0});
}

TEST_CASE("AdamW applies each group's own lr and weight decay") {
  Tensor a = param({1.0, -2.0}), b = param({0.5, 3.0});
  AdamW opt({ParamGroup{{a}, 0.1, 0.2, "decay"}, ParamGroup{{b}, 0.05, 0.0, "no_decay"}});
  (linear_loss(a, {2.0, -4.0}) + linear_loss(b, {-1.0, 6.0})).backward();
  opt.step();
  check_values(a, {adamw_first_step(1.0, 2.0, 0.1, 0.2), adamw_first_step(-2.0, -4.0, 0.1, 0.2)});
  check_values(b, {adamw_first_step(0.5, -1.0, 0.05, 0.0), adamw_first_step(3.0, 6.0, 0.05, 0.0)});
}

TEST_CASE("set_lr sets every group's rate") {
  Tensor a = param({1.0}), b = param({2.0});
  Adam opt({ParamGroup{{a}, 0.1, 0.0, "a"}, ParamGroup{{b}, 0.2, 0.0, "b"}});
  opt.set_lr(0.03);
  CHECK(opt.param_groups()[0].lr == 0.03);
  CHECK(opt.param_groups()[1].lr == 0.03);
  CHECK(opt.lr() == 0.03);
}

TEST_CASE("parameters without a gradient are skipped") {
  Tensor used = param({1.0, 2.0}), unused = param({3.0, 4.0});
  // Momentum and weight decay would move `unused` if it were not skipped.
  SGD opt({used, unused}, SGDOptions(0.1).momentum(0.9).weight_decay(0.1));
  linear_loss(used, {1.0, -1.0}).backward();
  CHECK_FALSE(unused.grad().defined());
  opt.step();
  check_values(used, {1.0 - 0.1 * (1.0 + 0.1), 2.0 - 0.1 * (-1.0 + 0.2)}, 0.0);
  check_values(unused, {3.0, 4.0}, 0.0);
  // Only the parameter that was updated has a momentum buffer.
  CHECK(state_keys(opt) == std::vector<std::string>{"state.0.momentum_buffer"});

  // Next step only `unused` has a gradient: `used` keeps its value, momentum notwithstanding.
  opt.zero_grad();
  linear_loss(unused, {2.0, 2.0}).backward();
  std::vector<double> used_before = values(used);
  opt.step();
  check_values(used, used_before, 0.0);
  check_values(unused, {3.0 - 0.1 * (2.0 + 0.3), 4.0 - 0.1 * (2.0 + 0.4)});
  CHECK(state_keys(opt) == std::vector<std::string>{"state.0.momentum_buffer", "state.1.momentum_buffer"});
}

TEST_CASE("Adam keeps no state for a parameter that never had a gradient") {
  Tensor used = param({1.0, 2.0}), unused = param({3.0, 4.0});
  Adam opt({used, unused}, AdamOptions(0.1));
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    linear_loss(used, {1.0, -1.0}).backward();
    opt.step();
  }
  CHECK(state_keys(opt) == std::vector<std::string>{"state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step"});
  for (const auto& [name, t] : opt.state_dict())
    if (name == "state.0.step") CHECK(t.item<int64_t>() == 2);
  check_values(unused, {3.0, 4.0}, 0.0);
}

TEST_CASE("zero_grad with set_to_none true and false") {
  Tensor p = param({1.0, -2.0, 4.0});
  SGD opt({p}, SGDOptions(0.5).weight_decay(0.1));

  SUBCASE("set_to_none true drops the gradients and the next step does nothing") {
    linear_loss(p, {1.0, 2.0, 3.0}).backward();
    opt.zero_grad(/*set_to_none=*/true);
    CHECK_FALSE(p.grad().defined());
    opt.step();
    check_values(p, {1.0, -2.0, 4.0}, 0.0);
  }
  SUBCASE("set_to_none false keeps zero gradients and the next step still decays") {
    linear_loss(p, {1.0, 2.0, 3.0}).backward();
    opt.zero_grad(/*set_to_none=*/false);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().shape() == Shape{3});
    check_values(p.grad(), {0.0, 0.0, 0.0}, 0.0);
    opt.step();  // g = 0 + λp, so p ← p·(1 - lr·λ)
    check_values(p, {0.95, -1.9, 3.8});
    // A fresh backward fills the zeroed gradient rather than adding to an old one.
    linear_loss(p, {1.0, 2.0, 3.0}).backward();
    check_values(p.grad(), {1.0, 2.0, 3.0}, 0.0);
  }
  SUBCASE("the default is set_to_none") {
    linear_loss(p, {1.0, 2.0, 3.0}).backward();
    opt.zero_grad();
    CHECK_FALSE(p.grad().defined());
  }
}

TEST_CASE("a tensor listed twice in one group is updated once with its accumulated gradient") {
  Tensor w = param({1.0, -1.0}), other = param({2.0});
  SGD opt({w, other, w}, SGDOptions(0.1));
  REQUIRE(opt.param_groups()[0].params.size() == 2);
  // w appears twice in the loss too: its gradient is the sum of both uses.
  (linear_loss(w, {1.0, 2.0}) + linear_loss(w, {3.0, -5.0}) + linear_loss(other, {1.0})).backward();
  check_values(w.grad(), {4.0, -3.0}, 0.0);
  opt.step();
  check_values(w, {1.0 - 0.1 * 4.0, -1.0 - 0.1 * -3.0});  // once, not twice
  check_values(other, {2.0 - 0.1});
}

TEST_CASE("a tensor listed in two groups is updated once in the first") {
  Tensor w = param({1.0, -1.0}), v = param({0.5});
  Adam opt({ParamGroup{{w}, 0.1, 0.0, "first"}, ParamGroup{{v, w}, 0.5, 0.0, "second"}});
  REQUIRE(opt.param_groups()[1].params.size() == 1);
  CHECK(opt.param_groups()[1].params[0].is_same(v));
  (linear_loss(w, {1.0, 2.0}) + linear_loss(w, {3.0, -5.0}) + linear_loss(v, {-2.0})).backward();
  opt.step();
  // Adam's first step with the summed gradient (4, -3), at the first group's rate.
  check_values(w, {adamw_first_step(1.0, 4.0, 0.1, 0.0), adamw_first_step(-1.0, -3.0, 0.1, 0.0)});
  check_values(v, {adamw_first_step(0.5, -2.0, 0.5, 0.0)});
  // One state per distinct tensor, each after exactly one step.
  CHECK(state_keys(opt) == std::vector<std::string>{"state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step",
                                                    "state.1.exp_avg", "state.1.exp_avg_sq", "state.1.step"});
  for (const auto& [name, t] : opt.state_dict())
    if (name.ends_with(".step")) CHECK(t.item<int64_t>() == 1);
}

TEST_CASE("a step bumps the parameter's version and records no graph") {
  Tensor p = param({1.0, 2.0});
  SGD opt({p}, SGDOptions(0.1));
  linear_loss(p, {1.0, 1.0}).backward();
  const uint64_t before = p.version();
  opt.step();
  CHECK(p.version() > before);
  CHECK(p.is_leaf());
  CHECK(p.grad_fn() == nullptr);
  CHECK(p.requires_grad());
}
