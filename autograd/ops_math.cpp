// Differentiable elementwise ops and matmul. Each op: the kernel, then record() with its
// backward, whose formula is the comment above it. Backward uses these same ops, so a
// backward run with create_graph=true is itself differentiable (second derivatives).
//
// Broadcasting and dtype promotion are undone by the engine (sum_to and to), so a binary op's
// backward may return gradients of the output's shape.
#include <cmath>
#include <numbers>

#include "autograd/functions.h"
#include "autograd/fast/unary_backward.h"
#include "autograd/trace.h"
#include "tensor/kernels.h"

namespace cppgrad {

using autograd::Grads;
using autograd::record;
using autograd::Saved;
using autograd::TracedOp;
using kernels::Binary;
using kernels::Unary;

// ---- unary: one op per row of CPPGRAD_UNARY_OPS (tensor/op_tables.h) -------------------------

namespace {
enum class Saves { Nothing, Input, Output };

// C = forward(A), recorded with dA = derivative(g, A, C), where A or C is what the row saves
// (the other is undefined).
template <class Derivative>
Tensor unary_op(kernels::Unary op, Saves saves, const Tensor& input, Derivative derivative) {
  Tensor out = kernels::unary(op, input);
  std::vector<Tensor> to_save;
  if (saves == Saves::Input) to_save = {input};
  if (saves == Saves::Output) to_save = {out};
  auto backward = [saves, derivative](const Tensor& g, const Saved& s) -> Grads {
    const Tensor none;
    const Tensor& A = saves == Saves::Input ? s[0] : none;
    const Tensor& C = saves == Saves::Output ? s[0] : none;
    return {derivative(g, A, C)};
  };
  // (Outside reference mode, some rows' backward runs in one fused pass: autograd/fast/unary_backward.h.)
  return record(kernels::unary_name(op), out, {input}, to_save,
                autograd::unary_backward(op, saves != Saves::Nothing, backward));
}
}  // namespace

using namespace op_constants;
namespace {
// The rows PyTorch computes in floating point whatever the input's dtype: an integer or bool
// tensor is converted to float32 (PyTorch's default dtype) first, so torch.sqrt(torch.tensor([4]))'s
// [2.] float32 is sqrt(tensor({4}))'s too. Such a tensor takes no gradient, so none flows to it.
// The other floating rows stay refused for integers, as in PyTorch: silu and gelu have no integer
// kernel there, and relu keeps an integer's dtype there, which its float row cannot give.
bool promotes_to_float(Unary op) {
  switch (op) {
    case Unary::Exp: case Unary::Log: case Unary::Sqrt: case Unary::Rsqrt: case Unary::Tanh:
    case Unary::Sigmoid: case Unary::Erf: case Unary::Sin: case Unary::Cos:
      return true;
    default:
      return false;
  }
}

const Tensor& floating_input(Unary op, const Tensor& t, Tensor& promoted) {
  if (t.is_floating_point() || !promotes_to_float(op)) return t;
  promoted = t.to(kFloat32);
  return promoted;
}
}  // namespace

#define CPPGRAD_UNARY_OP(name, Enum, dtypes, forward, saves, dA, domain, ...)                       \
  Tensor Tensor::name() const {                                                                      \
    Tensor promoted;                                                                                 \
    return unary_op(Unary::Enum, Saves::saves, floating_input(Unary::Enum, *this, promoted),        \
                    [](const Tensor& g, [[maybe_unused]] const Tensor& A, [[maybe_unused]] const Tensor& C) { \
                      return dA;                                                                     \
                    });                                                                              \
  }                                                                                                  \
  Tensor name(const Tensor& t) { return t.name(); }
CPPGRAD_UNARY_OPS(CPPGRAD_UNARY_OP)
#undef CPPGRAD_UNARY_OP

// ---- binary, with broadcasting: one op per row of CPPGRAD_BINARY_OPS ---------------------------

namespace {
enum class BinarySaves { Nothing, Inputs };

// C = forward(A, B), recorded with dA = derivative_a(g, A, B) and dB = derivative_b(g, A, B), each
// computed only when its input needs it.
template <class DerivativeA, class DerivativeB>
Tensor binary_op(Binary op, BinarySaves saves, const Tensor& a, const Tensor& b, DerivativeA derivative_a,
                 DerivativeB derivative_b) {
  std::vector<Tensor> to_save;
  if (saves == BinarySaves::Inputs) to_save = {a, b};
  return record(kernels::binary_name(op), kernels::binary(op, a, b), {a, b}, to_save,
                [saves, derivative_a, derivative_b](const Tensor& g, const Saved& s) -> Grads {
                  const Tensor none;
                  const Tensor& A = saves == BinarySaves::Inputs ? s[0] : none;
                  const Tensor& B = saves == BinarySaves::Inputs ? s[1] : none;
                  return {s.needs_grad(0) ? derivative_a(g, A, B) : Tensor(),
                          s.needs_grad(1) ? derivative_b(g, A, B) : Tensor()};
                });
}
}  // namespace

#define CPPGRAD_BINARY_OP(name, Enum, forward, saves, dA, dB, domain)                                         \
  Tensor name(const Tensor& a, const Tensor& b) {                                                              \
    return binary_op(                                                                                          \
        Binary::Enum, BinarySaves::saves, a, b,                                                                \
        [](const Tensor& g, [[maybe_unused]] const Tensor& A, [[maybe_unused]] const Tensor& B) { return dA; }, \
        [](const Tensor& g, [[maybe_unused]] const Tensor& A, [[maybe_unused]] const Tensor& B) { return dB; }); \
  }                                                                                                            \
  Tensor Tensor::name(const Tensor& other) const { return cppgrad::name(*this, other); }
CPPGRAD_BINARY_OPS(CPPGRAD_BINARY_OP)
#undef CPPGRAD_BINARY_OP

// ---- more ops: gelu's approximation, clamp, pow, and the operators -------------------------

Tensor Tensor::gelu(std::string_view approximate) const {
  CPPGRAD_CHECK(approximate == "none" || approximate == "tanh",
                "gelu: approximate must be \"none\" or \"tanh\", got \"{}\"", approximate);
  return approximate == "tanh" ? gelu_tanh() : gelu();
}

Tensor Tensor::clamp(std::optional<double> min, std::optional<double> max) const {
  CPPGRAD_CHECK(min || max, "clamp: give at least one of min and max");
  CPPGRAD_CHECK(!min || !max || *min <= *max, "clamp: min {} is above max {}", *min, *max);
  CPPGRAD_CHECK(is_floating_point(), "clamp: {} tensor; clamp works on floating tensors", dtype_name(dtype()));
  autograd::TraceScope trace;
  Tensor out = *this;
  if (min) out = kernels::binary(Binary::Maximum, out, kernels::scalar_operand(*min, dtype()));
  if (max) out = kernels::binary(Binary::Minimum, out, kernels::scalar_operand(*max, dtype()));
  // dA = dC where min ≤ A ≤ max, else 0 (so 0 where A is NaN, as torch.clamp's)
  out = record("clamp", out, {*this}, {*this}, [min, max](const Tensor& g, const Saved& s) -> Grads {
    Tensor grad = g;
    if (min) grad = grad.masked_fill((s[0] >= *min).logical_not(), 0.0);
    if (max) grad = grad.masked_fill((s[0] <= *max).logical_not(), 0.0);
    return {grad};
  });
  return trace.note(out, [&] {
    TracedOp op{"clamp", {*this}, {}};
    if (min) op.args.push_back({"min", *min});
    if (max) op.args.push_back({"max", *max});
    return op;
  });
}

Tensor clamp(const Tensor& t, std::optional<double> min, std::optional<double> max) { return t.clamp(min, max); }

Tensor Tensor::pow(double p) const {
  autograd::TraceScope trace;
  // dA = dC ⊙ p A^(p-1)
  Tensor out = record("pow", kernels::pow(*this, p), {*this}, {*this}, [p](const Tensor& g, const Saved& s) -> Grads {
    if (p == 0.0) return {zeros_like(g)};
    if (p == 1.0) return {g};
    if (p == 2.0) return {g * 2.0 * s[0]};
    return {g * p * s[0].pow(p - 1.0)};
  });
  return trace.note(out, [&] { return TracedOp{"pow", {*this}, {{"exponent", p}}}; });
}

// A scalar operand becomes a 0-d tensor of the other side's dtype (float32 for a fractional
// scalar with an integer tensor, or one no int64 holds: NaN, ±inf, 1e19), so `x * 2.0` keeps
// x's dtype as in PyTorch.
static Tensor scalar_for(const Tensor& t, double v) {
  DType dt = t.dtype();
  if (!is_floating(dt) && (v != std::floor(v) || !fits_int64(v))) dt = kFloat32;
  if (dt == kBool) dt = kInt64;
  return kernels::scalar_operand(v, dt);
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return a.neg(); }
Tensor operator+(const Tensor& a, double b) { return add(a, scalar_for(a, b)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_for(a, b)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_for(a, b)); }
Tensor operator/(const Tensor& a, double b) { return div(a, scalar_for(a, b)); }
Tensor operator+(double a, const Tensor& b) { return add(scalar_for(b, a), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_for(b, a), b); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_for(b, a), b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_for(b, a), b); }

