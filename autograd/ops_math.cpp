// Differentiable elementwise ops and matmul. Each op: the kernel, then record() with its
// backward, whose formula is the comment above it. Backward uses these same ops, so a
// backward run with create_graph=true is itself differentiable (second derivatives).
//
// Broadcasting and dtype promotion are undone by the engine (sum_to and to), so a binary op's
// backward may return gradients of the output's shape.
#include <cmath>
#include <numbers>

#include "autograd/functions.h"
#include "tensor/kernels.h"

namespace cppgrad {

using autograd::Grads;
using autograd::record;
using autograd::Saved;
using kernels::Binary;
using kernels::Unary;

// ---- unary ----------------------------------------------------------------------------------

Tensor Tensor::neg() const {
  // dA = -dC
  return record("neg", kernels::unary(Unary::Neg, *this), {*this}, {},
                [](const Tensor& g, const Saved&) -> Grads { return {-g}; });
}

Tensor Tensor::abs() const {
  // dA = dC ⊙ sign(A)
  return record("abs", kernels::unary(Unary::Abs, *this), {*this}, {*this},
                [](const Tensor& g, const Saved& s) -> Grads { return {g * s[0].sign()}; });
}

Tensor Tensor::sign() const {
  // sign is flat almost everywhere: dA = 0
  return record("sign", kernels::unary(Unary::Sign, *this), {*this}, {},
                [](const Tensor& g, const Saved&) -> Grads { return {zeros_like(g)}; });
}

Tensor Tensor::exp() const {
  Tensor out = kernels::unary(Unary::Exp, *this);
  // dA = dC ⊙ exp(A) = dC ⊙ C
  return record("exp", out, {*this}, {out}, [](const Tensor& g, const Saved& s) -> Grads { return {g * s[0]}; });
}

Tensor Tensor::log() const {
  // dA = dC / A
  return record("log", kernels::unary(Unary::Log, *this), {*this}, {*this},
                [](const Tensor& g, const Saved& s) -> Grads { return {g / s[0]}; });
}

Tensor Tensor::sqrt() const {
  Tensor out = kernels::unary(Unary::Sqrt, *this);
  // dA = dC / (2 √A) = dC / (2 C)
  return record("sqrt", out, {*this}, {out},
                [](const Tensor& g, const Saved& s) -> Grads { return {g / (2.0 * s[0])}; });
}

Tensor Tensor::rsqrt() const {
  Tensor out = kernels::unary(Unary::Rsqrt, *this);
  // dA = dC ⊙ (-½ A^(-3/2)) = -½ dC ⊙ C³
  return record("rsqrt", out, {*this}, {out},
                [](const Tensor& g, const Saved& s) -> Grads { return {-0.5 * g * s[0] * s[0] * s[0]}; });
}

Tensor Tensor::tanh() const {
  Tensor out = kernels::unary(Unary::Tanh, *this);
  // dA = dC ⊙ (1 - C²)
  return record("tanh", out, {*this}, {out},
                [](const Tensor& g, const Saved& s) -> Grads { return {g * (1.0 - s[0] * s[0])}; });
}

Tensor Tensor::sigmoid() const {
  Tensor out = kernels::unary(Unary::Sigmoid, *this);
  // dA = dC ⊙ C ⊙ (1 - C)
  return record("sigmoid", out, {*this}, {out},
                [](const Tensor& g, const Saved& s) -> Grads { return {g * s[0] * (1.0 - s[0])}; });
}

Tensor Tensor::relu() const {
  Tensor out = kernels::unary(Unary::Relu, *this);
  // dA = dC where C > 0, else 0
  return record("relu", out, {*this}, {out}, [](const Tensor& g, const Saved& s) -> Grads {
    if (!autograd::GradMode::is_enabled()) return {kernels::relu_backward(g, s[0])};  // one pass
    return {g.masked_fill(kernels::compare(kernels::Compare::Le, s[0], zeros({}, s[0].dtype())), 0.0)};
  });
}

Tensor Tensor::gelu(std::string_view approximate) const {
  CPPGRAD_CHECK(approximate == "none" || approximate == "tanh",
                "gelu: approximate must be \"none\" or \"tanh\", got \"{}\"", approximate);
  if (approximate == "tanh") {
    // GELU(x) ≈ ½x(1 + tanh u),  u = k(x + c x³),  k = √(2/π),  c = 0.044715;
    // dA = dC ⊙ (½(1 + tanh u) + ½A (1 - tanh² u) k (1 + 3c A²))
    return record("gelu_tanh", kernels::unary(Unary::GeluTanh, *this), {*this}, {*this},
                  [](const Tensor& g, const Saved& s) -> Grads {
                    constexpr double k = std::numbers::sqrt2 * std::numbers::inv_sqrtpi, c = 0.044715;
                    const Tensor& x = s[0];
                    Tensor x2 = x * x;
                    Tensor t = (k * (x + c * x2 * x)).tanh();
                    Tensor du_dx = k * (1.0 + 3.0 * c * x2);
                    return {g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx)};
                  });
  }
  // GELU(x) = x Φ(x);  dA = dC ⊙ (Φ(A) + A φ(A)),  φ(x) = exp(-x²/2) / √(2π)
  return record("gelu", kernels::unary(Unary::Gelu, *this), {*this}, {*this},
                [](const Tensor& g, const Saved& s) -> Grads {
                  const Tensor& x = s[0];
                  Tensor cdf = 0.5 * (1.0 + (x * (std::numbers::sqrt2 / 2)).erf());
                  Tensor pdf = (-0.5 * x * x).exp() * (0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
                  return {g * (cdf + x * pdf)};
                });
}

Tensor Tensor::erf() const {
  // dA = dC ⊙ 2/√π exp(-A²)
  return record("erf", kernels::unary(Unary::Erf, *this), {*this}, {*this},
                [](const Tensor& g, const Saved& s) -> Grads {
                  return {g * (2.0 * std::numbers::inv_sqrtpi) * (-(s[0] * s[0])).exp()};
                });
}

Tensor Tensor::pow(double p) const {
  // dA = dC ⊙ p A^(p-1)
  return record("pow", kernels::pow(*this, p), {*this}, {*this}, [p](const Tensor& g, const Saved& s) -> Grads {
    if (p == 0.0) return {zeros_like(g)};
    if (p == 1.0) return {g};
    if (p == 2.0) return {g * 2.0 * s[0]};
    return {g * p * s[0].pow(p - 1.0)};
  });
}

// ---- binary, with broadcasting --------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  // dA = dC,  dB = dC
  return record("add", kernels::binary(Binary::Add, a, b), {a, b}, {},
                [](const Tensor& g, const Saved&) -> Grads { return {g, g}; });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  // dA = dC,  dB = -dC
  return record("sub", kernels::binary(Binary::Sub, a, b), {a, b}, {},
                [](const Tensor& g, const Saved& s) -> Grads { return {g, s.needs_grad(1) ? -g : Tensor()}; });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  // dA = dC ⊙ B,  dB = dC ⊙ A
  return record("mul", kernels::binary(Binary::Mul, a, b), {a, b}, {a, b},
                [](const Tensor& g, const Saved& s) -> Grads {
                  return {s.needs_grad(0) ? g * s[1] : Tensor(), s.needs_grad(1) ? g * s[0] : Tensor()};
                });
}

