// Gradient clipping: by the joint L2 norm of all gradients, and by value.
#include <doctest/doctest.h>

#include <cmath>

#include "cppgrad.h"
#include "optim_helpers.h"

using namespace cppgrad;
using namespace cppgrad::optim;
using optimtest::check_values;
using optimtest::param;
using optimtest::values;

namespace {

// Gives `p` the gradient `g` through backward of Σ p·g.
void give_grad(const Tensor& p, const std::vector<double>& g) {
  (p * tensor(g, p.shape()).to(p.dtype())).sum().backward();
}

double joint_norm(const std::vector<Tensor>& params) {
  double sq = 0.0;
  for (const Tensor& p : params)
    if (p.grad().defined())
      for (double v : values(p.grad())) sq += v * v;
  return std::sqrt(sq);
}

}  // namespace

TEST_CASE("clip_grad_norm_ scales all gradients together down to max_norm") {
  Tensor a = param({0.0, 0.0}), b = param({0.0, 0.0, 0.0}), none = param({1.0});
  give_grad(a, {3.0, -4.0});
  give_grad(b, {12.0, 0.0, 0.0});  // joint norm √(9 + 16 + 144) = 13
  const double before = clip_grad_norm_({a, b, none}, 6.5);
  CHECK(before == doctest::Approx(13.0).epsilon(1e-15));
  CHECK(joint_norm({a, b}) == doctest::Approx(6.5).epsilon(1e-6));  // within PyTorch's 1e-6 guard
  // Every gradient is scaled by the same factor, max_norm / (norm + 1e-6): direction kept.
  const double coef = 6.5 / (13.0 + 1e-6);
  check_values(a.grad(), {3.0 * coef, -4.0 * coef});
  check_values(b.grad(), {12.0 * coef, 0.0, 0.0});
  CHECK_FALSE(none.grad().defined());
}

TEST_CASE("clip_grad_norm_ leaves gradients below max_norm untouched") {
  Tensor a = param({0.0, 0.0});
  give_grad(a, {0.3, -0.4});
  Tensor grad_before = a.grad();
  CHECK(clip_grad_norm_({a}, 1.0) == doctest::Approx(0.5));
  CHECK(a.grad().is_same(grad_before));
  check_values(a.grad(), {0.3, -0.4}, 0.0);
  // At exactly max_norm the 1e-6 guard scales by a factor just under 1: the norm stays put.
  CHECK(clip_grad_norm_({a}, 0.5) == doctest::Approx(0.5));
  CHECK(joint_norm({a}) == doctest::Approx(0.5).epsilon(1e-5));
}

