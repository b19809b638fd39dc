// Differentiable views. Each forward is a kernel from tensor/kernels/views.cpp that shares
// storage; each backward maps the output's gradient back to the input's shape.
#include <algorithm>
#include <numeric>

#include "autograd/functions.h"
#include "autograd/side_tables.h"
#include "autograd/trace.h"
#include "tensor/kernels.h"

namespace cppgrad {

using autograd::Grads;
using autograd::record;
using autograd::Saved;
using autograd::TracedOp;

Tensor Tensor::view(const Shape& shape) const {
  Shape in = this->shape();
  // dA = reshape(dC, shape(A))
  return record("view", kernels::view(*this, shape), {*this}, {},
                [in](const Tensor& g, const Saved&) -> Grads { return {g.reshape(in)}; });
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape in = this->shape();
  // dA = reshape(dC, shape(A))
  return record("reshape", kernels::reshape(*this, shape), {*this}, {},
                [in](const Tensor& g, const Saved&) -> Grads { return {g.reshape(in)}; });
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  autograd::TraceScope trace;
  // dA = transpose(dC) with the same two dims
  Tensor out = record("transpose", kernels::transpose(*this, dim0, dim1), {*this}, {},
                      [dim0, dim1](const Tensor& g, const Saved&) -> Grads { return {g.transpose(dim0, dim1)}; });
  return trace.note(out, [&] { return TracedOp{"transpose", {*this}, {{"dims", std::vector<int64_t>{dim0, dim1}}}}; });
}

Tensor Tensor::t() const {
  CPPGRAD_CHECK(dim() <= 2, "t: expects a tensor of at most 2 dims, got shape {}; use transpose or mT",
        shape_str(shape()));
  return dim() < 2 ? transpose(0, 0) : transpose(0, 1);
}

Tensor Tensor::mT() const {
  CPPGRAD_CHECK(dim() >= 2, "mT: expects a tensor of at least 2 dims, got shape {}", shape_str(shape()));
  return transpose(-2, -1);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  autograd::TraceScope trace;
  Tensor out = kernels::permute(*this, dims);
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], dim(), "permute")] = static_cast<int64_t>(i);
  // dA = permute(dC, inverse permutation)
  out = record("permute", out, {*this}, {}, [inverse](const Tensor& g, const Saved&) -> Grads { return {g.permute(inverse)}; });
  return trace.note(out, [&] { return TracedOp{"permute", {*this}, {{"dims", dims}}}; });
}

namespace {
// For the views that only insert or remove size-1 dims, the gradient is a reshape back.
Tensor reshape_view(std::string_view op, const Tensor& self, Tensor out) {
  Shape in = self.shape();
  return record(std::string(op), out, {self}, {}, [in](const Tensor& g, const Saved&) -> Grads { return {g.reshape(in)}; });
}
}  // namespace

Tensor Tensor::squeeze() const { return reshape_view("squeeze", *this, kernels::squeeze(*this)); }
Tensor Tensor::squeeze(int64_t d) const { return reshape_view("squeeze", *this, kernels::squeeze(*this, d)); }
Tensor Tensor::unsqueeze(int64_t d) const { return reshape_view("unsqueeze", *this, kernels::unsqueeze(*this, d)); }

