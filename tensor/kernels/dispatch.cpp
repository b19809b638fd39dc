// Where each kernel of tensor/kernels.h is dispatched: its profile span opens here, once per op
// (a trace's span names the op and its operands' shapes and dtypes: traced.h), and the body runs
// (impl.h), or for the elementwise rows outside reference mode their fast form. A first reading
// skips this file: the bodies are the kernels.
#include "runtime/reference_mode.h"
#include "tensor/kernels.h"
#include "tensor/kernels/impl.h"
#include "tensor/kernels/traced.h"

namespace cppgrad::kernels {

void copy_(const Tensor& dst, const Tensor& src) {
  CPPGRAD_PROFILE_KERNEL("copy", dst, src);
  impl::copy_(dst, src);
}
void fill_(const Tensor& t, double value) {
  CPPGRAD_PROFILE_SCOPE("fill");
  impl::fill_(t, value);
}

// ---- elementwise: the reference rows, or in fast mode the vectorised ones ----------------------
Tensor unary(Unary op, const Tensor& t) {
  CPPGRAD_PROFILE_KERNEL(unary_name(op), t);
  return reference_mode() ? impl::unary(op, t) : fast::unary(op, t);
}
Tensor binary(Binary op, const Tensor& a, const Tensor& b) {
  CPPGRAD_PROFILE_KERNEL(binary_name(op), a, b);
  return reference_mode() ? impl::binary(op, a, b) : fast::binary(op, a, b);
}
void binary_(Binary op, const Tensor& a, const Tensor& b) {
  CPPGRAD_PROFILE_KERNEL(binary_name(op), a, b);
  reference_mode() ? impl::binary_(op, a, b) : fast::binary_(op, a, b);
}
Tensor pow(const Tensor& t, double exponent) {
  CPPGRAD_PROFILE_SCOPE("pow");
  return impl::pow(t, exponent);
}
Tensor compare(Compare op, const Tensor& a, const Tensor& b) {
  CPPGRAD_PROFILE_SCOPE("compare");
  return impl::compare(op, a, b);
}
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  CPPGRAD_PROFILE_SCOPE("where");
  return impl::where(condition, a, b);
}
void masked_fill_(const Tensor& t, const Tensor& mask, double value) {
  CPPGRAD_PROFILE_SCOPE("masked_fill");
  impl::masked_fill_(t, mask, value);
}
Tensor masked_fill(const Tensor& t, const Tensor& mask, double value) {
  CPPGRAD_PROFILE_SCOPE("masked_fill");
  return impl::masked_fill(t, mask, value);
}

// ---- reductions -----------------------------------------------------------------------------------
Tensor reduce(Reduction op, const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  CPPGRAD_PROFILE_SCOPE(reduction_name(op));
  if (!reference_mode())
    if (Tensor out = fast::reduce_leading_dims(op, t, dims, keepdim); out.defined()) return out;
  return impl::reduce(op, t, dims, keepdim);
}
ValuesIndices extremum(Extremum which, const Tensor& t, int64_t dim, bool keepdim) {
  CPPGRAD_PROFILE_SCOPE("max/min");
  return impl::extremum(which, t, dim, keepdim);
}

// ---- ordering and sampling ----------------------------------------------------------------------
ValuesIndices sort(const Tensor& t, int64_t dim, bool descending) {
  CPPGRAD_PROFILE_SCOPE("sort");
  return impl::sort(t, dim, descending);
}
ValuesIndices topk(const Tensor& t, int64_t k, int64_t dim, bool largest) {
  CPPGRAD_PROFILE_SCOPE("topk");
  return impl::topk(t, k, dim, largest);
}
Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement, Generator& gen) {
  CPPGRAD_PROFILE_SCOPE("multinomial");
  return impl::multinomial(weights, num_samples, replacement, gen);
}

// ---- softmax and layer norm ---------------------------------------------------------------------
Tensor softmax(const Tensor& t, int64_t dim) {
  CPPGRAD_PROFILE_KERNEL("softmax", t);
  return impl::softmax(t, dim);
}
Tensor log_softmax(const Tensor& t, int64_t dim) {
  CPPGRAD_PROFILE_KERNEL("log_softmax", t);
  return impl::log_softmax(t, dim);
}
Tensor masked_softmax(const Tensor& scores, const Tensor& mask, bool causal, double scale) {
  CPPGRAD_PROFILE_SCOPE("masked_softmax");
  return impl::masked_softmax(scores, mask, causal, scale);
}
Tensor softmax_backward(const Tensor& output, const Tensor& grad, int64_t dim) {
  CPPGRAD_PROFILE_SCOPE("softmax_backward");
  return impl::softmax_backward(output, grad, dim);
}
Tensor log_softmax_backward(const Tensor& output, const Tensor& grad, int64_t dim) {
  CPPGRAD_PROFILE_SCOPE("log_softmax_backward");
  return impl::log_softmax_backward(output, grad, dim);
}
LayerNormResult layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight, const Tensor& bias,
                           double eps) {
  CPPGRAD_PROFILE_KERNEL("layer_norm", x, weight, bias);
  return impl::layer_norm(x, normalized_dims, weight, bias, eps);
}
LayerNormGrads layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool need_input, bool need_weight, bool need_bias) {
  CPPGRAD_PROFILE_KERNEL("layer_norm_backward", grad, x, weight);
  return impl::layer_norm_backward(grad, x, mean, rstd, weight, need_input, need_weight, need_bias);
}

// ---- matmul ---------------------------------------------------------------------------------------
Tensor matmul(const Tensor& a, const Tensor& b) {
  CPPGRAD_PROFILE_KERNEL("matmul", a, b);
  return impl::matmul(a, b);
}
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  CPPGRAD_PROFILE_KERNEL("linear", x, w, b);
  return impl::linear(x, w, b);
}

// ---- joining and indexing -----------------------------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  CPPGRAD_PROFILE_SCOPE("cat");
  return impl::cat(tensors, dim);
}
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  CPPGRAD_PROFILE_SCOPE("index_select");
  return impl::index_select(t, dim, index);
}
Tensor index_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src) {
  CPPGRAD_PROFILE_SCOPE("index_add");
  return impl::index_add(base, dim, index, src);
}
void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  CPPGRAD_PROFILE_SCOPE("index_add");
  impl::index_add_(out, dim, index, src);
}
Tensor gather(const Tensor& t, int64_t dim, const Tensor& index) {
  CPPGRAD_PROFILE_SCOPE("gather");
  return impl::gather(t, dim, index);
}
Tensor scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src) {
  CPPGRAD_PROFILE_SCOPE("scatter_add");
  return impl::scatter_add(base, dim, index, src);
}
Tensor slice_scatter(const Tensor& src, const Shape& shape, int64_t dim, int64_t start, int64_t step) {
  CPPGRAD_PROFILE_SCOPE("slice_scatter");
  return impl::slice_scatter(src, shape, dim, start, step);
}

}  // namespace cppgrad::kernels
