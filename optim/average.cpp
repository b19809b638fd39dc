#include "optim/average.h"

#include <map>
#include <string>

#include "autograd/node.h"
#include "tensor/state_dict.h"

namespace cppgrad::optim {

ExponentialMovingAverage::ExponentialMovingAverage(std::vector<Tensor> params, double decay)
    : params_(std::move(params)), decay_(decay) {
  CPPGRAD_CHECK(decay >= 0.0 && decay < 1.0, "ExponentialMovingAverage: decay must be in [0, 1), got {}", decay);
  for (const Tensor& p : params_) {
    CPPGRAD_CHECK(p.defined() && p.is_floating_point(),
                  "ExponentialMovingAverage: parameters must be defined floating tensors");
    averages_.push_back(p.detach().clone());
  }
}

void ExponentialMovingAverage::update() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) averages_[i].mul_(decay_).add_(params_[i].detach(), 1.0 - decay_);
}

void ExponentialMovingAverage::swap() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor trained = params_[i].detach().clone();
    params_[i].copy_(averages_[i]);
    averages_[i].copy_(trained);
  }
}

nn::NamedTensors ExponentialMovingAverage::state_dict() const {
  nn::NamedTensors out;
  for (size_t i = 0; i < averages_.size(); ++i) out.emplace_back(std::to_string(i), averages_[i]);
  return out;
}

void ExponentialMovingAverage::load_state_dict(const nn::NamedTensors& state) {
  std::map<std::string, Tensor> by_name(state.begin(), state.end());
  NoGradGuard no_grad;
  for (size_t i = 0; i < averages_.size(); ++i) {
    const std::string name = std::to_string(i);
    auto it = by_name.find(name);
    CPPGRAD_CHECK(it != by_name.end(), "ExponentialMovingAverage::load_state_dict: '{}' is missing", name);
    CPPGRAD_CHECK(it->second.shape() == averages_[i].shape(),
                  "ExponentialMovingAverage::load_state_dict: '{}' is {}, the parameter {}", name,
                  shape_str(it->second.shape()), shape_str(averages_[i].shape()));
    CPPGRAD_CHECK(it->second.is_floating_point(), "ExponentialMovingAverage::load_state_dict: '{}' has dtype {}, not a "
                  "floating one", name, dtype_name(it->second.dtype()));
  }
  // Checked in full before any is copied: a rejected state leaves the averages as they were.
  // Only "0" .. "<n-1>": another name ("00", "0 ") is one no average wrote.
  for (const auto& [name, t] : state) {
    const bool written = !name.empty() && name.size() <= 19 && name.find_first_not_of("0123456789") == std::string::npos &&
                         name == std::to_string(std::stoull(name)) && std::stoull(name) < averages_.size();
    CPPGRAD_CHECK(written, "ExponentialMovingAverage::load_state_dict: unexpected entry '{}' (the averages of {} "
                  "parameters are '0', '1', ...)", excerpt(name), averages_.size());
  }
  // Finite, and in the averages' dtype too (a float64 file's 1e300 is inf in float32).
  for (size_t i = 0; i < averages_.size(); ++i) {
    const Tensor& given = by_name.at(std::to_string(i));
    const int64_t at = first_non_finite(given, averages_[i].dtype());
    if (at >= 0)
      throw Error(fmt::format("ExponentialMovingAverage::load_state_dict: '{}' holds {} (element {}), not a finite {} "
                              "number", i, given.to(kFloat64).contiguous().reshape({-1}).to_vector<double>()[static_cast<size_t>(at)],
                              at, dtype_name(averages_[i].dtype())));
  }
  for (size_t i = 0; i < averages_.size(); ++i) averages_[i].copy_(by_name.at(std::to_string(i)));
}

}  // namespace cppgrad::optim
