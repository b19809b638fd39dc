#include "autograd/fast/log_softmax_nll.h"

#include "autograd/fast/fused.h"
#include "tensor/kernels/fast/log_softmax_nll.h"

namespace cppgrad::fast {

using autograd::Grads;
using autograd::Saved;

Tensor log_softmax_nll(const Tensor& logits, const Tensor& target) {
  kernels::fast::LogSoftmaxNll r = kernels::fast::log_softmax_nll(logits, target);
  if (!r.nll.defined()) return {};
  auto reference = [target](const std::vector<Tensor>& in) {
    return -in[0].log_softmax(1).gather(1, target.unsqueeze(1)).squeeze(1);
  };
  // dlogits = G − exp(y) ⊙ Σ_row G, G = −g at each row's target (log_softmax's backward of gather's)
  return record_fused("log_softmax_nll", r.nll, {logits}, {logits, target, r.shift},
                      [](const Tensor& g, const Saved& s) -> Grads {
                        return {kernels::fast::log_softmax_nll_backward(g, s[0], s[1], s[2])};
                      },
                      std::move(reference));
}

}  // namespace cppgrad::fast
