// Differentiable reductions and softmax.
#include <cmath>
#include <limits>

#include "autograd/functions.h"
#include "autograd/trace.h"
#include "autograd/softmax.h"
#include "runtime/reference_mode.h"
#include "tensor/kernels.h"

namespace cppgrad {

using autograd::Grads;
using autograd::record;
using autograd::Saved;

// ---- for the rows below: a reduction's note to a trace, and what amax and amin picked ----------

namespace {
// A reduction as a trace writes it down: its dims wrapped (all of them when none are named).
autograd::TracedOp reduction(const char* op, const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  std::vector<int64_t> axes = wrap_dims(dims, std::max<int64_t>(t.dim(), 1), op);
  if (dims.empty())
    for (int64_t d = 0; d < t.dim(); ++d) axes.push_back(d);
  return {op, {t}, {{"dims", axes}, {"keepdim", int64_t{keepdim}}}};
}
// Where A equals C, or is NaN where C is: the elements amax and amin picked, as g's dtype.
Tensor picked(const Tensor& A, const Tensor& C) {
  return (A == C).to(A.dtype()) + (A != A).to(A.dtype()) * (C != C).to(A.dtype());
}
constexpr double inf = std::numeric_limits<double>::infinity();
}  // namespace

// ---- the reductions: one op per row of CPPGRAD_REDUCTION_OPS (tensor/reduction_table.h) ------

namespace {
// A gradient of a reduced output, given back its reduced dims as size 1, ready to broadcast.
Tensor unsqueeze_reduced(const Tensor& g, const Shape& in, const std::vector<int64_t>& dims, bool keepdim) {
  if (keepdim || in.empty()) return g;  // a 0-d input reduces no dim (its dims 0 and -1 name itself)
  Tensor out = g;
  for (int64_t d : wrap_dims(dims, static_cast<int64_t>(in.size()), "reduce")) out = out.unsqueeze(d);
  return out;
}
int64_t reduced_count(const Shape& in, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  if (in.empty()) return n;  // a 0-d input: one element, no dim reduced
  for (int64_t d : wrap_dims(dims, static_cast<int64_t>(in.size()), "reduce")) n *= in[d];
  return n;
}

enum class ReductionSaves { Nothing, Both };

// C = the row's reduction of A, recorded with dA = derivative(g, A, C, N, dims): g and C given
// back their reduced dims as size 1, N the size of each reduced set; dA broadcast to A's shape.
template <class Derivative>
Tensor reduction_op(kernels::Reduction op, ReductionSaves saves, const Tensor& input, const std::vector<int64_t>& dims,
                    bool keepdim, Derivative derivative) {
  const char* name = kernels::reduction_name(op);
  Shape in = input.shape();
  autograd::TraceScope trace;
  Tensor out = kernels::reduce(op, input, dims, keepdim);
  std::vector<Tensor> to_save;
  if (saves == ReductionSaves::Both) to_save = {input, out};
  auto backward = [saves, in, dims, keepdim, derivative](const Tensor& g, const Saved& s) -> Grads {
    const Tensor none;
    const Tensor& A = saves == ReductionSaves::Both ? s[0] : none;
    Tensor C = saves == ReductionSaves::Both ? unsqueeze_reduced(s[1], in, dims, keepdim) : none;
    const double N = static_cast<double>(reduced_count(in, dims));
    Tensor dA = derivative(unsqueeze_reduced(g, in, dims, keepdim), A, C, N, dims);
    return {dA.shape() == in ? dA : dA.expand(in)};
  };
  out = record(name, out, {input}, to_save, backward);
  return trace.note(out, [&] { return reduction(name, input, dims, keepdim); });
}
}  // namespace

#define CPPGRAD_REDUCTION_OP(name, Enum, dtypes, shift, term, combine, finish, saves, dA)            \
  Tensor Tensor::name(const std::vector<int64_t>& dims, bool keepdim) const {                       \
    return reduction_op(kernels::Reduction::Enum, ReductionSaves::saves, *this, dims, keepdim,      \
                        [](const Tensor& g, [[maybe_unused]] const Tensor& A,                       \
                           [[maybe_unused]] const Tensor& C, [[maybe_unused]] double N,             \
                           [[maybe_unused]] const std::vector<int64_t>& dims) { return dA; });      \
  }
CPPGRAD_REDUCTION_OPS(CPPGRAD_REDUCTION_OP)
#undef CPPGRAD_REDUCTION_OP

// ---- the other reductions ----------------------------------------------------------------------

Tensor Tensor::var(const std::vector<int64_t>& dims, int64_t correction, bool keepdim) const {
  Shape in = shape();
  // dA = dC ⊙ 2 (A - mean(A)) / (N - correction)
  return record("var", kernels::var(*this, dims, correction, keepdim), {*this}, {*this},
                [in, dims, correction, keepdim](const Tensor& g, const Saved& s) -> Grads {
                  const Tensor& x = s[0];
                  const double denom = kernels::var_divisor(reduced_count(in, dims), correction);
                  Tensor centred = x - x.mean(dims, /*keepdim=*/true);
                  return {unsqueeze_reduced(g, in, dims, keepdim) * centred * (2.0 / denom)};
                });
}

namespace {
// max/min along a dim: the gradient goes to the element that was picked.
ValuesIndices extremum_dim(kernels::Extremum which, const char* op, const Tensor& t, int64_t dim, bool keepdim) {
  auto [values, indices] = kernels::extremum(which, t, dim, keepdim);
  Shape in = t.shape();
  int64_t d = t.dim() == 0 ? 0 : wrap_dim(dim, t.dim(), op);
  // dA = zeros(shape(A)) with dC placed at the picked index along dim
  values = record(op, values, {t}, {indices}, [in, d, keepdim](const Tensor& g, const Saved& s) -> Grads {
    if (in.empty()) return {g};
    Tensor idx = keepdim ? s[0] : s[0].unsqueeze(d);
    Tensor grad = keepdim ? g : g.unsqueeze(d);
    return {scatter_add(zeros(in, g.dtype()), d, idx, grad)};
  });
  return {values, indices};
}

Tensor extremum_all(kernels::Extremum which, const char* op, const Tensor& t) {
  Tensor value = kernels::extremum_all(which, t).values;
  // dA = dC shared evenly among the elements equal to C (among the NaNs when C is NaN), as
  // torch.max()'s and torch.min()'s backward
  return record(op, value, {t}, {t, value}, [](const Tensor& g, const Saved& s) -> Grads {
    const Tensor& A = s[0];
    const Tensor& C = s[1];
    Tensor picked = (std::isnan(C.item()) ? A != A : A == C).to(g.dtype());
    return {picked * (g / picked.sum())};
  });
}
}  // namespace

Tensor Tensor::max() const { return extremum_all(kernels::Extremum::Max, "max", *this); }
Tensor Tensor::min() const { return extremum_all(kernels::Extremum::Min, "min", *this); }
ValuesIndices Tensor::max(int64_t dim, bool keepdim) const {
  return extremum_dim(kernels::Extremum::Max, "max", *this, dim, keepdim);
}
ValuesIndices Tensor::min(int64_t dim, bool keepdim) const {
  return extremum_dim(kernels::Extremum::Min, "min", *this, dim, keepdim);
}
// Indices are integers: argmax and argmin have no gradient.
Tensor Tensor::argmax() const { return kernels::extremum_all(kernels::Extremum::Max, *this).indices; }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const {
  return kernels::extremum(kernels::Extremum::Max, *this, dim, keepdim).indices;
}
Tensor Tensor::argmin(int64_t dim, bool keepdim) const {
  return kernels::extremum(kernels::Extremum::Min, *this, dim, keepdim).indices;
}

Tensor autograd::log_softmax_backward(const Tensor& y, const Tensor& g, int64_t dim) {
  if (autograd::GradMode::is_enabled() || reference_mode() || g.dtype() != y.dtype()) return {};
  return kernels::log_softmax_backward(y, g, dim);
}

// ---- softmax and sum_to -----------------------------------------------------------------------

Tensor autograd::softmax_backward(const Tensor& y, const Tensor& g, int64_t dim) {
  // dA = C ⊙ (dC - Σ_dim(dC ⊙ C))
  if (!autograd::GradMode::is_enabled()) return kernels::softmax_backward(y, g, dim);  // one pass
  return y * (g - (g * y).sum({dim}, /*keepdim=*/true));  // differentiable, for create_graph
}

Tensor softmax(const Tensor& t, int64_t dim) {
  autograd::TraceScope trace;
  Tensor out = kernels::softmax(t, dim);
  out = record("softmax", out, {t}, {out}, [dim](const Tensor& g, const Saved& s) -> Grads {
    return {autograd::softmax_backward(s[0], g, dim)};
  });
  return trace.note(out, [&] { return autograd::TracedOp{"softmax", {t}, {{"dim", dim}}}; });
}

Tensor log_softmax(const Tensor& t, int64_t dim) {
  autograd::TraceScope trace;
  Tensor out = kernels::log_softmax(t, dim);
  out = record("log_softmax", out, {t}, {out}, [dim](const Tensor& g, const Saved& s) -> Grads {
    if (Tensor fast = autograd::log_softmax_backward(s[0], g, dim); fast.defined()) return {fast};  // one kernel
    return {g - s[0].exp() * g.sum({dim}, /*keepdim=*/true)};  // dA = dC - exp(C) ⊙ Σ_dim dC
  });
  return trace.note(out, [&] { return autograd::TracedOp{"log_softmax", {t}, {{"dim", dim}}}; });
}

Tensor Tensor::softmax(int64_t dim) const { return cppgrad::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return cppgrad::log_softmax(*this, dim); }

Tensor sum_to(const Tensor& t, const Shape& shape) {
  Shape in = t.shape();
  // dA = dC broadcast back to A's shape
  return record("sum_to", kernels::sum_to(t, shape), {t}, {},
                [in](const Tensor& g, const Saved&) -> Grads { return {g.expand(in)}; });
}

}  // namespace cppgrad