// ---- more views: flatten, slices, expand, copies ----------------------------------------------

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  CPPGRAD_CHECK(start_dim <= end_dim, "flatten: start_dim {} comes after end_dim {}", start_dim, end_dim);
  Shape shape(this->shape().begin(), this->shape().begin() + start_dim);
  int64_t merged = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) merged *= this->shape()[d];
  shape.push_back(merged);
  shape.insert(shape.end(), this->shape().begin() + end_dim + 1, this->shape().end());
  return reshape(shape);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  autograd::TraceScope trace;
  Tensor out = kernels::slice(*this, d, start, end, step);
  Shape in = shape();
  d = wrap_dim(d, dim(), "slice");
  // The view starts at element `first` of dim d (after the same clamping the kernel does).
  const int64_t first = std::clamp<int64_t>(start < 0 ? start + in[d] : start, 0, in[d]);
  // dA = zeros(shape(A)) with dC written back at the sliced positions
  out = record("slice", out, {*this}, {}, [in, d, first, step](const Tensor& g, const Saved&) -> Grads {
    return {slice_scatter(g, in, d, first, step)};
  });
  if (out.grad_fn()) autograd::note_slice(*out.grad_fn(), {d, first, step});
  return trace.note(out, [&] { return TracedOp{"slice", {*this}, {{"dim", d}, {"start", first}, {"step", step}}}; });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  CPPGRAD_CHECK(dim() > 0, "narrow: cannot narrow a 0-d tensor");
  int64_t size = shape()[wrap_dim(d, dim(), "narrow")];
  const int64_t first = start < 0 ? start + size : start;
  // length is compared with the room left, not added to start: start + length may overflow.
  CPPGRAD_CHECK(first >= 0 && first <= size && length >= 0 && length <= size - first,
        "narrow: start {} and length {} do not fit in dim {} of size {} (shape {})", start, length, d, size,
        shape_str(shape()));
  return slice(d, first, first + length, 1);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  autograd::TraceScope trace;
  Tensor out = kernels::select(*this, d, index);
  Shape in = shape();
  d = wrap_dim(d, dim(), "select");
  if (index < 0) index += in[d];
  // dA = zeros(shape(A)) with dC written at `index` of dim d
  out = record("select", out, {*this}, {}, [in, d, index](const Tensor& g, const Saved&) -> Grads {
    return {slice_scatter(g.unsqueeze(d), in, d, index, 1)};
  });
  return trace.note(out, [&] { return TracedOp{"select", {*this}, {{"dim", d}, {"index", index}}}; });
}

Tensor Tensor::expand(const Shape& shape) const {
  Shape in = this->shape();
  // dA = dC summed over the broadcast dims
  return record("expand", kernels::expand(*this, shape), {*this}, {},
                [in](const Tensor& g, const Saved&) -> Grads { return {sum_to(g, in)}; });
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t d) const {
  CPPGRAD_CHECK(split_size > 0, "split: split_size must be positive, got {}", split_size);
  int64_t size = shape()[wrap_dim(d, dim(), "split")];
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < size; at += split_size) sizes.push_back(std::min(split_size, size - at));
  if (sizes.empty()) sizes.push_back(0);
  return split(sizes, d);
}

std::vector<Tensor> Tensor::split(const std::vector<int64_t>& sizes, int64_t d) const {
  d = wrap_dim(d, dim(), "split");
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  CPPGRAD_CHECK(total == shape()[d], "split: sizes {} add up to {}, but dim {} has size {}", shape_str(sizes), total, d,
        shape()[d]);
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (int64_t s : sizes) {
    parts.push_back(narrow(d, at, s));
    at += s;
  }
  return parts;
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const {
  CPPGRAD_CHECK(chunks > 0, "chunk: number of chunks must be positive, got {}", chunks);
  int64_t size = shape()[wrap_dim(d, dim(), "chunk")];
  return split(std::max<int64_t>((size + chunks - 1) / chunks, 1), d);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  // dA = dC
  return record("contiguous", kernels::contiguous(*this), {*this}, {},
                [](const Tensor& g, const Saved&) -> Grads { return {g}; });
}

Tensor Tensor::clone() const {
  // dA = dC
  return record("clone", kernels::clone(*this), {*this}, {},
                [](const Tensor& g, const Saved&) -> Grads { return {g}; });
}

Tensor Tensor::to(DType target) const {
  if (dtype() == target) return *this;
  DType source = dtype();
  // dA = dC converted back to A's dtype (a cast to an integer type has no gradient)
  return record("to", kernels::to(*this, target), {*this}, {}, [source](const Tensor& g, const Saved&) -> Grads {
    return {is_floating(g.dtype()) ? g.to(source) : Tensor()};
  });
}

Tensor slice_scatter(const Tensor& src, const Shape& shape, int64_t dim, int64_t start, int64_t step) {
  dim = wrap_dim(dim, static_cast<int64_t>(shape.size()), "slice_scatter");
  // dSrc = slice(dOut) at the same positions
  Tensor out = kernels::slice_scatter(src, shape, dim, start, step);  // first: it checks src's rank, read below
  return record("slice_scatter", out, {src}, {},
                [dim, start, step, len = src.shape()[dim]](const Tensor& g, const Saved&) -> Grads {
                  return {g.slice(dim, start, kernels::slice_end(start, len, step), step)};
                });
}

}  // namespace cppgrad
