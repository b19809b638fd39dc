#include "optim/adam.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/iterate.h"

namespace cppgrad::optim {

namespace {

// The options every group starts from (and the only ones an Adam group may set).
ParamGroup adam_defaults(const AdamOptions& o) {
  return {.lr = o.lr(), .weight_decay = o.weight_decay(), .beta1 = o.beta1(), .beta2 = o.beta2(), .eps = o.eps(),
          .amsgrad = o.amsgrad()};
}

AdamOptions adam_options(const AdamWOptions& o) {
  return AdamOptions(o.lr()).beta1(o.beta1()).beta2(o.beta2()).eps(o.eps()).weight_decay(o.weight_decay()).amsgrad(
      o.amsgrad());
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o) : Adam({ParamGroup{.params = std::move(params)}}, o, false) {}
Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& o) : Adam(std::move(groups), o, false) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(groups), adam_defaults(o), decoupled ? "AdamW" : "Adam"), options(o), decoupled_(decoupled) {}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& o)
    : Adam({ParamGroup{.params = std::move(params)}}, adam_options(o), true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& o) : Adam(std::move(groups), adam_options(o), true) {}

// ---- the update ---------------------------------------------------------------------------------
void Adam::update(const Tensor& param, const Tensor& grad, const ParamGroup& group,
                  std::map<std::string, Tensor>& state) {
  if (!state.count("step")) {
    state["step"] = zeros({}, kInt64);
    state["exp_avg"] = zeros_like(param);
    state["exp_avg_sq"] = zeros_like(param);
  }
  // Also when a group turns AMSGrad on after some steps: max(0, v) = v starts the running maximum.
  if (*group.amsgrad && !state.count("max_exp_avg_sq")) state["max_exp_avg_sq"] = zeros_like(param);
  const int64_t t = ++state["step"].data<int64_t>()[0];
  const double b1 = *group.beta1, b2 = *group.beta2, lr = *group.lr, wd = *group.weight_decay, eps = *group.eps;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double sqrt_bias2 = std::sqrt(1.0 - std::pow(b2, static_cast<double>(t)));
  const double step_size = lr / bias1;
  const Tensor& m_buf = state["exp_avg"];
  const Tensor& v_buf = state["exp_avg_sq"];
  const Tensor v_max_buf = *group.amsgrad ? state["max_exp_avg_sq"] : Tensor();
  // Outside reference mode the update is queued, and run with the others by finish_step.
  if (queue_.queued({b1, b2, lr, wd, eps, sqrt_bias2, step_size, decoupled_}, param, grad, m_buf, v_buf, v_max_buf))
    return;
  dispatch_floating(param.dtype(), "Adam", [&](auto tag) {
    using T = decltype(tag);
    T* p = param.data<T>();
    const T* dp = grad.data<T>();
    T *m = m_buf.data<T>(), *v = v_buf.data<T>();
    T* v_max = v_max_buf.defined() ? v_max_buf.data<T>() : nullptr;
    for (int64_t i = 0; i < param.numel(); ++i) {
      T g = dp[i];
      if (decoupled_)
        p[i] *= static_cast<T>(1.0 - lr * wd);  // AdamW: p = p·(1 - lr·λ)
      else
        g += static_cast<T>(wd) * p[i];  // g = ∇p + λ·p
      m[i] = static_cast<T>(b1) * m[i] + static_cast<T>(1.0 - b1) * g;      // m = β1·m + (1-β1)·g
      v[i] = static_cast<T>(b2) * v[i] + static_cast<T>(1.0 - b2) * g * g;  // v = β2·v + (1-β2)·g²
      const T v_hat = v_max ? (v_max[i] = std::max(v_max[i], v[i])) : v[i];
      // p = p - lr/(1-β1ᵗ) · m / (√v̂ / √(1-β2ᵗ) + ε)
      p[i] -= static_cast<T>(step_size) * m[i] / (std::sqrt(v_hat) / static_cast<T>(sqrt_bias2) + static_cast<T>(eps));
    }
  });
}

// ---- checking a loaded state: the moments a run could have left -----------------------------

