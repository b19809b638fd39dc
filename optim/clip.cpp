#include "optim/clip.h"

#include <cmath>
#include <unordered_map>
#include <utility>

#include "autograd/node.h"
#include "tensor/kernels.h"

namespace cppgrad::optim {

namespace {

void check_defined(const std::vector<Tensor>& params, const char* op) {
  for (size_t i = 0; i < params.size(); ++i)
    CPPGRAD_CHECK(params[i].defined(), "{}: parameter {} of {} is an undefined tensor", op, i, params.size());
}

// Applies `change` to every parameter's gradient in place, as PyTorch's clipping does, so that a
// handle to the gradient taken before sees the clipped values. A gradient several parameters share
// (one tensor given to each by set_grad) is changed once. One whose memory is also another
// tensor's (a view, an expanded tensor) gets a copy of its own first: writing through it would
// change that tensor too, or one element many times.
template <class Change>
void change_grads_in_place(const std::vector<Tensor>& params, Change change) {
  // A gradient's TensorImpl -> {that gradient, kept alive so the address is not reused; what was changed for it}
  std::unordered_map<const TensorImpl*, std::pair<Tensor, Tensor>> changed;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    if (auto seen = changed.find(g.impl_ptr().get()); seen != changed.end()) {
      if (!seen->second.second.is_same(g)) p.set_grad(seen->second.second);
      continue;
    }
    Tensor target = g;
    if (g.storage().use_count() > 1 || !g.is_contiguous()) {
      target = g.is_contiguous() ? g.clone() : kernels::contiguous(g);  // a copy of its own
      p.set_grad(target);
    }
    change(target);
    changed.emplace(g.impl_ptr().get(), std::pair{g, target});
  }
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  CPPGRAD_CHECK(max_norm > 0.0, "clip_grad_norm_: max_norm must be positive, got {}", max_norm);
  check_defined(params, "clip_grad_norm_");
  NoGradGuard no_grad;
  double total_sq = 0.0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor g64 = kernels::to(g, kFloat64);
    total_sq += kernels::sum(kernels::binary(kernels::Binary::Mul, g64, g64), {}, false).item<double>();
  }
  const double total = std::sqrt(total_sq);
  const double coef = max_norm / (total + 1e-6);  // PyTorch's epsilon
  // A NaN norm scales by NaN, as PyTorch's min(coef, 1) does: the gradients say so, not only the
  // returned norm. (An infinite one scales by 0: the infinite elements become NaN, the rest 0.)
  if (!(coef >= 1.0))
    change_grads_in_place(params, [coef](const Tensor& g) {
      kernels::binary_(kernels::Binary::Mul, g, kernels::scalar_operand(coef, g.dtype()));
    });
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  CPPGRAD_CHECK(clip_value >= 0.0, "clip_grad_value_: clip_value must be non-negative, got {}", clip_value);
  check_defined(params, "clip_grad_value_");
  NoGradGuard no_grad;
  change_grads_in_place(params, [clip_value](const Tensor& g) {
    kernels::binary_(kernels::Binary::Minimum, g, kernels::scalar_operand(clip_value, g.dtype()));
    kernels::binary_(kernels::Binary::Maximum, g, kernels::scalar_operand(-clip_value, g.dtype()));
  });
}

}  // namespace cppgrad::optim
