// Differentiable ordering: sort and topk (their values; the indices are integers), argsort, and
// multinomial's draws (no gradient: an index has none).
#include "autograd/functions.h"
#include "tensor/kernels.h"

namespace cppgrad {

using autograd::Grads;
using autograd::record;
using autograd::Saved;

namespace {
// Values picked along `dim` at `indices`, with the gradient sent back to where each was picked.
Tensor picked_values(const char* op, const Tensor& t, const ValuesIndices& picked, int64_t dim) {
  Shape in = t.shape();
  const int64_t d = t.dim() == 0 ? 0 : wrap_dim(dim, t.dim(), op);
  // dA = zeros(shape(A)) with dC[..., j, ...] added at index[..., j, ...] along dim
  return record(op, picked.values, {t}, {picked.indices}, [in, d](const Tensor& g, const Saved& s) -> Grads {
    if (in.empty()) return {g};
    return {scatter_add(zeros(in, g.dtype()), d, s[0], g)};
  });
}
}  // namespace

ValuesIndices sort(const Tensor& t, int64_t dim, bool descending, bool /*stable*/) {
  ValuesIndices sorted = kernels::sort(t, dim, descending);  // always stable: ties keep their order
  return {picked_values("sort", t, sorted, dim), sorted.indices};
}

Tensor argsort(const Tensor& t, int64_t dim, bool descending, bool /*stable*/) {
  return kernels::sort(t, dim, descending).indices;
}

// sorted=false allows any order of the k; they come sorted anyway, at no extra cost here.
ValuesIndices topk(const Tensor& t, int64_t k, int64_t dim, bool largest, bool /*sorted*/) {
  ValuesIndices top = kernels::topk(t, k, dim, largest);
  return {picked_values("topk", t, top, dim), top.indices};
}

Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement, Generator& gen) {
  return kernels::multinomial(weights, num_samples, replacement, gen);
}

ValuesIndices Tensor::sort(int64_t dim, bool descending, bool stable) const {
  return cppgrad::sort(*this, dim, descending, stable);
}
Tensor Tensor::argsort(int64_t dim, bool descending, bool stable) const {
  return cppgrad::argsort(*this, dim, descending, stable);
}
ValuesIndices Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return cppgrad::topk(*this, k, dim, largest, sorted);
}
Tensor Tensor::multinomial(int64_t num_samples, bool replacement, Generator& gen) const {
  return cppgrad::multinomial(*this, num_samples, replacement, gen);
}

}  // namespace cppgrad
