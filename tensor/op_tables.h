// The elementwise ops, one row each, in three families: unary, binary and comparisons. Adding an
// op is adding a row: everything else is made from the rows.
//
// Each family is an X-macro: CPPGRAD_UNARY_OPS(ROW) writes ROW(...) once per op, and each place
// that needs the ops defines ROW to pick the columns it uses (the same for the other families):
//   tensor/kernels.h                   the enum             kernels::Unary::Sin
//   tensor/kernels/elementwise.cpp     the names and the kernel: the forward column, per dtype
//   tensor/tensor.h                    the method and the free function: t.sin(), sin(t)
//   autograd/ops_math.cpp              the differentiable op: what backward saves, the derivative
//   tests/autograd/test_gradcheck_unary.cpp, test_gradcheck_binary.cpp, test_gradgrad.cpp:
//                                      gradcheck and gradgradcheck of every row, on inputs drawn
//                                      from its domain
//
// tensor/ knows nothing of graphs, and this file keeps it so: tensor/ expands only the name and
// forward columns. The derivative column is text that only autograd/ compiles (it is written with
// the differentiable Tensor ops, so create_graph=true gives second derivatives).
//
// The columns of a unary row:
//   name        the method, the free function, the grad_fn's name and the name errors give
//   Enum        its kernels::Unary enumerator
//   dtypes      floating (float32, float64) or numeric (also int64)
//   forward     the scalar op on x, of type T (float, double or int64_t); in a numeric row, what
//               can overflow int64 is written with wrapping_add and its kin (tensor/wrapping_int.h)
//   saves       what the backward keeps: Input (A), Output (C) or Nothing
//   dA          the gradient of the input, from g = dC and the saved A or C
//   domain      where gradcheck draws inputs: Any, Positive (0.5 to 2) or AwayFromZero (|x| ≥ 0.2, off a kink)
//   vector y, vector dA   (some rows) the vectorised float32 forward, and dA where the row saves its input:
//               double arithmetic on a = x and g with vmath (fast/vector_math.h), looped by fast/unary_floats.cpp
// The formulas use the constants below; `sign` is flat almost everywhere, so its dA is 0.
// NaN and ±inf go through every row as through PyTorch 1.13's op (tests/tensor/test_nan_inf.cpp):
// relu tests x <= 0, false for NaN, so relu(NaN) = NaN and its dA there is dC, as torch.relu's.
#pragma once

#include <numbers>

#include "wrapping_int.h"  // wrapping_add, ...: int64 arithmetic that wraps, as PyTorch's

namespace cppgrad::op_constants {
inline constexpr double sqrt_half = std::numbers::sqrt2 / 2;                              // 1/√2
inline constexpr double inv_sqrt_2pi = 0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2;  // 1/√(2π)
inline constexpr double two_over_sqrtpi = 2.0 * std::numbers::inv_sqrtpi;                 // 2/√π, erf's slope at 0
inline constexpr double gelu_k = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;          // √(2/π)
inline constexpr double gelu_c = 0.044715;
}  // namespace cppgrad::op_constants

// clang-format off
#define CPPGRAD_UNARY_OPS(ROW) \
/*  name       Enum      dtypes    forward: y(x)                               saves    dA (g = dC)                             domain */ \
ROW(neg,       Neg,      numeric,  wrapping_neg(x),                            Nothing, -g,                                     Any) \
ROW(abs,       Abs,      numeric,  wrapping_abs(x),                            Input,   g * A.sign(),                           AwayFromZero) \
ROW(sign,      Sign,     numeric,  T((x > T(0)) - (x < T(0))),                 Nothing, zeros_like(g),                          AwayFromZero) \
ROW(exp,       Exp,      floating, std::exp(x),                                Output,  g * C,                                  Any, vmath::exp(a)) \
ROW(log,       Log,      floating, std::log(x),                                Input,   g / A,                                  Positive, vmath::log(a)) \
ROW(sqrt,      Sqrt,     floating, std::sqrt(x),                               Output,  g / (2.0 * C),                          Positive) \
ROW(rsqrt,     Rsqrt,    floating, T(1) / std::sqrt(x),                        Output,  -0.5 * g * C * C * C,                   Positive) \
ROW(tanh,      Tanh,     floating, std::tanh(x),                               Output,  g * (1.0 - C * C),                      Any, vmath::tanh(a)) \
ROW(sigmoid,   Sigmoid,  floating, T(1) / (T(1) + std::exp(-x)),               Output,  g * C * (1.0 - C),                      Any, vmath::sigmoid(a)) \
ROW(silu,      Silu,     floating, x / (T(1) + std::exp(-x)),                  Input,   g * A.sigmoid() * (1.0 + A * (1.0 - A.sigmoid())), Any, a * vmath::sigmoid(a), g * vmath::silu_derivative(a)) \
ROW(relu,      Relu,     floating, x <= T(0) ? T(0) : x,                       Output,  g.masked_fill(C <= 0.0, 0.0),           AwayFromZero) \
ROW(erf,       Erf,      floating, std::erf(x),                                Input,   g * two_over_sqrtpi * (-(A * A)).exp(), Any, vmath::erf(a), g * (two_over_sqrtpi * vmath::exp_of_nonpositive(-(a * a)))) \
ROW(sin,       Sin,      floating, std::sin(x),                                Input,   g * A.cos(),                            Any) \
ROW(cos,       Cos,      floating, std::cos(x),                                Input,   -(g * A.sin()),                         Any) \
/*  GELU(x) = x·Φ(x), Φ the normal CDF; dA = dC ⊙ (Φ(A) + A·φ(A)), φ the normal density */ \
ROW(gelu,      Gelu,     floating, T(0.5) * x * (T(1) + std::erf(x * T(sqrt_half))), \
    Input, g * (0.5 * (1.0 + (A * sqrt_half).erf()) + A * ((-0.5 * A * A).exp() * inv_sqrt_2pi)), Any, \
    a * vmath::normal_cdf(a), g * vmath::gelu_derivative(a)) \
