// Transcendental functions written so that a loop over them vectorises: no call into libm, no
// branch, only arithmetic, comparisons that select, and bit manipulation. The float32 forms of the
// unary ops (unary_floats.cpp) are built on them. A first reading skips this file.
//
// The series are evaluated with std::fma: one rounding per step instead of two, and one
// instruction instead of two on the vector units that have it (x86-64-v3 and v4; the baseline
// clone calls libm's fma, which rounds alike). Measured in bench/bench_unary.
//
// A float32 result is computed in double and rounded once, so its error is that rounding (half an
// ulp) plus the approximations' error, which is ~1e-11 relative: within 1 ulp of the exact value
// on the whole float range. Composite functions are rearranged where the plain float formula
// cancels: GELU's Φ(x) for x < 0 is ½·erfc(|x|/√2) (the scalar 0.5·x·(1 + erf(x/√2)) in float loses
// every digit there), and tanh-GELU is x·σ(2u), since 1 + tanh u = 2σ(2u).
//
// The methods:
//   exp(x)    = 2ⁿ·(1 + q), n = round(x/ln 2), q = e^r − 1 by its Taylor series to r⁹ (|r| ≤ ln2/2),
//               2ⁿ made in the exponent bits (the round is the 1.5·2⁵² shifter: no float-to-int
//               conversion, which AVX2 lacks for doubles)
//   log(x)    = e·ln 2 + 2·atanh(s), x = m·2ᵉ with m in [√½, √2), s = (m − 1)/(m + 1), |s| ≤ 0.172;
//               atanh's odd series to s¹³
//   erfcx(z)  = erfc(z)·e^{z²} for z in [0, 10.5]: a Chebyshev series of erfcx(z)/t in t = 2/(2 + z)
//               (14 terms, fitted at Chebyshev nodes from the exact function: relative error 3e-11),
//               evaluated as a polynomial by Estrin's scheme;
//               erf and erfc follow from it, erf's small arguments (|z| < 0.5) from its Taylor series
//   tanh(x)   = em1/(em1 + 2), em1 = e^{2|x|} − 1 (q itself when n = 0, so no cancellation at 0)
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace cppgrad::kernels::fast::vmath {

// e^x = 2ⁿ·(1 + q): n and q, for x in [-700, 700] (2ⁿ a normal double).
struct ExpParts {
  double two_to_n;
  double q;
  bool n_is_zero;
};
inline ExpParts exp_parts(double x) {
  constexpr double log2e = 1.4426950408889634, ln2_hi = 0.6931471803691238, ln2_lo = 1.9082149292705877e-10;
  constexpr double shifter = 6755399441055744.0;  // 1.5·2⁵²: adding it rounds to an integer in the low bits
  const double shifted = std::fma(x, log2e, shifter);
  const double n = shifted - shifter;
  const double r = std::fma(-n, ln2_lo, std::fma(-n, ln2_hi, x));
  double p = 1.0 / 362880;  // q = r + r²/2! + … + r⁹/9!
  p = std::fma(p, r, 1.0 / 40320);
  p = std::fma(p, r, 1.0 / 5040);
  p = std::fma(p, r, 1.0 / 720);
  p = std::fma(p, r, 1.0 / 120);
  p = std::fma(p, r, 1.0 / 24);
  p = std::fma(p, r, 1.0 / 6);
  p = std::fma(p, r, 0.5);
  const double q = std::fma(p * r, r, r);
  // n sits in the shifter's low mantissa bits; the exponent field of 2ⁿ is n + 1023.
  const int64_t n_bits = std::bit_cast<int64_t>(shifted) - std::bit_cast<int64_t>(shifter);
  const double two_to_n = std::bit_cast<double>((n_bits + 1023) << 52);
  return {two_to_n, q, n == 0.0};
}

// e^x: 0 below -700 and inf above 700 (a float's e^x is 0 or inf far before), NaN stays NaN.
inline double exp(double x) {
  const double clamped = x < -700.0 ? -700.0 : (x > 700.0 ? 700.0 : x);
  const ExpParts e = exp_parts(clamped);
  double y = e.two_to_n * (1.0 + e.q);
  y = x < -700.0 ? 0.0 : y;
  y = x > 700.0 ? INFINITY : y;
  return x != x ? x : y;
}

// e^x for x ≤ 0, and NaN for a NaN: exp without its checks at the top of the range and for NaN,
// which an argument −z² never needs and which cost as much as the series' last steps. The same
// bits as exp(x) for every x ≤ 0.
inline double exp_of_nonpositive(double x) {
  const ExpParts e = exp_parts(x < -700.0 ? -700.0 : x);
  return x < -700.0 ? 0.0 : e.two_to_n * (1.0 + e.q);  // a NaN's q is NaN
}

// ln x of a float x (NaN, ±0, subnormals and infinities included).
inline double log(float x) {
  constexpr double ln2 = 0.6931471805599453, sqrt2 = 1.4142135623730951;
  const bool subnormal = x < 1.17549435e-38f;  // scaled by 2²³ into the normal range first
  const float scaled = subnormal ? x * 8388608.0f : x;
  const int32_t bits = std::bit_cast<int32_t>(scaled);
  const int32_t exponent = ((bits >> 23) & 0xff) - 127 - (subnormal ? 23 : 0);
  double m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f800000);  // in [1, 2)
  double e = exponent;
  const bool high = m > sqrt2;
  m = high ? 0.5 * m : m;
  e = high ? e + 1.0 : e;
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double p = 1.0 / 13;
  p = std::fma(p, s2, 1.0 / 11);
  p = std::fma(p, s2, 1.0 / 9);
  p = std::fma(p, s2, 1.0 / 7);
  p = std::fma(p, s2, 1.0 / 5);
  p = std::fma(p, s2, 1.0 / 3);
  const double y = std::fma(e, ln2, std::fma(2.0 * s * s2, p, 2.0 * s));
  double out = x == 0.0f ? -INFINITY : y;
  out = x < 0.0f ? NAN : out;
  out = x == INFINITY ? INFINITY : out;
  return x != x ? static_cast<double>(x) : out;
}

