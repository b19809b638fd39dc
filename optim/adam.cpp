#include "optim/adam.h"

#include <algorithm>
#include <cmath>

#include "runtime/profile.h"
#include "tensor/iterate.h"
#include "runtime/simd_clones.h"

namespace cppgrad::optim {

namespace {

template <class T>
struct AdamConstants {
  T b1, one_minus_b1, b2, one_minus_b2, wd, decay, sqrt_bias2, eps, step_size;
};

// One element at a time, the same arithmetic as the formulas above; the branches are hoisted out
// of the loop and the pointers do not alias, so the compiler vectorises it, once per vector unit.
template <class T, bool Decoupled, bool Amsgrad>
CPPGRAD_SIMD_CLONES void adam_range(const AdamConstants<T>& c, int64_t begin, int64_t end, T* __restrict p, const T* __restrict dp,
                T* __restrict m, T* __restrict v, T* __restrict v_max) {
  for (int64_t i = begin; i < end; ++i) {
    T g = dp[i];
    if constexpr (Decoupled)
      p[i] *= c.decay;
    else
      g += c.wd * p[i];
    m[i] = c.b1 * m[i] + c.one_minus_b1 * g;
    v[i] = c.b2 * v[i] + c.one_minus_b2 * g * g;
    T second = v[i];
    if constexpr (Amsgrad) second = v_max[i] = std::max(v_max[i], v[i]);
    T denom = std::sqrt(second) / c.sqrt_bias2 + c.eps;
    p[i] -= c.step_size * m[i] / denom;
  }
}

// The options every group starts from (and the only ones an Adam group may set).
ParamGroup adam_defaults(const AdamOptions& o) {
  return {.lr = o.lr(), .weight_decay = o.weight_decay(), .beta1 = o.beta1(), .beta2 = o.beta2(), .eps = o.eps(),
          .amsgrad = o.amsgrad()};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o) : Adam({ParamGroup{.params = std::move(params)}}, o, false) {}
Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& o) : Adam(std::move(groups), o, false) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(groups), adam_defaults(o), decoupled ? "AdamW" : "Adam"), options(o), decoupled_(decoupled) {}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& o) : Adam({ParamGroup{.params = std::move(params)}}, o, true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, const AdamOptions& o) : Adam(std::move(groups), o, true) {}

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
  dispatch_floating(param.dtype(), "Adam", [&](auto tag) {
    using T = decltype(tag);
    const AdamConstants<T> c{static_cast<T>(b1),          static_cast<T>(1.0 - b1), static_cast<T>(b2),
                             static_cast<T>(1.0 - b2),    static_cast<T>(wd),       static_cast<T>(1.0 - lr * wd),
                             static_cast<T>(sqrt_bias2),  static_cast<T>(eps), static_cast<T>(step_size)};
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = state["exp_avg"].data<T>();
    T* v = state["exp_avg_sq"].data<T>();
    T* v_max = *group.amsgrad ? state["max_exp_avg_sq"].data<T>() : nullptr;
    const bool decoupled = decoupled_;
    pending_.push_back({{param, grad, state["exp_avg"], state["exp_avg_sq"]},
                        param.numel(),
                        [=](int64_t begin, int64_t end) {
                          if (decoupled)
                            v_max ? adam_range<T, true, true>(c, begin, end, p, g, m, v, v_max)
                                  : adam_range<T, true, false>(c, begin, end, p, g, m, v, v_max);
                          else
                            v_max ? adam_range<T, false, true>(c, begin, end, p, g, m, v, v_max)
                                  : adam_range<T, false, false>(c, begin, end, p, g, m, v, v_max);
                        }});
    if (v_max) pending_.back().tensors.push_back(state["max_exp_avg_sq"]);
  });
}

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
}

// Every queued update, cut into chunks that one parallel loop shares out: a model's parameters
// are mostly too small to be worth a parallel loop each (seq2seq's largest has 65,536
// elements), but together they are. Each element's update is independent of the others, so the
// result is the same at any thread count.
void Adam::finish_step() {
  CPPGRAD_PROFILE_SCOPE("adam update");
  constexpr int64_t chunk = 16384;
  struct Chunk {
    size_t update;
    int64_t begin, end;
  };
  std::vector<Chunk> chunks;
  for (size_t u = 0; u < pending_.size(); ++u)
    for (int64_t begin = 0; begin < pending_[u].size; begin += chunk)
      chunks.push_back({u, begin, std::min(pending_[u].size, begin + chunk)});
  parallel_for(static_cast<int64_t>(chunks.size()), chunk, [&](int64_t i) {
    const Chunk& c = chunks[static_cast<size_t>(i)];
    pending_[c.update].run(c.begin, c.end);
  });
  pending_.clear();
}

}  // namespace cppgrad::optim
