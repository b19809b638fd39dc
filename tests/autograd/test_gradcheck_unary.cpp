// gradcheck of the unary elementwise ops, on a contiguous leaf, a non-contiguous (transposed)
// leaf, a strided slice of a leaf, and a 0-d leaf. Inputs stay inside each op's domain and away
// from its kinks (abs and relu at 0).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using test::check1;
using test::transposed;
using V = std::vector<double>;

namespace {

using test::Domain;

Tensor make(const Shape& shape, uint64_t seed, Domain domain) { return test::leaf_in(domain, shape, seed); }

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> fn;
  Domain domain;
};

std::vector<UnaryCase> unary_cases() {
  return {
  // Every row of CPPGRAD_UNARY_OPS (tensor/op_tables.h), on inputs from its domain column.
#define UNARY_CASE(name, Enum, dtypes, forward, saves, dA, domain, ...) {#name, [](const Tensor& a) { return a.name(); }, Domain::domain},
      CPPGRAD_UNARY_OPS(UNARY_CASE)
#undef UNARY_CASE
      {"unary minus", [](const Tensor& a) { return -a; }, Domain::Any},
      {"gelu approximate none", [](const Tensor& a) { return a.gelu("none"); }, Domain::Any},
      {"gelu approximate tanh", [](const Tensor& a) { return a.gelu("tanh"); }, Domain::Any},
      // The seeded draws keep every element farther than ε from the bounds (the kinks).
      {"clamp", [](const Tensor& a) { return a.clamp(-0.3, 0.4); }, Domain::Any},
      {"clamp min", [](const Tensor& a) { return clamp(a, 0.1); }, Domain::Any},
      {"clamp max", [](const Tensor& a) { return a.clamp(std::nullopt, -0.2); }, Domain::Any},
      {"square", [](const Tensor& a) { return a.square(); }, Domain::Any},
      {"pow 0", [](const Tensor& a) { return a.pow(0.0); }, Domain::Any},
      {"pow 1", [](const Tensor& a) { return a.pow(1.0); }, Domain::Any},
      {"pow 2", [](const Tensor& a) { return a.pow(2.0); }, Domain::Any},
      {"pow 3", [](const Tensor& a) { return a.pow(3.0); }, Domain::Any},
      {"pow -1", [](const Tensor& a) { return a.pow(-1.0); }, Domain::AwayFromZero},
      {"pow 0.5", [](const Tensor& a) { return a.pow(0.5); }, Domain::Positive},
      {"pow -1.5", [](const Tensor& a) { return a.pow(-1.5); }, Domain::Positive},
      {"pow 2.5", [](const Tensor& a) { return a.pow(2.5); }, Domain::Positive},
  };
}

}  // namespace

TEST_CASE("gradcheck unary: every op on a contiguous leaf") {
  uint64_t seed = 100;
  for (const UnaryCase& c : unary_cases()) {
    CAPTURE(c.name);
    Tensor x = make({3, 4}, seed++, c.domain);
    CHECK(check1(c.fn, x));
  }
}

TEST_CASE("gradcheck unary: every op on a non-contiguous leaf") {
  uint64_t seed = 200;
  for (const UnaryCase& c : unary_cases()) {
    CAPTURE(c.name);
    Tensor x = transposed(make({4, 3}, seed++, c.domain));
    REQUIRE_FALSE(x.is_contiguous());
    CHECK(check1(c.fn, x));
  }
}

TEST_CASE("gradcheck unary: every op on a strided slice and on a 0-d leaf") {
  uint64_t seed = 300;
  for (const UnaryCase& c : unary_cases()) {
    CAPTURE(c.name);
    Tensor x = make({3, 6}, seed++, c.domain);
    CHECK(check1([&](const Tensor& a) { return c.fn(a.slice(1, 1, 6, 2)); }, x));
    Tensor s = make({}, seed++, c.domain);
    CHECK(check1(c.fn, s));
  }
}

