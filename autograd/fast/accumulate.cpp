#include "autograd/fast/accumulate.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

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
  Tensor positions = kernels::slice(slot, at.dim, at.start, kernels::slice_end(at.start, length, at.step), at.step);
  if (fresh)
    kernels::copy_(positions, piece);
  else
    kernels::binary_(kernels::Binary::Add, positions, piece);
}

void add_rows(Tensor& slot, const Tensor& rows, const Shape& shape, const RowsOf& at) {
  if (!slot.defined()) {
    slot = zeros(shape, rows.dtype());
    kernels::index_add_(slot, 0, at.index, rows);
    return;
  }
  if (!owned(slot) || slot.shape() != shape || slot.dtype() != rows.dtype())
    slot = kernels::to(slot, rows.dtype()).contiguous().clone();
  // Each distinct row once, in order of first appearance, and where each of index's entries goes.
  const int64_t n = at.index.numel();
  const int64_t* index = at.index.data<int64_t>();
  std::unordered_map<int64_t, int64_t> position;
  std::vector<int64_t> distinct, to_distinct(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    auto [it, inserted] = position.try_emplace(index[i], static_cast<int64_t>(distinct.size()));
    if (inserted) distinct.push_back(index[i]);
    to_distinct[static_cast<size_t>(i)] = it->second;
  }
  Shape summed_shape = shape;
  summed_shape[0] = static_cast<int64_t>(distinct.size());
  Tensor summed = zeros(summed_shape, rows.dtype());
  kernels::index_add_(summed, 0, tensor(to_distinct, {n}), rows);               // 0 + dC[i] + dC[j] + ... per row
  kernels::index_add_(slot, 0, tensor(distinct, {summed_shape[0]}), summed);  // slot's row + that sum
}

}  // namespace cppgrad::autograd::fast