TEST_CASE("clip_grad_norm_ with no gradients returns zero") {
  Tensor a = param({1.0, 2.0});
  CHECK(clip_grad_norm_({a}, 1.0) == 0.0);
  CHECK(clip_grad_norm_({}, 1.0) == 0.0);
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("clip_grad_norm_ on float32 gradients keeps their dtype") {
  Tensor a = zeros({4}, TensorOptions(kFloat32).requires_grad());
  give_grad(a, {1.0, 1.0, 1.0, 1.0});  // norm 2
  CHECK(clip_grad_norm_({a}, 1.0) == doctest::Approx(2.0));
  CHECK(a.grad().dtype() == kFloat32);
  check_values(a.grad(), {0.5, 0.5, 0.5, 0.5}, 1e-6);
}

TEST_CASE("clip_grad_norm_ then a step moves the parameters by at most lr times max_norm") {
  Tensor a = param({1.0, 1.0});
  optim::SGD opt({a}, SGDOptions(0.1));
  give_grad(a, {30.0, 40.0});
  clip_grad_norm_({a}, 1.0);
  opt.step();
  check_values(a, {1.0 - 0.1 * 0.6, 1.0 - 0.1 * 0.8}, 1e-6);
}

TEST_CASE("clip_grad_value_ clamps each element into the symmetric interval") {
  Tensor a = param({0.0, 0.0, 0.0, 0.0}), b = param({0.0}), none = param({0.0});
  give_grad(a, {-3.0, -0.5, 0.25, 7.0});
  give_grad(b, {-1.0});
  clip_grad_value_({a, b, none}, 1.0);
  check_values(a.grad(), {-1.0, -0.5, 0.25, 1.0}, 0.0);
  check_values(b.grad(), {-1.0}, 0.0);
  CHECK_FALSE(none.grad().defined());
  clip_grad_value_({a}, 0.0);
  check_values(a.grad(), {0.0, 0.0, 0.0, 0.0}, 0.0);
}

TEST_CASE("clipping rejects a non-positive max_norm and a negative clip_value") {
  Tensor a = param({0.0});
  give_grad(a, {1.0});
  CHECK(optimtest::contains(optimtest::error_message([&] { clip_grad_norm_({a}, 0.0); }), "max_norm"));
  CHECK(optimtest::contains(optimtest::error_message([&] { clip_grad_norm_({a}, -1.0); }), "max_norm"));
  CHECK(optimtest::contains(optimtest::error_message([&] { clip_grad_value_({a}, -0.1); }), "clip_value"));
  check_values(a.grad(), {1.0}, 0.0);
}

TEST_CASE("clipping changes the gradients in place: a handle taken before sees the clipped values") {
  Tensor a = param({0.0, 0.0});
  give_grad(a, {3.0, -4.0});
  Tensor held = a.grad();  // as PyTorch's g = p.grad, then clip_grad_norm_(...), then g
  clip_grad_norm_({a}, 1.0);
  CHECK(a.grad().is_same(held));
  check_values(held, {3.0 / (5.0 + 1e-6), -4.0 / (5.0 + 1e-6)});
  clip_grad_value_({a}, 0.5);
  CHECK(a.grad().is_same(held));
  check_values(held, {0.5, -0.5});
}

TEST_CASE("clipping a gradient two parameters share changes it once") {
  Tensor a = param({0.0, 0.0}), b = param({0.0, 0.0});
  Tensor g = tensor(std::vector<double>{3.0, -4.0}, {2});
  a.set_grad(g);
  b.set_grad(g);
  REQUIRE(a.grad().is_same(b.grad()));
  const double norm = clip_grad_norm_({a, b}, 1.0);
  CHECK(norm == doctest::Approx(std::sqrt(50.0)).epsilon(1e-15));  // counted once per parameter, as PyTorch does
  const double coef = 1.0 / (std::sqrt(50.0) + 1e-6);
  check_values(a.grad(), {3.0 * coef, -4.0 * coef});  // not coef²
  check_values(b.grad(), {3.0 * coef, -4.0 * coef});
  clip_grad_value_({a, b}, 0.1);
  check_values(a.grad(), {0.1, -0.1});
  check_values(b.grad(), {0.1, -0.1});
}

TEST_CASE("clipping an expanded gradient scales each element once") {
  Tensor a = param({0.0, 0.0, 0.0, 0.0});
  Tensor one = full({1}, 2.0, kFloat64);
  a.set_grad(one.expand({4}));  // four elements, one number in memory
  CHECK(clip_grad_norm_({a}, 1.0) == doctest::Approx(4.0));
  check_values(a.grad(), {2.0 / (4.0 + 1e-6), 2.0 / (4.0 + 1e-6), 2.0 / (4.0 + 1e-6), 2.0 / (4.0 + 1e-6)});
  check_values(one, {2.0});  // the tensor it was expanded from is not written through
}

TEST_CASE("clip_grad_norm_ with a NaN gradient makes every gradient NaN, as PyTorch's does") {
  Tensor a = param({0.0, 0.0}), b = param({0.0, 0.0, 0.0});
  give_grad(a, {std::nan(""), 1.0});
  give_grad(b, {1.0, 2.0, -2.0});
  CHECK(std::isnan(clip_grad_norm_({a, b}, 1.0)));
  for (double v : values(a.grad())) CHECK(std::isnan(v));
  for (double v : values(b.grad())) CHECK(std::isnan(v));  // once left as they were: only the norm said so
}

TEST_CASE("clipping refuses an undefined tensor among the parameters") {
  Tensor a = param({0.0});
  CHECK_THROWS_WITH_AS(clip_grad_norm_({a, Tensor()}, 1.0), doctest::Contains("parameter 1 of 2 is an undefined tensor"),
                       Error);
  CHECK_THROWS_WITH_AS(clip_grad_value_({Tensor()}, 1.0), doctest::Contains("parameter 0 of 1"), Error);
}