// ---- comparisons: one per row of CPPGRAD_COMPARE_OPS; bool results, no gradient -----------------

// A number compared with a tensor: in the tensor's dtype when that holds it exactly, else in
// float64 (an integer tensor against 0.5), so `t == 0.5` is false for every integer t.
static Tensor compare_scalar_for(const Tensor& t, double v) {
  if (is_floating(t.dtype())) return kernels::scalar_operand(v, t.dtype());
  if (v == std::floor(v) && fits_int64(v) && t.dtype() == kInt64) return kernels::scalar_operand(v, kInt64);
  return kernels::scalar_operand(v, kFloat64);
}

#define CPPGRAD_COMPARE_OP(name, Enum, symbol)                                                         \
  Tensor name(const Tensor& a, const Tensor& b) { return kernels::compare(kernels::Compare::Enum, a, b); } \
  Tensor Tensor::name(const Tensor& other) const { return cppgrad::name(*this, other); }              \
  Tensor operator symbol(const Tensor& a, const Tensor& b) { return name(a, b); }                      \
  Tensor operator symbol(const Tensor& a, double b) { return name(a, compare_scalar_for(a, b)); }      \
  Tensor operator symbol(double a, const Tensor& b) { return name(compare_scalar_for(b, a), b); }
CPPGRAD_COMPARE_OPS(CPPGRAD_COMPARE_OP)
#undef CPPGRAD_COMPARE_OP
Tensor Tensor::logical_not() const { return kernels::logical_not(*this); }

