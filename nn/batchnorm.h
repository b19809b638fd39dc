// BatchNorm1d (Ioffe and Szegedy 2015), as torch.nn.BatchNorm1d: each channel c of an (N, C) or
// (N, C, L) input is normalised by the mean and variance of its N·L values in the batch, then
// scaled and shifted,
//
//   y = (x − mean_c) / √(var_c + eps) · weight_c + bias_c,
//
// with var_c the biased variance (divided by N·L). Training also folds the batch's statistics
// into running estimates, with the unbiased variance (divided by N·L − 1), as PyTorch does:
//
//   running = (1 − momentum) · running + momentum · batch
//
// and momentum = std::nullopt (PyTorch's momentum=None) makes that a cumulative average,
// momentum = 1 / num_batches_tracked. Evaluation normalises with the running estimates instead,
// so a model's output no longer depends on the rest of its batch.
#pragma once

#include <optional>

#include "layers.h"

namespace cppgrad::nn {

namespace functional {
// As torch.nn.functional.batch_norm. x (N, C, ...); running_mean, running_var, weight, bias (C)
// or undefined. training: normalise by the batch's statistics (and, when running_mean and
// running_var are given, update them in place with `momentum`); otherwise by the running ones,
// which must then be given. Differentiable through the batch's statistics.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight = {},
                  const Tensor& bias = {}, bool training = false, double momentum = 0.1, double eps = 1e-5);
}  // namespace functional

class BatchNorm1d : public UnaryModule {
 public:
  // weight starts at ones and bias at zeros (affine = false: neither exists); running_mean at
  // zeros, running_var at ones, num_batches_tracked (int64, 0-d) at 0 (track_running_stats =
  // false: none of the three exists, and evaluation uses the batch's statistics too).
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true);
  // x (N, C) or (N, C, L) -> the same shape.
  Tensor forward(const Tensor& x) override;
  void reset_running_stats();
  void reset_parameters();  // the running statistics, and weight and bias to ones and zeros
  std::string type_name() const override { return "BatchNorm1d"; }
  std::string extra_repr() const override;

  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;
  Parameter weight, bias;
  Buffer running_mean, running_var, num_batches_tracked;
};

}  // namespace cppgrad::nn
