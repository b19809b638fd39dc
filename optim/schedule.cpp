#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <utility>

namespace cppgrad::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (const auto& g : optimizer.param_groups()) base_lrs_.push_back(g.lr.value());
}

// The rates a schedule gives pass the checks set_lr makes, so that a NaN or negative factor, or a
// lambda returning one, is refused at the step that reaches it instead of training on a NaN rate.
// All groups' rates are checked before any is set.
void LRScheduler::apply() {
  auto& groups = optimizer_.param_groups();
  std::vector<double> rates;
  for (size_t g = 0; g < groups.size(); ++g) {
    const double lr = lr_at(last_step_, base_lrs_[g]);
    CPPGRAD_CHECK(lr >= 0.0 && lr <= kMaxLearningRate, "learning-rate schedule: at step {} it gives group {} the "
                  "learning rate {}, outside [0, {}]", last_step_, g, lr, kMaxLearningRate);
    rates.push_back(lr);
  }
  for (size_t g = 0; g < groups.size(); ++g) groups[g].lr = rates[g];
}

void LRScheduler::step() {
  ++last_step_;
  try {
    apply();
  } catch (...) {
    --last_step_;  // a refused step is not taken
    throw;
  }
}

NamedTensors LRScheduler::state_dict() const {
  NamedTensors out{{"last_step", scalar_tensor(static_cast<double>(last_step_), kInt64)}};
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    out.emplace_back(fmt::format("base_lrs.{}", g), scalar_tensor(base_lrs_[g], kFloat64));
  return out;
}

void LRScheduler::load_state_dict(const NamedTensors& state) {
  constexpr const char* op = "LRScheduler::load_state_dict";
  // Read into copies first: a rejected state leaves the schedule as it was.
  int64_t last_step = last_step_;
  std::vector<double> base_lrs = base_lrs_;
  bool found_step = false;
  std::vector<bool> found_lr(base_lrs.size(), false);
  for (const auto& [key, t] : state) {
    size_t g = 0;
    if (key == "last_step") {
      CPPGRAD_CHECK(t.dim() == 0 && t.dtype() == kInt64, "{}: 'last_step' must be a 0-d int64 tensor, got {} of shape {}",
                    op, dtype_name(t.dtype()), shape_str(t.shape()));
      last_step = t.item<int64_t>();
      // Non-negative (it counts steps taken), and at most 2^53, where it still converts to a double exactly.
      CPPGRAD_CHECK(last_step >= 0 && last_step <= (int64_t{1} << 53), "{}: 'last_step' is {}, not in [0, 2^53]", op,
                    last_step);
      found_step = true;
    } else if (std::sscanf(key.c_str(), "base_lrs.%zu", &g) == 1 && key == fmt::format("base_lrs.{}", g)) {
      CPPGRAD_CHECK(g < base_lrs.size(), "{}: '{}' names group {} of {}", op, key, g, base_lrs.size());
      CPPGRAD_CHECK(t.dim() == 0 && t.is_floating_point(), "{}: '{}' must be a 0-d floating tensor, got {} of shape {}",
                    op, key, dtype_name(t.dtype()), shape_str(t.shape()));
      base_lrs[g] = t.item<double>();
      CPPGRAD_CHECK(base_lrs[g] >= 0.0 && base_lrs[g] <= kMaxLearningRate, "{}: '{}' is {}, not a finite rate in [0, {}] "
                    "(optim/optimizer.h says why)", op, key, base_lrs[g], kMaxLearningRate);
      found_lr[g] = true;
    } else {
      throw Error(fmt::format("{}: unknown key '{}'", op, excerpt(key)));
    }
  }
  CPPGRAD_CHECK(found_step, "{}: 'last_step' is missing", op);
  for (size_t g = 0; g < found_lr.size(); ++g) CPPGRAD_CHECK(found_lr[g], "{}: 'base_lrs.{}' is missing", op, g);
  std::swap(last_step_, last_step);
  std::swap(base_lrs_, base_lrs);
  try {
    apply();  // the rates at the loaded step pass set_lr's checks, or the schedule stays as it was
  } catch (...) {
    std::swap(last_step_, last_step);
    std::swap(base_lrs_, base_lrs);
    throw;
  }
}

NoamLR::NoamLR(Optimizer& optimizer, int64_t d_model_, int64_t warmup, double factor_)
    : LRScheduler(optimizer), d_model(d_model_), warmup_steps(warmup), factor(factor_) {
  CPPGRAD_CHECK(d_model > 0 && warmup_steps > 0, "NoamLR: d_model {} and warmup_steps {} must be positive", d_model, warmup);
  CPPGRAD_CHECK(factor >= 0.0 && std::isfinite(factor), "NoamLR: factor must be finite and non-negative, got {}", factor);
  apply();
}

double NoamLR::lr_at(int64_t step, double) const {
  const double n = static_cast<double>(step + 1);
  return factor * std::pow(static_cast<double>(d_model), -0.5) *
         std::min(std::pow(n, -0.5), n * std::pow(static_cast<double>(warmup_steps), -1.5));
}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup, int64_t total, double min)
    : LRScheduler(optimizer), warmup_steps(warmup), total_steps(total), min_lr(min) {
  CPPGRAD_CHECK(warmup >= 0 && total > warmup, "WarmupCosineLR: need 0 ≤ warmup_steps ({}) < total_steps ({})", warmup, total);
  CPPGRAD_CHECK(min_lr >= 0.0 && min_lr <= kMaxLearningRate, "WarmupCosineLR: min_lr must be in [0, {}], got {}",
                kMaxLearningRate, min_lr);
  apply();
}

// The warm-up is nanoGPT's (train.py's get_lr, whose `it` is last_step here), so a run of
// nanoGPT's recipe gets its rates step for step: base/11 at step 0 of a 10-step warm-up, base
// reached at step `warmup_steps`, where the cosine begins (no flat step between the two). The
// other common convention, transformers' LambdaLR with step/warmup, spends step 0 at rate 0.
double WarmupCosineLR::lr_at(int64_t step, double base_lr) const {
  if (step < warmup_steps) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps + 1);
  double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps));
  return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

StepLR::StepLR(Optimizer& optimizer, int64_t size, double g) : LRScheduler(optimizer), step_size(size), gamma(g) {
  CPPGRAD_CHECK(step_size > 0, "StepLR: step_size must be positive, got {}", step_size);
  CPPGRAD_CHECK(gamma >= 0.0 && std::isfinite(gamma), "StepLR: gamma must be finite and non-negative, got {}", gamma);
  apply();
}

double StepLR::lr_at(int64_t step, double base_lr) const {
  return base_lr * std::pow(gamma, static_cast<double>(step / step_size));
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lambda)
    : LRScheduler(optimizer), lambda_(std::move(lambda)) {
  CPPGRAD_CHECK(static_cast<bool>(lambda_), "LambdaLR: no function given");
  apply();
}

double LambdaLR::lr_at(int64_t step, double base_lr) const { return base_lr * lambda_(step); }

}  // namespace cppgrad::optim
