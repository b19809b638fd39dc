// Differentiable joining and indexing: cat, stack, index_select, gather and their adjoints.
#include "autograd/functions.h"
#include "autograd/side_tables.h"
#include "autograd/trace.h"
#include "tensor/kernels.h"

namespace cppgrad {

using autograd::Grads;
using autograd::record;
using autograd::Saved;
using autograd::TracedOp;

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  autograd::TraceScope trace;
  Tensor out = kernels::cat(tensors, dim);
  dim = wrap_dim(dim, out.dim(), "cat");
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) sizes.push_back(t.shape()[dim]);
  // dA_i = the slice of dC that A_i filled
  out = record("cat", out, tensors, {}, [sizes, dim](const Tensor& g, const Saved& s) -> Grads {
    Grads grads;
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      grads.push_back(s.needs_grad(i) ? g.narrow(dim, at, sizes[i]) : Tensor());
      at += sizes[i];
    }
    return grads;
  });
  return trace.note(out, [&] { return TracedOp{"cat", tensors, {{"dim", dim}}}; });
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  CPPGRAD_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  dim = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    CPPGRAD_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: tensor {} has shape {}, tensor 0 has {}", i,
          shape_str(tensors[i].shape()), shape_str(tensors[0].shape()));
    parts.push_back(tensors[i].unsqueeze(dim));
  }
  return cat(parts, dim);
}

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const {
  Shape in = shape();
  dim = dim < 0 && this->dim() > 0 ? dim + this->dim() : dim;
  // dA = zeros(shape(A)) with row i of dC added at row index[i] (repeats accumulate). A 0-d
  // index keeps dim (with size 1) in the output, so dC lines up with the index either way.
  autograd::TraceScope trace;
  Tensor out = record("index_select", kernels::index_select(*this, dim, index), {*this}, {index},
                      [in, dim](const Tensor& g, const Saved& s) -> Grads {
                        if (autograd::GradMode::is_enabled())  // create_graph: differentiable again
                          return {cppgrad::index_add(zeros(in, g.dtype()), dim, s[0], g)};
                        Tensor grad = zeros(in, g.dtype());  // filled in place: no copy of a table of zeros
                        kernels::index_add_(grad, dim, s[0], g);
                        return {grad};
                      });
  if (out.grad_fn() && dim == 0 && index.dim() == 1) autograd::note_rows(*out.grad_fn(), {index.contiguous()});
  return trace.note(out, [&] { return TracedOp{"index_select", {*this, index}, {{"dim", dim}}}; });
}

Tensor index_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src) {
  // dBase = dC,  dSrc = index_select(dC, dim, index)
  return record("index_add", kernels::index_add(base, dim, index, src), {base, src}, {index},
                [dim](const Tensor& g, const Saved& s) -> Grads {
                  return {g, s.needs_grad(1) ? g.index_select(dim, s[0]) : Tensor()};
                });
}

Tensor Tensor::gather(int64_t dim, const Tensor& index) const {
  Shape in = shape();
  // dA = zeros(shape(A)) with dC added back where each element was gathered from
  autograd::TraceScope trace;
  Tensor out = record("gather", kernels::gather(*this, dim, index), {*this}, {index},
                      [in, dim](const Tensor& g, const Saved& s) -> Grads {
                        return {cppgrad::scatter_add(zeros(in, g.dtype()), dim, s[0], g)};
                      });
  return trace.note(out, [&] { return TracedOp{"gather", {*this, index}, {{"dim", dim}}}; });
}

Tensor scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src) {
  // dBase = dC,  dSrc = gather(dC, dim, index)
  return record("scatter_add", kernels::scatter_add(base, dim, index, src), {base, src}, {index},
                [dim](const Tensor& g, const Saved& s) -> Grads {
                  return {g, s.needs_grad(1) ? g.gather(dim, s[0]) : Tensor()};
                });
}

}  // namespace cppgrad