/*  PyTorch's tanh approximation: ½x(1 + tanh u), u = k(x + c·x³); dA = dC ⊙ (½(1 + tanh u) + ½A(1 − tanh² u)·k(1 + 3c·A²)) */ \
/*  vectorised: x·σ(2u), as 1 + tanh u = 2σ(2u); dA = dC ⊙ (s + 2A·s·(1 − s)·k(1 + 3c·A²)), s = σ(2u), as 1 − tanh² u = 4s(1 − s) */ \
ROW(gelu_tanh, GeluTanh, floating, T(0.5) * x * (T(1) + std::tanh(T(gelu_k) * (x + T(gelu_c) * x * x * x))), \
    Input, g * (0.5 * (1.0 + (gelu_k * (A + gelu_c * A * A * A)).tanh()) \
                + 0.5 * A * (1.0 - (gelu_k * (A + gelu_c * A * A * A)).tanh().square()) * gelu_k * (1.0 + 3.0 * gelu_c * A * A)), Any, \
    a * vmath::gelu_tanh_gate(a, gelu_k, gelu_c), g * vmath::gelu_tanh_derivative(a, gelu_k, gelu_c))

// The columns of a binary row (the operands broadcast, NumPy's way, and promote to a common dtype,
// PyTorch's way; div of integers divides in float32, as torch.div):
//   name, Enum  as for unary rows; every binary op takes every dtype but bool
//   forward     the scalar op on x and y, of type T
//   saves       Inputs (A and B) or Nothing
//   dA, dB      the gradients of both inputs, of the output's shape (the engine sums a broadcast
//               gradient back to its input's shape), from g = dC and the saved A and B
//   domain      where gradcheck draws B: Any, or Positive (a divisor away from 0)
// maximum and minimum propagate NaN, as torch.maximum, and send the gradient to the winner, half to
// each on a tie: A's share is 1 where B does not win, less ½ on a tie (a bool counts 1 where
// true), and B's likewise; a NaN on either side is no win and no tie, so both get all of dC there,
// as in torch.maximum's backward.
#define CPPGRAD_BINARY_OPS(ROW) \
/*  name     Enum     forward: z(x, y)            saves    dA                                        dB                                        domain of B */ \
ROW(add,     Add,     wrapping_add(x, y),         Nothing, g,                                g,                                        Any) \
ROW(sub,     Sub,     wrapping_sub(x, y),         Nothing, g,                                -g,                                       Any) \
ROW(mul,     Mul,     wrapping_mul(x, y),         Inputs,  g * B,                            g * A,                                    Any) \
ROW(div,     Div,     x / y,                      Inputs,  g / B,                            -(g * A) / (B * B),                       Positive) \
ROW(maximum, Maximum, (x != x || x > y) ? x : y,  Inputs,  g * (1.0 - ((A < B) + 0.5 * (A == B))),   g * (1.0 - ((A > B) + 0.5 * (A == B))),   Any) \
ROW(minimum, Minimum, (x != x || x < y) ? x : y,  Inputs,  g * (1.0 - ((A > B) + 0.5 * (A == B))),   g * (1.0 - ((A < B) + 0.5 * (A == B))),   Any)

// The comparisons: a bool result, any dtypes (promoted as a binary op's), no gradient. The
// operator column gives a == b, a == 2.0 and 2.0 == a.
#define CPPGRAD_COMPARE_OPS(ROW) \
/*  name  Enum  operator */ \
ROW(eq,   Eq,   ==) \
ROW(ne,   Ne,   !=) \
ROW(lt,   Lt,   <) \
ROW(le,   Le,   <=) \
ROW(gt,   Gt,   >) \
ROW(ge,   Ge,   >=)
// clang-format on