// erfc(z)·e^{z²} for z ≥ 0 (clamped to 10.5: callers multiply by e^{-z²}, which is 0 in float there).
// The fit's Chebyshev series in u, rewritten in powers of u (within 2.3e-16 of the series on
// [-1, 1]) and evaluated by Estrin's scheme: pairs, then pairs of pairs, so the chain of dependent
// operations is 4 multiply-adds long instead of Clenshaw's 13 steps. That chain, not the
// arithmetic, bounded the loop (bench/README.md, bench_unary: GELU before and after).
inline double erfcx(double z) {
  constexpr double a[14] = {0.5694087224346225,     0.327187931355062,      0.10352099459485367,
                            0.006307920384662447,   -0.006327361218961882,  -0.0006719673537543613,
                            0.0006252944819651062,  2.8663588122057632e-06, -7.152238484387397e-05,
                            1.4089877770544492e-05, 6.252810305227283e-06,  -3.3982970296619912e-06,
                            -1.9399971847633424e-07, 3.709681550390087e-07};
  constexpr double t_min = 0.16;  // t at z = 10.5
  const double clamped = z > 10.5 ? 10.5 : z;
  // t = 2/(2 + z) in [t_min, 1] maps to u = (2t − 1 − t_min)/(1 − t_min) in [-1, 1]; both from one
  // division, as a division costs the vector unit more than the series' multiply-adds.
  const double r = 1.0 / (2.0 + clamped);
  const double t = 2.0 * r;
  const double u = std::fma(r, 4.0 / (1.0 - t_min), -(1.0 + t_min) / (1.0 - t_min));
  const double u2 = u * u, u4 = u2 * u2, u8 = u4 * u4;
  const double p01 = std::fma(a[1], u, a[0]), p23 = std::fma(a[3], u, a[2]), p45 = std::fma(a[5], u, a[4]);
  const double p67 = std::fma(a[7], u, a[6]), p89 = std::fma(a[9], u, a[8]), p1011 = std::fma(a[11], u, a[10]);
  const double p1213 = std::fma(a[13], u, a[12]);
  const double p0to3 = std::fma(p23, u2, p01), p4to7 = std::fma(p67, u2, p45), p8to11 = std::fma(p1011, u2, p89);
  const double p0to7 = std::fma(p4to7, u4, p0to3), p8to13 = std::fma(p1213, u4, p8to11);
  return t * std::fma(p8to13, u8, p0to7);
}

