// gradcheck of the binary elementwise ops, with every broadcasting pattern, non-contiguous
// operands, scalar operands, one side not requiring grad, and the same tensor on both sides.
#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using test::check1;
using test::check2;
using test::leaf;
using test::transposed;
using V = std::vector<double>;

namespace {

using test::Domain;

struct BinaryCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;
  Domain rhs_domain;  // div: Positive keeps the divisor away from 0
};

std::vector<BinaryCase> binary_cases() {
  return {
  // Every row of CPPGRAD_BINARY_OPS (tensor/op_tables.h), as a function and as a method.
#define BINARY_CASE(name, Enum, forward, saves, dA, dB, domain)                                  \
      {#name, [](const Tensor& a, const Tensor& b) { return cppgrad::name(a, b); }, Domain::domain}, \
      {#name " method", [](const Tensor& a, const Tensor& b) { return a.name(b); }, Domain::domain},
      CPPGRAD_BINARY_OPS(BINARY_CASE)
#undef BINARY_CASE
      {"a + b", [](const Tensor& a, const Tensor& b) { return a + b; }, Domain::Any},
      {"a - b", [](const Tensor& a, const Tensor& b) { return a - b; }, Domain::Any},
      {"a * b", [](const Tensor& a, const Tensor& b) { return a * b; }, Domain::Any},
      {"a / b", [](const Tensor& a, const Tensor& b) { return a / b; }, Domain::Positive},
  };
}

Tensor rhs(const Shape& shape, uint64_t seed, Domain domain) { return test::leaf_in(domain, shape, seed); }

}  // namespace

TEST_CASE("gradcheck binary: same shapes and every broadcast pattern") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {3, 4}}, {{3, 4}, {4}},    {{4}, {3, 4}},    {{3, 1}, {1, 4}}, {{2, 3, 4}, {3, 1}},
      {{1, 3, 1}, {2, 1, 4}}, {{}, {3, 4}}, {{3, 4}, {}},    {{}, {}},
  };
  uint64_t seed = 500;
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& [sa, sb] : shapes) {
      CAPTURE(c.name);
      CAPTURE(shape_str(sa));
      CAPTURE(shape_str(sb));
      Tensor a = leaf(sa, seed++);
      Tensor b = rhs(sb, seed++, c.rhs_domain);
      CHECK(check2(c.fn, a, b));
    }
  }
}

TEST_CASE("gradcheck binary: non-contiguous operands") {
  uint64_t seed = 600;
  for (const BinaryCase& c : binary_cases()) {
    CAPTURE(c.name);
    Tensor a = transposed(leaf({4, 3}, seed++));                 // [3,4], strides [1,3]
    Tensor b = transposed(rhs({4, 3}, seed++, c.rhs_domain));  // [3,4], strides [1,3]
    CHECK(check2(c.fn, a, b));
    Tensor row = rhs({4}, seed++, c.rhs_domain);
    CHECK(check2(c.fn, a, row));
    // A strided slice broadcast against a transposed leaf.
    Tensor wide = rhs({2, 8}, seed++, c.rhs_domain);
    CHECK(check2([&](const Tensor& x, const Tensor& y) { return c.fn(x, y.slice(1, 0, 8, 2).select(0, 1)); }, a,
                 wide));
  }
}

TEST_CASE("gradcheck binary: one operand without grad and both operands the same tensor") {
  uint64_t seed = 700;
  for (const BinaryCase& c : binary_cases()) {
    CAPTURE(c.name);
    Tensor a = leaf({3, 4}, seed++);
    Tensor b = rhs({4}, seed++, c.rhs_domain).detach();  // a constant
    CHECK(check2(c.fn, a, b));
    Tensor p = rhs({3, 4}, seed++, c.rhs_domain);
    CHECK(check1([&](const Tensor& x) { return c.fn(x, x); }, p));
    Tensor k = leaf({3, 4}, seed++).detach();
    Tensor q = rhs({1, 4}, seed++, c.rhs_domain);
    CHECK(check1([&](const Tensor& y) { return c.fn(k, y); }, q));  // only the right side checked
  }
}

TEST_CASE("gradcheck binary: scalar forms") {
  Tensor x = test::positive_leaf({3, 4}, 800);
  CHECK(check1([](const Tensor& a) { return a + 2.0; }, x));
  CHECK(check1([](const Tensor& a) { return 2.0 + a; }, x));
  CHECK(check1([](const Tensor& a) { return a - 2.0; }, x));
  CHECK(check1([](const Tensor& a) { return 2.0 - a; }, x));
  CHECK(check1([](const Tensor& a) { return a * -3.0; }, x));
  CHECK(check1([](const Tensor& a) { return 3.0 * a; }, x));
  CHECK(check1([](const Tensor& a) { return a / 2.0; }, x));
  CHECK(check1([](const Tensor& a) { return 2.0 / a; }, x));
  CHECK(check1([](const Tensor& a) { return (1.0 - a) * (a + 0.5) / (3.0 + a); }, transposed(x)));
  // The scalar keeps the tensor's dtype.
  CHECK((x * 2.0).dtype() == kFloat64);
  CHECK((tensor({1.0}) * 2.0).dtype() == kFloat32);
}

TEST_CASE("binary backward: hand-computed values with broadcasting") {
  Tensor a = tensor({{1.0, 2.0}, {3.0, 4.0}}, TensorOptions(kFloat64).requires_grad());
  Tensor b = tensor({2.0, 0.5}, TensorOptions(kFloat64).requires_grad());
  (a / b).sum().backward();  // d/da = 1/b per column; d/db = -Σ_rows a / b²
  CHECK(test::values(a.grad()) == V{0.5, 2, 0.5, 2});
  CHECK(test::values(b.grad()) == V{-4.0 / 4, -6.0 / 0.25});

  // maximum and minimum: the winner takes the gradient, a tie splits it in half.
  Tensor p = tensor({1.0, 5.0, 3.0}, TensorOptions(kFloat64).requires_grad());
  Tensor q = tensor({2.0, 4.0, 3.0}, TensorOptions(kFloat64).requires_grad());
  maximum(p, q).sum().backward();
  CHECK(test::values(p.grad()) == V{0, 1, 0.5});
  CHECK(test::values(q.grad()) == V{1, 0, 0.5});
  p.zero_grad();
  q.zero_grad();
  minimum(p, q).sum().backward();
  CHECK(test::values(p.grad()) == V{1, 0, 0.5});
  CHECK(test::values(q.grad()) == V{0, 1, 0.5});
}

TEST_CASE("gradcheck fast mode on larger inputs") {
  GradcheckOptions fast;
  fast.fast_mode = true;
  fast.seed = 7;
  Tensor a = leaf({48, 40}, 900);
  Tensor b = leaf({40}, 901);
  CHECK(check2([](const Tensor& x, const Tensor& y) { return (x * y).tanh() + x.exp() / (1.0 + y * y); }, a, b,
               fast));
  Tensor w = leaf({40, 24}, 902);
  CHECK(check2([](const Tensor& x, const Tensor& y) { return x.matmul(y).softmax(1); }, a, w, fast));
  CHECK(check1([](const Tensor& x) { return x.t().log_softmax(0).sum({1}); }, transposed(leaf({40, 48}, 903)),
               fast));
}
