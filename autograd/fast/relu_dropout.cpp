#include "autograd/fast/relu_dropout.h"

#include "autograd/functions.h"
#include "tensor/kernels.h"
#include "tensor/kernels/fast/dropout.h"

namespace cppgrad::fast {

using autograd::GradMode;
using autograd::Grads;
using autograd::record;
using autograd::Saved;

Tensor relu_dropout(const Tensor& x, double p, uint64_t key) {
  // y = relu(x) ⊙ m, m = 0 or 1/(1-p);  dx = 0 where x <= 0, else dy ⊙ m (m made again from the key;
  // a NaN x passes dy ⊙ m, as relu's row)
  return record("relu_dropout", kernels::fast::relu_dropout(x, p, key), {x}, {x},
                [p, key](const Tensor& g, const Saved& s) -> Grads {
                  const Tensor& X = s[0];
                  if (!GradMode::is_enabled()) return {kernels::fast::relu_dropout_backward(g, X, p, key)};
                  // create_graph: as dropout's and relu's backward ops would compute it
                  Tensor off = kernels::compare(kernels::Compare::Le, X, zeros({}, X.dtype()));
                  return {(g * kernels::dropout_mask(X.shape(), X.dtype(), p, key)).masked_fill(off, 0.0)};
                });
}

}  // namespace cppgrad::fast