// ---- selection --------------------------------------------------------------------------------

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  autograd::TraceScope trace;
  // dA = dC where the condition holds, else 0;  dB = dC where it does not, else 0
  Tensor out = record("where", kernels::where(condition, a, b), {a, b}, {condition},
                      [](const Tensor& g, const Saved& s) -> Grads {
                        return {s.needs_grad(0) ? g.masked_fill(s[0].logical_not(), 0.0) : Tensor(),
                                s.needs_grad(1) ? g.masked_fill(s[0], 0.0) : Tensor()};
                      });
  return trace.note(out, [&] { return TracedOp{"where", {condition, a, b}, {}}; });
}

Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  check_fill_value(value, dtype(), "masked_fill");
  autograd::TraceScope trace;
  // dA = dC, with 0 where the mask is true
  Tensor out = record("masked_fill", kernels::masked_fill(*this, mask, value), {*this}, {mask},
                      [](const Tensor& g, const Saved& s) -> Grads { return {g.masked_fill(s[0], 0.0)}; });
  return trace.note(out, [&] { return TracedOp{"masked_fill", {*this, mask}, {{"value", value}}}; });
}

// ---- matmul -------------------------------------------------------------------------------------

Tensor matmul(const Tensor& a, const Tensor& b) {
  // A 1-D operand is a row (left) or column (right) vector; reshaping it keeps backward simple.
  if (a.dim() == 1 && b.dim() == 1) return matmul(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  if (a.dim() == 1 && b.dim() >= 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1 && a.dim() >= 1) return matmul(a, b.unsqueeze(1)).squeeze(-1);
  // dA = dC · Bᵀ,  dB = Aᵀ · dC   (batch dims broadcast: the engine sums them back)
  return record("matmul", kernels::matmul(a, b), {a, b}, {a, b}, [](const Tensor& g, const Saved& s) -> Grads {
    const Tensor& A = s[0];
    const Tensor& B = s[1];
    Grads grads(2);
    if (s.needs_grad(0)) grads[0] = matmul(g, B.mT());
    if (s.needs_grad(1) && B.dim() == 2) {  // a shared weight: the batch folded into one GEMM; a
      // transposed one (a tied head's Wᵀ) gets (dCᵀ·A)ᵀ, in its own layout, to sum in place
      const Tensor a2 = A.reshape({-1, A.size(-1)}), g2 = g.reshape({-1, g.size(-1)});
      grads[1] = B.stride(0) == 1 && B.size(1) > 1 ? matmul(g2.mT(), a2).mT() : matmul(a2.mT(), g2);
    } else if (s.needs_grad(1))
      grads[1] = matmul(A.mT(), g);
    return grads;
  });
}

Tensor Tensor::matmul(const Tensor& other) const { return cppgrad::matmul(*this, other); }

}  // namespace cppgrad
