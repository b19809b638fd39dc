// The nn layers' ops. A fused op (layer_norm, masked_softmax, relu_dropout) is written here as
// its formula in differentiable ops, the reference autograd differentiates; its fast form
// (autograd/fast/) computes the same numbers with one kernel each way, where the same math as
// separate tensor ops would make many passes over memory.
#include <limits>

#include "autograd/fast/layer_norm.h"
#include "autograd/fast/masked_softmax.h"
#include "autograd/fast/relu_dropout.h"
#include "autograd/functions.h"
#include "autograd/trace.h"
#include "runtime/reference_mode.h"
#include "tensor/kernels.h"
#include "tensor/keyed_dropout.h"

namespace cppgrad {

using autograd::GradMode;
using autograd::Grads;
using autograd::record;
using autograd::Saved;

// ---- argument checks -------------------------------------------------------------------------
namespace {

void check_layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight, const Tensor& bias) {
  CPPGRAD_CHECK(x.is_floating_point(), "layer_norm: expected a floating dtype, got {}", dtype_name(x.dtype()));
  CPPGRAD_CHECK(normalized_dims >= 1 && normalized_dims <= x.dim(), "layer_norm: cannot normalise the last {} dims of {}",
                normalized_dims, shape_str(x.shape()));
  const Shape row_shape(x.shape().end() - normalized_dims, x.shape().end());
  for (const Tensor* t : {&weight, &bias})
    CPPGRAD_CHECK(!t->defined() || (t->shape() == row_shape && t->dtype() == x.dtype()),
                  "layer_norm: weight or bias {} {} should be {} {} for input {}", shape_str(t->shape()),
                  dtype_name(t->dtype()), shape_str(row_shape), dtype_name(x.dtype()), shape_str(x.shape()));
}

void check_masked_softmax(const Tensor& scores, const Tensor& mask, bool is_causal) {
  CPPGRAD_CHECK(scores.is_floating_point() && scores.dim() >= 1, "masked_softmax: expected floating scores, got {} {}",
                dtype_name(scores.dtype()), shape_str(scores.shape()));
  CPPGRAD_CHECK(!is_causal || scores.dim() >= 2, "masked_softmax: a causal mask needs (..., T, S) scores, got {}",
                shape_str(scores.shape()));
  CPPGRAD_CHECK(!mask.defined() || mask.dim() <= scores.dim(), "masked_softmax: mask {} has more dims than scores {}",
                shape_str(mask.shape()), shape_str(scores.shape()));
}

}  // namespace

// ---- the fused forms, and dropout keyed by example ---------------------------------------------
// Each returns an undefined tensor where the op's reference (below) runs instead: in reference
// mode, or, for dropout, outside a KeyedDropout scope.
namespace {

// One kernel each way, where layer_norm's derivative is written (fast/layer_norm.h).
template <class Formula>
Tensor fused_layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight, const Tensor& bias, double eps,
                        const Formula& formula) {
  if (reference_mode()) return {};
  return fast::layer_norm(x, normalized_dims, weight, bias, eps, formula);
}

// One pass per row, and softmax's backward (fast/masked_softmax.h).
Tensor fused_masked_softmax(const Tensor& scores, const Tensor& mask, bool is_causal, double scale) {
  if (reference_mode()) return {};
  return fast::masked_softmax(scores, mask, is_causal, scale);
}

// In a KeyedDropout scope (tensor/keyed_dropout.h: data-parallel runs that resume on another
// number of processes), x ⊙ mask keyed by example: the mask is made once and kept, as the fast
// kernels draw a tensor from one key.
Tensor masked_by_example(const char* op, const Tensor& x, double p, const std::vector<uint64_t>& keys) {
  kernels::check_dropout(op, p, x);
  Tensor mask = kernels::example_dropout_mask(op, x.shape(), x.dtype(), p, keys);
  // y = x ⊙ m;  dx = dy ⊙ m (differentiable in dy under create_graph)
  return record("dropout", kernels::binary(kernels::Binary::Mul, x, mask), {x}, {},
                [mask](const Tensor& g, const Saved&) -> Grads { return {g * mask}; });
}
Tensor dropout_by_example(const char* op, const Tensor& x, double p, Generator& gen) {
  auto keys = example_keys(op, x.shape(), gen);
  return keys ? masked_by_example(op, x, p, *keys) : Tensor();
}

// relu then dropout in one pass, drawing what dropout draws: the same mask.
Tensor fused_relu_dropout(const Tensor& x, double p, Generator& gen) {
  if (reference_mode()) return {};
  if (auto keys = example_keys("relu_dropout", x.shape(), gen)) return masked_by_example("relu_dropout", x.relu(), p, *keys);
  return fast::relu_dropout(x, p, gen.next_u64());
}

}  // namespace