// erf(z) (NaN and ±inf included).
inline double erf(double z) {
  const double a = std::fabs(z);
  // Taylor: erf z = 2/√π · Σ (−1)ᵏ z^{2k+1} / (k!(2k+1)), to k = 11 (error < 1e-17 below 0.5)
  const double z2 = z * z;
  double p = -1.0 / (39916800.0 * 23);
  p = std::fma(p, z2, 1.0 / (3628800.0 * 21));
  p = std::fma(p, z2, -1.0 / (362880.0 * 19));
  p = std::fma(p, z2, 1.0 / (40320.0 * 17));
  p = std::fma(p, z2, -1.0 / (5040.0 * 15));
  p = std::fma(p, z2, 1.0 / (720.0 * 13));
  p = std::fma(p, z2, -1.0 / (120.0 * 11));
  p = std::fma(p, z2, 1.0 / (24.0 * 9));
  p = std::fma(p, z2, -1.0 / (6.0 * 7));
  p = std::fma(p, z2, 1.0 / (2.0 * 5));
  p = std::fma(p, z2, -1.0 / 3);
  const double small = 1.1283791670955126 * std::fma(z * z2, p, z);
  const double large = std::copysign(1.0 - exp_of_nonpositive(-a * a) * erfcx(a), z);
  const double y = a < 0.5 ? small : large;
  return z != z ? z : y;
}

// Φ(x), the normal CDF, without cancellation for x < 0.
inline double normal_cdf(double x) {
  constexpr double sqrt_half = 0.7071067811865476;
  const double z = std::fabs(x) * sqrt_half;
  const double tail = 0.5 * exp_of_nonpositive(-z * z) * erfcx(z);  // Φ(−|x|)
  return x < 0.0 ? tail : 1.0 - tail;
}

// GELU's derivative Φ(x) + x·φ(x), the two sharing one exponential: φ(x) = e^{−x²/2}/√(2π), and
// Φ(−|x|) = ½·erfc(|x|/√2) = ½·e^{−x²/2}·erfcx(|x|/√2).
inline double gelu_derivative(double x) {
  constexpr double sqrt_half = 0.7071067811865476, inv_sqrt_2pi = 0.3989422804014327;
  const double z = std::fabs(x) * sqrt_half;
  const double e = exp_of_nonpositive(-z * z);
  const double tail = 0.5 * e * erfcx(z);  // Φ(−|x|)
  return (x < 0.0 ? tail : 1.0 - tail) + x * (e * inv_sqrt_2pi);
}

// tanh(x) (NaN and ±inf included).
inline double tanh(double x) {
  const double y = 2.0 * std::fabs(x);
  const ExpParts e = exp_parts(y > 40.0 ? 40.0 : y);  // tanh is 1 in double past 20
  const double em1 = e.n_is_zero ? e.q : e.two_to_n * (1.0 + e.q) - 1.0;
  const double t = std::copysign(em1 / (em1 + 2.0), x);
  return x != x ? x : t;
}

// σ(x) = 1/(1 + e^{−x}) and 1 − σ(x) = σ(−x), each without cancellation.
inline double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// The derivatives below take 1 − σ as 1 − s from the one σ they compute, instead of a second
// exponential: in double, the digits 1 − s loses (where s is near 1) are ones a float result
// beside 1 + … cannot hold.

// SiLU's derivative σ(x)·(1 + x·(1 − σ(x))).
inline double silu_derivative(double x) {
  const double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

// tanh-GELU's gate σ(2u), u = k(x + c·x³), with k and c the approximation's constants
// (tensor/op_tables.h): the forward is x·σ(2u), as 1 + tanh u = 2σ(2u).
inline double gelu_tanh_gate(double x, double k, double c) { return sigmoid(2.0 * (k * (x + c * x * x * x))); }

// tanh-GELU's derivative s + 2x·s·(1 − s)·k(1 + 3c·x²), s the gate.
inline double gelu_tanh_derivative(double x, double k, double c) {
  const double s = gelu_tanh_gate(x, k, c);
  return s + 2.0 * x * s * (1.0 - s) * k * (1.0 + 3.0 * c * x * x);
}

}  // namespace cppgrad::kernels::fast::vmath
