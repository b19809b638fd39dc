// Second derivatives: gradgradcheck (finite differences of the gradients computed with
// create_graph=true) for every op whose backward is itself differentiable, plus hand-computed
// second and third derivatives, and gradcheck failing loudly on a deliberately wrong backward.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "cppgrad.h"
#include "helpers.h"
#include "tensor/kernels.h"

using namespace cppgrad;
using test::contains;
using test::error_message;
using test::gradgrad1;
using test::gradgrad2;
using test::index;
using test::leaf;
using test::positive_leaf;
using test::transposed;

TEST_CASE("gradgradcheck: matmul at several ranks") {
  CHECK(gradgrad2([](const Tensor& a, const Tensor& b) { return a.matmul(b); }, leaf({2, 3}, 4000), leaf({3, 2}, 4001)));
  CHECK(gradgrad2([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, leaf({3}, 4002), leaf({3, 2}, 4003)));
  CHECK(gradgrad2([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, leaf({2, 2, 3}, 4004),
                  leaf({3, 2}, 4005)));
  CHECK(gradgrad1([](const Tensor& a) { return a.matmul(a.t()); }, transposed(leaf({3, 2}, 4006))));
}

TEST_CASE("gradgradcheck: binary ops with broadcasting") {
  Tensor a = leaf({2, 3}, 4100);
  Tensor b = leaf({3}, 4101);
  // Every row of CPPGRAD_BINARY_OPS (tensor/op_tables.h), B drawn from its domain column.
  uint64_t seed = 4110;
#define BINARY_GRADGRAD(name, Enum, forward, saves, dA, dB, domain)                                                   \
  {                                                                                                                   \
    CAPTURE(#name);                                                                                                   \
    CHECK(gradgrad2([](const Tensor& x, const Tensor& y) { return cppgrad::name(x, y); }, a,                          \
                    test::leaf_in(test::Domain::domain, {3}, seed++)));                                               \
  }
  CPPGRAD_BINARY_OPS(BINARY_GRADGRAD)
#undef BINARY_GRADGRAD
  CHECK(gradgrad2([](const Tensor& x, const Tensor& y) { return (x + y) * (x - y); }, a, b));
  CHECK(gradgrad2([](const Tensor& x, const Tensor& y) { return maximum(x, y) * minimum(x, y); }, a, b));
  CHECK(gradgrad1([](const Tensor& x) { return 2.0 / x + x * 3.0 - 1.0; }, positive_leaf({2, 3}, 4103)));
}

TEST_CASE("gradgradcheck: unary ops") {
  Tensor x = leaf({2, 3}, 4200);
  Tensor p = positive_leaf({2, 3}, 4201);
  Tensor z = test::away_from_zero_leaf({2, 3}, 4202);
  // Every row of CPPGRAD_UNARY_OPS (tensor/op_tables.h), on inputs from its domain column.
  uint64_t seed = 4210;
#define UNARY_GRADGRAD(name, Enum, dtypes, forward, saves, dA, domain, ...)                               \
  {                                                                                                       \
    CAPTURE(#name);                                                                                       \
    CHECK(gradgrad1([](const Tensor& a) { return a.name(); }, test::leaf_in(test::Domain::domain, {2, 3}, seed++))); \
  }
  CPPGRAD_UNARY_OPS(UNARY_GRADGRAD)
#undef UNARY_GRADGRAD
  CHECK(gradgrad1([](const Tensor& a) { return a.gelu("tanh"); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.clamp(-0.3, 0.4) * a; }, x));
  CHECK(gradgrad1([](const Tensor& a) { return -a.neg(); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.abs() * a; }, z));
  CHECK(gradgrad1([](const Tensor& a) { return a.relu() * a; }, z));
  CHECK(gradgrad1([](const Tensor& a) { return a.sign() + a; }, z));
  for (double e : {0.0, 1.0, 2.0, 3.0, -1.0, 0.5, -1.5}) {
    CAPTURE(e);
    CHECK(gradgrad1([e](const Tensor& a) { return a.pow(e); }, p));
  }
}

TEST_CASE("gradgradcheck: reductions and softmax") {
  Tensor x = leaf({2, 3}, 4300);
  CHECK(gradgrad1([](const Tensor& a) { return a.sum(); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return (a * a).sum({1}); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.mean(); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return (a * a).mean({0}, true); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.var({1}); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.var({}, 0, true); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.max() * a.min(); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.max(1).values.exp(); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.min(0, true).values * a; }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.softmax(1); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.softmax(0); }, transposed(leaf({3, 2}, 4301))));
  CHECK(gradgrad1([](const Tensor& a) { return a.log_softmax(1); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return log_softmax(a, 0).exp(); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return sum_to(a * a, {3}); }, x));
}

TEST_CASE("gradgradcheck: views and copies") {
  Tensor x = leaf({2, 3}, 4400);
  CHECK(gradgrad1([](const Tensor& a) { return a.reshape({3, 2}) * a.view({3, 2}); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.t() * a.transpose(0, 1); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.unsqueeze(0).mT().exp(); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.permute({1, 0}).exp(); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.unsqueeze(0).expand({2, 2, 3}) * a; }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.slice(1, 0, 3, 2) * a.narrow(1, 1, 2); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.select(0, 1) * a.select(1, 2).sum(); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.unsqueeze(2).squeeze().flatten() * a.flatten(); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.t().contiguous() * a.clone().t(); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.split(1, 0)[0] * a.chunk(2, 0)[1]; }, x));
  // Through float32 and back: a larger step keeps the rounding (~1e-7) out of the differences.
  GradcheckOptions coarse;
  coarse.eps = 1e-2;
  coarse.atol = 1e-4;
  CHECK(gradgrad1([](const Tensor& a) { return (a.to(kFloat32) * a.to(kFloat32)).to(kFloat64); }, x, coarse));
}

TEST_CASE("gradgradcheck: joining and indexing") {
  Tensor x = leaf({3, 2}, 4500);
  Tensor y = leaf({1, 2}, 4501);
  CHECK(gradgrad2([](const Tensor& a, const Tensor& b) { return cat({a, b}, 0) * cat({b, a}, 0); }, x, y));
  CHECK(gradgrad2([](const Tensor& a, const Tensor& b) { return stack({a, b.expand({3, 2})}, 1).pow(2); }, x, y));
  CHECK(gradgrad1([](const Tensor& a) { return a.index_select(0, index({2, 0, 2})).pow(2); }, x));
  CHECK(gradgrad1([](const Tensor& a) { return a.gather(1, index({1, 1, 0, 1, 0, 0}, {3, 2})) * a; }, x));
  CHECK(gradgrad2([](const Tensor& a, const Tensor& b) { return index_add(a, 0, index({1, 1}), b * b); }, x,
                  leaf({2, 2}, 4502)));
  CHECK(gradgrad2([](const Tensor& a, const Tensor& b) { return scatter_add(a * a, 1, index({1, 0, 0}, {3, 1}), b * b); },
                  x, leaf({3, 1}, 4503)));
  CHECK(gradgrad1([](const Tensor& a) { return slice_scatter(a * a, {3, 5}, 1, 1, 3); }, x));
  Tensor m = test::mask({{1, 0}, {0, 0}, {1, 1}});
  CHECK(gradgrad2([&](const Tensor& a, const Tensor& b) { return where(m, a * a, b * a); }, x, y));
  CHECK(gradgrad1([&](const Tensor& a) { return a.masked_fill(m, 2.0) * a; }, x));
}

TEST_CASE("gradgradcheck: in-place ops inside a graph") {
  Tensor x = leaf({2, 3}, 4550);
  Tensor y = positive_leaf({3}, 4551);
  Tensor m = test::mask({{1, 0, 0}, {0, 1, 1}});
  CHECK(gradgrad2(
      [](const Tensor& a, const Tensor& b) {
        Tensor t = a * 1.5;
        t.mul_(a);
        t.add_(b, 2.0);
        t.sub_(a * b);
        t.div_(b);
        return t;
      },
      x, y));
  CHECK(gradgrad2(
      [&](const Tensor& a, const Tensor& b) {
        Tensor t = a * 1.0;
        t.masked_fill_(m, 1.0);
        t.mul_(t);
        Tensor u = zeros({2, 3}, kFloat64);
        u.copy_(t * b);
        u.add_(3.0);
        return u;
      },
      x, y));
  CHECK(gradgrad1(
      [](const Tensor& a) {
        Tensor t = a * 1.0;
        t.fill_(2.0);
        t.mul_(a);
        Tensor u = a * 1.0;
        u.zero_();
        u.add_(t * a);
        return u;
      },
      x));
}

TEST_CASE("second and third derivatives by hand") {
  Tensor x = tensor({0.5, -1.0}, TensorOptions(kFloat64).requires_grad());
  // d²/dx² tanh x = -2 tanh x (1 - tanh² x)
  Tensor g1 = autograd::grad({x.tanh().sum()}, {x}, {}, false, true)[0];
  Tensor g2 = autograd::grad({g1.sum()}, {x})[0];
  for (int i = 0; i < 2; ++i) {
    double t = std::tanh(x.at<double>({i}));
    CHECK(g2.at<double>({i}) == doctest::Approx(-2 * t * (1 - t * t)).epsilon(1e-12));
  }
  // x⁴: 4x³, 12x², 24x
  Tensor y = tensor({2.0}, TensorOptions(kFloat64).requires_grad());
  Tensor d1 = autograd::grad({y.pow(4.0).sum()}, {y}, {}, false, true)[0];
  Tensor d2 = autograd::grad({d1.sum()}, {y}, {}, false, true)[0];
  Tensor d3 = autograd::grad({d2.sum()}, {y})[0];
  CHECK(d1.item() == doctest::Approx(32));
  CHECK(d2.item() == doctest::Approx(48));
  CHECK(d3.item() == doctest::Approx(48));
}

namespace {
// x², recorded with a wrong backward (3x instead of 2x).
Tensor bad_square(const Tensor& x) {
  return autograd::record("bad_square", kernels::pow(x, 2), {x}, {x},
                          [](const Tensor& g, const autograd::Saved& s) -> autograd::Grads { return {g * 3.0 * s[0]}; });
}
// x², with the right first derivative that forgets it depends on x (a wrong second derivative).
Tensor detached_square(const Tensor& x) {
  return autograd::record("detached_square", kernels::pow(x, 2), {x}, {x},
                          [](const Tensor& g, const autograd::Saved& s) -> autograd::Grads {
                            return {g * 2.0 * s[0].detach()};
                          });
}
}  // namespace

TEST_CASE("gradcheck fails on a wrong backward and names the input and both values") {
  Tensor x = tensor({1.5, -2.0}, TensorOptions(kFloat64).requires_grad());
  std::string msg = error_message([&] { test::check1(bad_square, x); });
  CHECK(contains(msg, "gradcheck"));
  CHECK(contains(msg, "input 0"));
  CHECK(contains(msg, "analytic 4.5"));  // 3 · 1.5
  CHECK(contains(msg, "numerical 3"));   // 2 · 1.5 (to ~1e-10)

  Tensor other = leaf({2}, 4600);
  msg = error_message([&] { gradcheck([](const std::vector<Tensor>& in) { return in[0] * bad_square(in[1]); }, {other, x}); });
  CHECK(contains(msg, "input 1"));

  GradcheckOptions fast;
  fast.fast_mode = true;
  msg = error_message([&] { test::check1(bad_square, x, fast); });
  CHECK(contains(msg, "fast mode"));
  CHECK(contains(msg, "input 0"));
  CHECK(contains(msg, "analytic"));
  CHECK(contains(msg, "numerical"));

  CHECK(test::check1(detached_square, x));  // the first derivative is right...
  msg = error_message([&] { test::gradgrad1(detached_square, x); });
  CHECK(contains(msg, "gradcheck"));  // ...the second is not
  CHECK(contains(msg, "input 0"));
}

TEST_CASE("gradcheck rejects inputs it cannot check") {
  Tensor f = tensor({1.0, 2.0}).requires_grad_();  // float32
  std::string msg = error_message([&] { test::check1([](const Tensor& a) { return a * 2.0; }, f); });
  CHECK(contains(msg, "float64"));
  Tensor c = tensor({1.0, 2.0}, kFloat64);  // requires no grad
  msg = error_message([&] { test::check1([](const Tensor& a) { return a * 2.0; }, c); });
  CHECK(contains(msg, "nothing to check"));
}

// gradcheck moves each input by ±ε and must put it back exactly: x + ε − 2ε + ε is not x in
// floating point (for 1/3, 2.7, -1e-3 and 0.7 below it is not), so it writes the saved bits back;
// and it writes element by element, so no version counter moves (a graph that saved an input
// stays usable after the check).
TEST_CASE("gradcheck and gradgradcheck leave their inputs bit-identical with unchanged versions") {
  auto bits = [](const Tensor& t) {
    std::vector<double> v = test::values(t);
    std::vector<uint64_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(double));
    return b;
  };
  auto f = [](const std::vector<Tensor>& in) { return (in[0] * in[1]).tanh() + in[0].square(); };
  for (bool fast : {false, true}) {
    CAPTURE(fast);
    GradcheckOptions options;
    options.fast_mode = fast;
    Tensor x = tensor({{1.0 / 3.0, 2.7, -1e-3}, {0.7, 3.3, 0.1}}, TensorOptions(kFloat64).requires_grad());
    Tensor y = test::transposed(tensor({{0.25, -1.5}, {2.0 / 3.0, 0.3}, {5.1, -0.9}}, kFloat64));  // strided
    REQUIRE_FALSE(y.is_contiguous());
    Tensor saved = x.exp();  // a graph that saved x: it must still run after the checks
    const auto x_bits = bits(x), y_bits = bits(y);
    const uint64_t x_version = x.version(), y_version = y.version();
    CHECK(gradcheck(f, {x, y}, options));
    CHECK(gradgradcheck(f, {x, y}, options));
    CHECK(bits(x) == x_bits);
    CHECK(bits(y) == y_bits);
    CHECK(x.version() == x_version);
    CHECK(y.version() == y_version);
    CHECK_FALSE(x.grad().defined());  // nor do they write .grad
    saved.sum().backward();
    CHECK(test::values(x.grad()) == test::values(saved));
  }
}