Tensor div(const Tensor& a, const Tensor& b) {
  // dA = dC / B,  dB = -dC ⊙ A / B²
  return record("div", kernels::binary(Binary::Div, a, b), {a, b}, {a, b},
                [](const Tensor& g, const Saved& s) -> Grads {
                  return {s.needs_grad(0) ? g / s[1] : Tensor(),
                          s.needs_grad(1) ? -(g * s[0]) / (s[1] * s[1]) : Tensor()};
                });
}

namespace {
// maximum/minimum send the gradient to the winner, and half to each on a tie (as PyTorch).
Tensor extremum2(const char* op, Binary kind, kernels::Compare wins, const Tensor& a, const Tensor& b) {
  // dA = dC ⊙ w,  dB = dC ⊙ (1 - w),  w = 1 where A wins, ½ on a tie, 0 where B wins
  return record(op, kernels::binary(kind, a, b), {a, b}, {a, b}, [wins](const Tensor& g, const Saved& s) -> Grads {
    DType dt = g.dtype();
    Tensor w = kernels::binary(Binary::Add, kernels::to(kernels::compare(wins, s[0], s[1]), dt),
                               kernels::binary(Binary::Mul, kernels::to(kernels::compare(kernels::Compare::Eq, s[0], s[1]), dt),
                                               full({}, 0.5, dt)));
    return {g * w, g * (1.0 - w)};
  });
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum2("maximum", Binary::Maximum, kernels::Compare::Gt, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum2("minimum", Binary::Minimum, kernels::Compare::Lt, a, b); }
Tensor Tensor::maximum(const Tensor& other) const { return cppgrad::maximum(*this, other); }
Tensor Tensor::minimum(const Tensor& other) const { return cppgrad::minimum(*this, other); }

// A scalar operand becomes a 0-d tensor of the other side's dtype (float32 for a fractional
// scalar with an integer tensor), so `x * 2.0` keeps x's dtype as in PyTorch.
static Tensor scalar_for(const Tensor& t, double v) {
  DType dt = t.dtype();
  if (!is_floating(dt) && v != std::floor(v)) dt = kFloat32;
  if (dt == kBool) dt = kInt64;
  return full({}, v, dt);
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

// ---- comparisons: bool results, no gradient ---------------------------------------------------
Tensor Tensor::eq(const Tensor& o) const { return kernels::compare(kernels::Compare::Eq, *this, o); }
Tensor Tensor::ne(const Tensor& o) const { return kernels::compare(kernels::Compare::Ne, *this, o); }
Tensor Tensor::lt(const Tensor& o) const { return kernels::compare(kernels::Compare::Lt, *this, o); }
Tensor Tensor::le(const Tensor& o) const { return kernels::compare(kernels::Compare::Le, *this, o); }
Tensor Tensor::gt(const Tensor& o) const { return kernels::compare(kernels::Compare::Gt, *this, o); }
Tensor Tensor::ge(const Tensor& o) const { return kernels::compare(kernels::Compare::Ge, *this, o); }
Tensor Tensor::logical_not() const { return kernels::logical_not(*this); }
Tensor operator==(const Tensor& a, const Tensor& b) { return a.eq(b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return a.ne(b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return a.lt(b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return a.le(b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return a.gt(b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return a.ge(b); }

// ---- selection --------------------------------------------------------------------------------

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  // dA = dC where the condition holds, else 0;  dB = dC where it does not, else 0
  return record("where", kernels::where(condition, a, b), {a, b}, {condition},
                [](const Tensor& g, const Saved& s) -> Grads {
                  return {s.needs_grad(0) ? g.masked_fill(s[0].logical_not(), 0.0) : Tensor(),
                          s.needs_grad(1) ? g.masked_fill(s[0], 0.0) : Tensor()};
                });
}

Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  // dA = dC, with 0 where the mask is true
  return record("masked_fill", kernels::masked_fill(*this, mask, value), {*this}, {mask},
                [](const Tensor& g, const Saved& s) -> Grads { return {g.masked_fill(s[0], 0.0)}; });
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
    if (s.needs_grad(1)) {
      if (B.dim() == 2 && A.dim() > 2)  // a shared weight: fold the batch into one GEMM
        grads[1] = matmul(A.reshape({-1, A.size(-1)}).mT(), g.reshape({-1, g.size(-1)}));
      else
        grads[1] = matmul(A.mT(), g);
    }
    return grads;
  });
}

Tensor Tensor::matmul(const Tensor& other) const { return cppgrad::matmul(*this, other); }

}  // namespace cppgrad