void Adam::check_state(size_t index, const Tensor& param, const ParamGroup& group,
                       const std::map<std::string, Tensor>& state) const {
  if (state.empty()) return;  // not stepped yet
  std::vector<std::string> names = {"step", "exp_avg", "exp_avg_sq"};
  const bool amsgrad = group.amsgrad.value_or(false);
  if (amsgrad) names.push_back("max_exp_avg_sq");
  check_names(index, state, names);
  const Tensor& step = state.at("step");
  CPPGRAD_CHECK(step.dim() == 0 && step.dtype() == kInt64, "Optimizer::load_state_dict: state.{}.step must be a 0-d "
                "int64 tensor, got {} of shape {}", index, dtype_name(step.dtype()), shape_str(step.shape()));
  // At least 1 (the first update makes it 1); at most 2^53, where it still converts to a double
  // exactly for the bias corrections.
  const auto t = step.item<int64_t>();
  CPPGRAD_CHECK(t >= 1 && t <= (int64_t{1} << 53), "Optimizer::load_state_dict: state.{}.step is {}, not in [1, 2^53]",
                index, t);
  check_buffer(index, "exp_avg", state.at("exp_avg"), param);
  check_buffer(index, "exp_avg_sq", state.at("exp_avg_sq"), param, /*non_negative=*/true);
  if (amsgrad) check_buffer(index, "max_exp_avg_sq", state.at("max_exp_avg_sq"), param, true);
  check_moments(index, state, *group.beta1, *group.beta2, t);
}

void Adam::check_moments(size_t index, const std::map<std::string, Tensor>& state, double b1, double b2, int64_t t) {
  // The moments as t gradients g₁..g_t could have left them, from zeros:
  //   m = (1-β1) Σ_k β1^k g_{t-k},   v = (1-β2) Σ_k β2^k g_{t-k}²   (k = 0 .. t-1)
  // By Cauchy–Schwarz, m² ≤ (1-β1)² Σ_k (β1²/β2)^k · Σ_k β2^k g² = (1-β1)²/(1-β2) · S · v, with
  // S = Σ_k (β1²/β2)^k < 1/(1 - β1²/β2) (check_group keeps β1² < β2). A larger exp_avg beside its
  // exp_avg_sq (3e38 beside 1e-8) comes from no run: one step would move the weight by about
  // lr·|m|/√v. Allowed on top: a factor 2 for rounding, and √(smallest normal) for gradients
  // whose squares underflowed to 0 in v but not in m.
  const double ratio = b1 == 0.0 ? 0.0 : b1 * b1 / b2;
  const double sum = ratio == 0.0 ? 1.0 : (1.0 - std::pow(ratio, static_cast<double>(t))) / (1.0 - ratio);
  const double factor = 2.0 * (1.0 - b1) * (1.0 - b1) / (1.0 - b2) * sum;
  const Tensor& m_buf = state.at("exp_avg");
  const std::vector<double> m = m_buf.to_vector<double>(), v = state.at("exp_avg_sq").to_vector<double>();
  const double underflow = std::sqrt(m_buf.dtype() == kFloat32 ? double{std::numeric_limits<float>::min()}
                                                               : std::numeric_limits<double>::min());
  for (size_t i = 0; i < m.size(); ++i)
    CPPGRAD_CHECK(std::abs(m[i]) <= std::sqrt(factor * v[i]) + underflow,
                  "Optimizer::load_state_dict: state.{}.exp_avg holds {} (element {}) beside an exp_avg_sq of {}: no "
                  "sequence of gradients leaves |exp_avg| above {:.3g}·√exp_avg_sq with betas ({}, {})",
                  index, m[i], i, v[i], std::sqrt(factor / 2.0), b1, b2);
  if (state.count("max_exp_avg_sq")) {  // the running maximum of v: never below it
    const std::vector<double> v_max = state.at("max_exp_avg_sq").to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i)
      CPPGRAD_CHECK(v_max[i] >= v[i], "Optimizer::load_state_dict: state.{}.max_exp_avg_sq holds {} (element {}), below "
                    "its exp_avg_sq {}: it is their running maximum", index, v_max[i], i, v[i]);
  }
}

void Adam::finish_step() { queue_.run(); }

}  // namespace cppgrad::optim
