#include "autograd/fast/accumulate.h"

#include "tensor/kernels.h"

namespace cppgrad::autograd::fast {

namespace {
bool owned(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1 && t.is_contiguous() && !t.requires_grad();
}
}  // namespace

bool add_in_place(Tensor& slot, const Tensor& g) {
  if (!owned(slot) || slot.shape() != g.shape() || slot.dtype() != g.dtype()) return false;
  kernels::binary_(kernels::Binary::Add, slot, g);
  return true;
}

void add_slice(Tensor& slot, const Tensor& piece, const Shape& shape, const SliceOf& at) {
  const bool fresh = !slot.defined();
  if (fresh)
    slot = zeros(shape, piece.dtype());
  else if (!owned(slot) || slot.shape() != shape || slot.dtype() != piece.dtype())
    slot = kernels::to(slot, piece.dtype()).contiguous().clone();
  const int64_t length = piece.shape()[static_cast<size_t>(at.dim)];
  Tensor positions = kernels::slice(slot, at.dim, at.start, at.start + length * at.step, at.step);
  if (fresh)
    kernels::copy_(positions, piece);
  else
    kernels::binary_(kernels::Binary::Add, positions, piece);
}

}  // namespace cppgrad::autograd::fast
