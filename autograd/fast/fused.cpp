#include "autograd/fast/fused.h"

#include <utility>

namespace cppgrad::fast {

using autograd::GradMode;
using autograd::Grads;
using autograd::Saved;

Tensor record_fused(std::string op, Tensor out, const std::vector<Tensor>& inputs, const std::vector<Tensor>& saved,
                    autograd::BackwardFn backward, Reference reference) {
  // The node keeps the inputs (for the reference) ahead of what the kernel's backward reads.
  std::vector<Tensor> to_save = inputs;
  to_save.insert(to_save.end(), saved.begin(), saved.end());
  const size_t n = inputs.size(), m = saved.size();
  auto fused_backward = [n, m, backward = std::move(backward), reference = std::move(reference)](
                            const Tensor& g, const Saved& s) -> Grads {
    std::vector<bool> needs(n);
    for (size_t i = 0; i < n; ++i) needs[i] = s.needs_grad(i);
    if (!GradMode::is_enabled()) {
      std::vector<Tensor> own;
      for (size_t i = n; i < n + m; ++i) own.push_back(s[i]);
      return backward(g, Saved(std::move(own), std::move(needs)));
    }
    // create_graph: the gradient of the reference, recorded as it is computed. The inputs that
    // need a gradient enter through a view of their own, where the inner pass stops: the
    // inputs' own hooks and history are left to the outer pass.
    std::vector<Tensor> at(n), wrt;
    std::vector<size_t> which;
    for (size_t i = 0; i < n; ++i) {
      at[i] = s[i];
      if (!needs[i] || !at[i].defined()) continue;
      at[i] = at[i].view(at[i].shape());
      wrt.push_back(at[i]);
      which.push_back(i);
    }
    Grads grads(n);
    if (wrt.empty()) return grads;
    std::vector<Tensor> found = autograd::grad({reference(at)}, wrt, {g}, /*retain_graph=*/true,
                                               /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t k = 0; k < which.size(); ++k) grads[which[k]] = found[k];
    return grads;
  };
  return autograd::record(std::move(op), std::move(out), inputs, to_save, std::move(fused_backward));
}

}  // namespace cppgrad::fast
