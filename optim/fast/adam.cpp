#include "optim/fast/adam.h"

#include "runtime/reference_mode.h"

#include <algorithm>
#include <cmath>

#include "runtime/profile.h"
#include "runtime/simd_clones.h"
#include "tensor/iterate.h"

namespace cppgrad::optim::fast {

namespace {

template <class T>
struct AdamConstants {
  T b1, one_minus_b1, b2, one_minus_b2, wd, decay, sqrt_bias2, eps, step_size;
};

// One element at a time, the arithmetic of the reference loop (optim/adam.cpp) in the same
// order; the branches are hoisted out of the loop and the pointers do not alias, so the
// compiler vectorises it, once per vector unit.
template <class T, bool Decoupled, bool Amsgrad>
CPPGRAD_SIMD_CLONES void adam_range(const AdamConstants<T>& c, int64_t begin, int64_t end, T* __restrict p,
                                    const T* __restrict dp, T* __restrict m, T* __restrict v, T* __restrict v_max) {
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

}  // namespace

bool AdamQueue::queued(const AdamStep& step, const Tensor& p, const Tensor& grad, const Tensor& m, const Tensor& v,
                       const Tensor& v_max) {
  if (reference_mode()) return false;
  push(step, p, grad, m, v, v_max);
  return true;
}

void AdamQueue::push(const AdamStep& s, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                     const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq) {
  dispatch_floating(param.dtype(), "Adam", [&](auto tag) {
    using T = decltype(tag);
    const AdamConstants<T> c{static_cast<T>(s.beta1),      static_cast<T>(1.0 - s.beta1),
                             static_cast<T>(s.beta2),      static_cast<T>(1.0 - s.beta2),
                             static_cast<T>(s.weight_decay), static_cast<T>(1.0 - s.lr * s.weight_decay),
                             static_cast<T>(s.sqrt_bias2), static_cast<T>(s.eps),
                             static_cast<T>(s.step_size)};
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = exp_avg.data<T>();
    T* v = exp_avg_sq.data<T>();
    T* v_max = max_exp_avg_sq.defined() ? max_exp_avg_sq.data<T>() : nullptr;
    const bool decoupled = s.decoupled;
    pending_.push_back({{param, grad, exp_avg, exp_avg_sq},
                        param.numel(),
                        [=](int64_t begin, int64_t end) {
                          if (decoupled)
                            v_max ? adam_range<T, true, true>(c, begin, end, p, g, m, v, v_max)
                                  : adam_range<T, true, false>(c, begin, end, p, g, m, v, v_max);
                          else
                            v_max ? adam_range<T, false, true>(c, begin, end, p, g, m, v, v_max)
                                  : adam_range<T, false, false>(c, begin, end, p, g, m, v, v_max);
                        }});
    if (v_max) pending_.back().tensors.push_back(max_exp_avg_sq);
  });
}

// A model's parameters are mostly too small to be worth a parallel loop each (seq2seq's largest
// has 65,536 elements), but together they are. Each element's update is independent of the
// others, so the result is the same at any thread count.
void AdamQueue::run() {
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

}  // namespace cppgrad::optim::fast
