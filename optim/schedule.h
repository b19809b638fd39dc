// Learning-rate schedules. A schedule sets its optimizer's learning rate for the coming step;
// call step() after each optimizer step. As in PyTorch, constructing one sets the rate of the
// first step, and `last_step` counts the scheduler steps taken (0 at first).
//
// Each rate is computed from the step count and the group's initial rate (lr_at), never from the
// rate the group has now, as PyTorch's closed forms are. So, unlike PyTorch's chainable StepLR, a
// rate set by hand lasts until the next step(), and two schedules on one optimizer do not compose:
// the last to step sets the rate (write one schedule whose lr_at is the composition, as
// WarmupCosineLR is of a warm-up and a cosine). A schedule made after loading an optimizer's
// state takes the loaded rates as its base; load the schedule's own state_dict too.
#pragma once

#include <functional>

#include "optimizer.h"

namespace cppgrad::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;

  void step();
  int64_t last_step() const { return last_step_; }
  double last_lr() const { return optimizer_.lr(); }
  // Each group's initial rate, the base_lr lr_at scales (PyTorch's scheduler.base_lrs).
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // The rate for group `group` (whose initial rate was base_lr) after `step` scheduler steps.
  virtual double lr_at(int64_t step, double base_lr) const = 0;

  NamedTensors state_dict() const;  // "last_step" and "base_lrs.<g>"
  void load_state_dict(const NamedTensors& state);

 protected:
  void apply();  // call at the end of a subclass's constructor

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_step_ = 0;
};

// The paper's schedule (§5.3): lr = factor · d_model^-½ · min(n^-½, n · warmup^-1.5) at optimizer
// step n = last_step + 1: linear warm-up for `warmup` steps, then decay as 1/√n. The groups'
// own rates are not used.
class NoamLR : public LRScheduler {
 public:
  NoamLR(Optimizer& optimizer, int64_t d_model, int64_t warmup_steps, double factor = 1.0);
  double lr_at(int64_t step, double base_lr) const override;
  const int64_t d_model, warmup_steps;
  const double factor;
};

// nanoGPT's get_lr: lr = base·(step+1)/(warmup_steps+1) while step < warmup_steps, then half a
// cosine from base down to min_lr at total_steps, min_lr after (schedule.cpp: why this warm-up).
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);
  double lr_at(int64_t step, double base_lr) const override;
  const int64_t warmup_steps, total_steps;
  const double min_lr;
};

// Multiplies the base rate by gamma every step_size steps.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t step, double base_lr) const override;
  const int64_t step_size;
  const double gamma;
};

// base rate × lambda(step)
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lambda);
  double lr_at(int64_t step, double base_lr) const override;

 private:
  std::function<double(int64_t)> lambda_;
};

}  // namespace cppgrad::optim
