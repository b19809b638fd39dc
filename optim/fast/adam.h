// The fast form of Adam's update (skip it on a first reading: the reference is the loop in
// optim/adam.cpp, which updates one parameter at a time as the formulas read). Here each
// parameter's update is queued, and finish_step runs the whole queue in one parallel loop, in
// chunks whose loop is vectorised once per vector unit (runtime/simd_clones.h).
#pragma once

#include <functional>
#include <vector>

#include "../../tensor/tensor.h"

namespace cppgrad::optim::fast {

// One step's numbers for one parameter (the bias corrections already folded in).
struct AdamStep {
  double beta1, beta2, lr, weight_decay, eps;
  double sqrt_bias2;  // √(1 - β2ᵗ)
  double step_size;   // lr / (1 - β1ᵗ)
  bool decoupled;     // AdamW
};

class AdamQueue {
 public:
  // Queues p's update from its gradient and its buffers m, v (and v_max with AMSGrad, else
  // undefined); the tensors are kept alive until run() has run it.
  void push(const AdamStep& step, const Tensor& p, const Tensor& grad, const Tensor& m, const Tensor& v,
            const Tensor& v_max);
  // Outside reference mode, push(...) and true; in reference mode false, and the caller runs the
  // reference loop.
  bool queued(const AdamStep& step, const Tensor& p, const Tensor& grad, const Tensor& m, const Tensor& v,
              const Tensor& v_max);
  // Every queued update, cut into chunks that one parallel loop shares out.
  void run();

 private:
  struct PendingUpdate {
    std::vector<Tensor> tensors;
    int64_t size = 0;
    std::function<void(int64_t begin, int64_t end)> run;
  };
  std::vector<PendingUpdate> pending_;
};

}  // namespace cppgrad::optim::fast
