#include "nn/batchnorm.h"

namespace cppgrad::nn {

namespace {

// A statistic or an affine parameter: undefined, or one value per channel.
void check_per_channel(std::string_view op, std::string_view what, const Tensor& t, const Tensor& x) {
  CPPGRAD_CHECK(!t.defined() || (t.dim() == 1 && t.size(0) == x.size(1)),
                "{}: {} {} should have one value per channel, ({}), for input {}", op, what,
                t.defined() ? shape_str(t.shape()) : "", x.size(1), shape_str(x.shape()));
  CPPGRAD_CHECK(!t.defined() || t.is_floating_point(), "{}: {} must be floating, got {}", op, what,
                t.defined() ? dtype_name(t.dtype()) : "");
}

void check_batch_norm(std::string_view op, const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                      const Tensor& weight, const Tensor& bias, bool training, double eps) {
  CPPGRAD_CHECK(x.dim() >= 2, "{}: input {} must be (N, C) or (N, C, L, ...)", op, shape_str(x.shape()));
  CPPGRAD_CHECK(x.is_floating_point(), "{}: input must be floating, got {}", op, dtype_name(x.dtype()));
  CPPGRAD_CHECK(running_mean.defined() == running_var.defined(),
                "{}: running_mean and running_var are given together or not at all", op);
  check_per_channel(op, "running_mean", running_mean, x);
  check_per_channel(op, "running_var", running_var, x);
  check_per_channel(op, "weight", weight, x);
  check_per_channel(op, "bias", bias, x);
  CPPGRAD_CHECK(eps >= 0.0, "{}: eps {} must not be negative", op, eps);
  CPPGRAD_CHECK(training || running_mean.defined(),
                "{}: evaluation (training = false) normalises by running_mean and running_var, and none were given",
                op);
  // One value per channel has no spread: its variance is 0 and its normalised value 0/√eps.
  CPPGRAD_CHECK(!training || x.numel() == 0 || x.numel() / x.size(1) > 1,
                "{}: Expected more than 1 value per channel when training, got input size {}", op,
                shape_str(x.shape()));
}

}  // namespace

namespace functional {

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  check_batch_norm("batch_norm", x, running_mean, running_var, weight, bias, training, eps);
  if (x.numel() == 0) return x.clone();  // as PyTorch: no statistics to take, none updated
  const int64_t channels = x.size(1);
  Shape per_channel(static_cast<size_t>(x.dim() - 1), 1);  // (C) for (N, C), (C, 1) for (N, C, L)
  per_channel[0] = channels;
  std::vector<int64_t> across{0};  // every dim but the channels'
  for (int64_t d = 2; d < x.dim(); ++d) across.push_back(d);

  Tensor mean, var;
  if (training) {
    // The batch's statistics, differentiated through (every element has its share in both):
    // with x̂ = (x − μ)/σ, dx = (dx̂ − mean(dx̂) − x̂ · mean(dx̂ ⊙ x̂)) / σ, means over the batch.
    mean = x.mean(across, /*keepdim=*/true);  // (1, C) or (1, C, 1)
    var = (x - mean).square().mean(across, /*keepdim=*/true);  // biased: what the batch is divided by
    if (running_mean.defined()) {
      NoGradGuard no_grad;
      const double n = static_cast<double>(x.numel() / channels);
      Tensor batch_mean = mean.detach().reshape({channels}).to(running_mean.dtype());
      Tensor unbiased_var = (var.detach() * (n / (n - 1))).reshape({channels}).to(running_var.dtype());
      Tensor running_mean_ = running_mean, running_var_ = running_var;  // handles: updated in place
      running_mean_.mul_(1 - momentum).add_(batch_mean, momentum);
      running_var_.mul_(1 - momentum).add_(unbiased_var, momentum);
    }
  } else {
    mean = running_mean.to(x.dtype()).reshape(per_channel);
    var = running_var.to(x.dtype()).reshape(per_channel);
  }
  Tensor y = (x - mean) * (var + eps).rsqrt();
  if (weight.defined()) y = y * weight.reshape(per_channel);
  if (bias.defined()) y = y + bias.reshape(per_channel);
  return y;
}

}  // namespace functional

BatchNorm1d::BatchNorm1d(int64_t num_features_, double eps_, std::optional<double> momentum_, bool affine_,
                         bool track_running_stats_)
    : num_features(num_features_), eps(eps_), momentum(momentum_), affine(affine_),
      track_running_stats(track_running_stats_) {
  CPPGRAD_CHECK(num_features > 0, "BatchNorm1d: num_features {} must be positive", num_features);
  CPPGRAD_CHECK(eps >= 0.0, "BatchNorm1d: eps {} must not be negative", eps);
  CPPGRAD_CHECK(!momentum || (*momentum >= 0.0 && *momentum <= 1.0), "BatchNorm1d: momentum {} must be in [0, 1]",
                momentum.value_or(0.0));
  if (affine) {
    weight = register_parameter("weight", ones({num_features}));
    bias = register_parameter("bias", zeros({num_features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}));
    running_var = register_buffer("running_var", ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
}

void BatchNorm1d::reset_running_stats() {
  if (!track_running_stats) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNorm1d::reset_parameters() {
  reset_running_stats();
  if (!affine) return;
  NoGradGuard no_grad;
  weight.fill_(1.0);
  bias.zero_();
}

Tensor BatchNorm1d::forward(const Tensor& x) {
  CPPGRAD_CHECK(x.dim() == 2 || x.dim() == 3, "BatchNorm1d: expected 2D or 3D input, (N, C) or (N, C, L), got {}",
                shape_str(x.shape()));
  CPPGRAD_CHECK(x.size(1) == num_features, "BatchNorm1d({}): input {} has {} channels (dim 1), not {}", num_features,
                shape_str(x.shape()), x.size(1), num_features);
  // Evaluation without running statistics normalises by the batch's, as in training.
  const bool batch_statistics = is_training() || !track_running_stats;
  check_batch_norm("BatchNorm1d", x, running_mean, running_var, weight, bias, batch_statistics, eps);
  double factor = momentum.value_or(0.0);
  if (is_training() && track_running_stats) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
    if (!momentum) factor = 1.0 / num_batches_tracked.item();  // the cumulative average
  }
  return functional::batch_norm(x, running_mean, running_var, weight, bias, batch_statistics, factor, eps);
}

std::string BatchNorm1d::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features, eps,
                     momentum ? fmt::format("{}", *momentum) : "None", affine, track_running_stats);
}

}  // namespace cppgrad::nn