TEST_CASE("unary: each row's free function is its method, and its grad_fn carries the row's name") {
  Tensor x = test::positive_leaf({2, 3}, 350);  // every row is defined there (log, sqrt)
#define UNARY_FREE(row, ...)                                      \
  {                                                               \
    CAPTURE(#row);                                                \
    CHECK(test::values(cppgrad::row(x)) == test::values(x.row())); \
    CHECK(x.row().grad_fn()->op == #row);                         \
  }
  CPPGRAD_UNARY_OPS(UNARY_FREE)
#undef UNARY_FREE
}

TEST_CASE("gradcheck unary: chained ops") {
  Tensor x = test::leaf({2, 5}, 400);
  CHECK(check1([](const Tensor& a) { return a.tanh().exp().sigmoid(); }, x));
  CHECK(check1([](const Tensor& a) { return (a * a + 1.0).sqrt().log(); }, x));
  CHECK(check1([](const Tensor& a) { return a.gelu() * a.erf() + a.sigmoid().rsqrt(); }, x));
}

TEST_CASE("unary backward: hand-computed values") {
  Tensor x = tensor({0.5, 1.0, 4.0}, TensorOptions(kFloat64).requires_grad());
  auto grad_of = [&](const std::function<Tensor(const Tensor&)>& f) {
    return test::values(autograd::grad({f(x).sum()}, {x})[0]);
  };
  CHECK(grad_of([](const Tensor& a) { return a.sqrt(); }) == V{1 / (2 * std::sqrt(0.5)), 0.5, 0.25});
  CHECK(grad_of([](const Tensor& a) { return a.log(); }) == V{2, 1, 0.25});
  CHECK(grad_of([](const Tensor& a) { return a.pow(3.0); }) == V{0.75, 3, 48});
  CHECK(grad_of([](const Tensor& a) { return (a - 1.0).relu(); }) == V{0, 0, 1});  // 0 at the kink
  CHECK(grad_of([](const Tensor& a) { return (a - 1.0).abs(); }) == V{-1, 0, 1});
  // Inside [min, max] (bounds included, as PyTorch) the gradient passes; outside it is 0.
  CHECK(grad_of([](const Tensor& a) { return a.clamp(1.0, 3.0); }) == V{0, 1, 0});
  CHECK(grad_of([](const Tensor& a) { return a.sin(); }) == V{std::cos(0.5), std::cos(1.0), std::cos(4.0)});
  CHECK(grad_of([](const Tensor& a) { return a.cos(); }) == V{-std::sin(0.5), -std::sin(1.0), -std::sin(4.0)});
  std::vector<double> g = grad_of([](const Tensor& a) { return a.gelu(); });
  // d/dx x Φ(x) = Φ(x) + x φ(x), at x = 1: 0.841344746 + 0.241970725
  CHECK(g[1] == doctest::Approx(0.8413447460685429 + 0.24197072451914337).epsilon(1e-12));
}

// PyTorch's tanh approximation (torch.nn.functional.gelu(x, approximate="tanh")):
//   y  = ½x(1 + tanh u),  u = √(2/π)(x + 0.044715x³)
//   y' = ½(1 + tanh u) + ½x(1 − tanh² u)·√(2/π)(1 + 3·0.044715x²)
// The references are these formulas evaluated in float64 (Python's math module), not cppgrad.
TEST_CASE("gelu tanh approximation: values and gradients of PyTorch's formula") {
  const V xs{-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.5};
  const V y_ref{-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0,
                0.34571400982514394,    0.8411919906082768,   1.954597694087775,    3.499383802344626};
  const V dy_ref{-0.011584166630969516, -0.08296408384578255, 0.13263009646535764, 0.5,
                 0.8673699035346424,    1.0829640838457826,   1.0860992566236183,  1.002422643760117};
  Tensor x = tensor(xs, {8}).requires_grad_();
  Tensor y = x.gelu("tanh");
  Tensor dy = autograd::grad({y.sum()}, {x})[0];
  CHECK(test::max_abs_diff(test::values(y), y_ref) < 1e-15);  // tanh and exp round differently by a few ulp
  CHECK(test::max_abs_diff(test::values(dy), dy_ref) < 1e-15);
  // Float32 runs the same formula: within float32 rounding of the float64 values.
  CHECK(test::max_abs_diff(test::values(x.detach().to(kFloat32).gelu("tanh")), y_ref) < 1e-6);
  // It is not the exact GELU: at x = 1 the two differ by 1.5e-4.
  CHECK(std::abs(test::values(x.detach().gelu())[5] - y_ref[5]) > 1e-4);
  CHECK(test::contains(test::error_message([&] { x.gelu("erf"); }), "gelu: approximate must be \"none\" or \"tanh\""));
}
