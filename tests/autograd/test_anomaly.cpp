// Anomaly mode: a backward step whose gradient holds NaN or Inf throws, naming the forward op
// and the shapes of its inputs, so the op at fault can be found in a large graph.
#include <doctest/doctest.h>

#include <cmath>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using test::contains;
using test::error_message;

TEST_CASE("anomaly: sqrt of 0 names sqrt and its input shape") {
  Tensor x = tensor({0.0, 1.0, 4.0}, TensorOptions(kFloat64).requires_grad());
  Tensor y = (x.sqrt() * 2.0).sum();  // d/dx √x = 1 / (2√x): Inf at 0
  CHECK(std::isfinite(y.item()));     // the forward is fine
  AnomalyModeGuard anomaly;
  std::string msg = error_message([&] { y.backward(); });
  CHECK(contains(msg, "anomaly"));
  CHECK(contains(msg, "'sqrt'"));
  CHECK(contains(msg, "[3]"));
  CHECK(contains(msg, "NaN or Inf"));
}

TEST_CASE("anomaly: log of 0 and 0 over 0 name the op and all input shapes") {
  AnomalyModeGuard anomaly;
  Tensor x = zeros({2, 2}, TensorOptions(kFloat64).requires_grad());
  std::string msg = error_message([&] { x.log().sum().backward(); });
  CHECK(contains(msg, "'log'"));
  CHECK(contains(msg, "[2,2]"));

  Tensor a = zeros({3}, TensorOptions(kFloat64).requires_grad());
  Tensor b = zeros({2, 1}, TensorOptions(kFloat64).requires_grad());
  msg = error_message([&] { (a / b).sum().backward(); });
  CHECK(contains(msg, "'div'"));
  CHECK(contains(msg, "[3], [2,1]"));
}

TEST_CASE("anomaly: off by default and restored after the guard") {
  CHECK_FALSE(autograd::AnomalyMode::is_enabled());
  {
    AnomalyModeGuard anomaly;
    CHECK(autograd::AnomalyMode::is_enabled());
    {
      AnomalyModeGuard nested;
      CHECK(autograd::AnomalyMode::is_enabled());
    }
    CHECK(autograd::AnomalyMode::is_enabled());
    // A finite backward runs as usual.
    Tensor x = tensor({1.0, 4.0}, TensorOptions(kFloat64).requires_grad());
    x.sqrt().sum().backward();
    CHECK(test::values(x.grad()) == std::vector<double>{0.5, 0.25});
  }
  CHECK_FALSE(autograd::AnomalyMode::is_enabled());
  // Without it the Inf simply arrives in .grad.
  Tensor x = tensor({0.0, 1.0}, TensorOptions(kFloat64).requires_grad());
  x.sqrt().sum().backward();
  CHECK(std::isinf(x.grad().at<double>({0})));
  CHECK(x.grad().at<double>({1}) == 0.5);
}