// ---- the ops ---------------------------------------------------------------------------------
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  // y = x·Wᵀ + b;  dX = dY·W,  dW = dYᵀ·X (all rows of the batch in one GEMM),  db = Σ_rows dY
  return record("linear", kernels::linear(x, w, b), {x, w, b}, {x, w}, [](const Tensor& g, const Saved& s) -> Grads {
    const Tensor& X = s[0];
    const Tensor& W = s[1];
    Tensor rows = g.reshape({-1, g.size(-1)});  // (N, out)
    Tensor db = s.needs_grad(2) ? rows.sum({0}) : Tensor();  // first, while dY is in the cache
    return {s.needs_grad(0) ? g.matmul(W) : Tensor(),
            s.needs_grad(1) ? rows.mT().matmul(X.reshape({-1, X.size(-1)})) : Tensor(), db};
  });
}

Tensor layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight, const Tensor& bias, double eps) {
  check_layer_norm(x, normalized_dims, weight, bias);
  CPPGRAD_CHECK(eps >= 0.0, "layer_norm: eps {} must not be negative", eps);  // as rms_norm's and batch_norm's
  autograd::TraceScope trace;  // one op in ONNX, whichever form computes it
  auto traced = [&] {
    return autograd::TracedOp{"layer_norm", {x, weight, bias}, {{"normalized_dims", normalized_dims}, {"eps", eps}}};
  };
  std::vector<int64_t> dims;  // a row: the last normalized_dims dims
  for (int64_t d = x.dim() - normalized_dims; d < x.dim(); ++d) dims.push_back(d);
  // y = (x − mean)/√(var + eps) ⊙ w + b of {x, w, b}: autograd differentiates it (and its gradient again)
  auto formula = [dims, eps](const std::vector<Tensor>& in) {
    Tensor centred = in[0] - in[0].mean(dims, true);
    Tensor y = centred * ((centred * centred).mean(dims, true) + eps).rsqrt();
    if (in[1].defined()) y = y * in[1];
    return in[2].defined() ? y + in[2] : y;
  };
  if (Tensor y = fused_layer_norm(x, normalized_dims, weight, bias, eps, formula); y.defined())
    return trace.note(y, traced);
  return trace.note(formula({x, weight, bias}), traced);
}

Tensor masked_softmax(const Tensor& scores, const Tensor& mask, bool is_causal, double scale) {
  check_masked_softmax(scores, mask, is_causal);
  autograd::TraceScope trace;  // its causal mask is made of the scores' sizes, which ONNX reads from the graph
  auto traced = [&] {
    return autograd::TracedOp{"masked_softmax", {scores, mask}, {{"is_causal", int64_t{is_causal}}, {"scale", scale}}};
  };
  if (Tensor y = fused_masked_softmax(scores, mask, is_causal, scale); y.defined()) return trace.note(y, traced);
  // softmax(scale·scores + mask); a key hidden by a bool mask (true), or causal's key j > query i, at −∞
  const double inf = std::numeric_limits<double>::infinity();
  Tensor z = scores * scale;
  if (is_causal) {
    const int64_t T = z.size(-2), S = z.size(-1);
    z = z.masked_fill(arange(double(S)).reshape({1, S}).gt(arange(double(T)).reshape({T, 1})), -inf);
  }
  if (mask.defined()) z = mask.dtype() == kBool ? z.masked_fill(mask, -inf) : z + mask.to(z.dtype());
  return trace.note(z.softmax(-1), traced);
}

Tensor dropout(const Tensor& x, double p, Generator& gen) {
  if (Tensor y = dropout_by_example("dropout", x, p, gen); y.defined()) return y;  // in a data-parallel run
  const uint64_t key = gen.next_u64();  // the mask is word i of this key's stream for element i (p: checked by the kernel)
  // y = x ⊙ m, m = 0 or 1/(1-p);  dx = dy ⊙ m, m made again from the key rather than kept
  return record("dropout", kernels::dropout(x, p, key), {x}, {}, [p, key](const Tensor& g, const Saved&) -> Grads {
    if (!GradMode::is_enabled()) return {kernels::dropout(g, p, key)};
    return {g * kernels::dropout_mask(g.shape(), g.dtype(), p, key)};  // create_graph: differentiable in g
  });
}

Tensor relu_dropout(const Tensor& x, double p, Generator& gen) {
  if (Tensor y = fused_relu_dropout(x, p, gen); y.defined()) return y;
  return dropout(x.relu(), p, gen);  // the two ops it fuses
}

}  // namespace cppgrad
