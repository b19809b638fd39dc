#include <doctest/doctest.h>

#include "cppgrad.h"

using namespace cppgrad;

TEST_CASE("smoke: b = a + a; c = b + b gives dc/da = 4") {
  Tensor a = tensor({1.0, 2.0}, TensorOptions(kFloat64).requires_grad());
  Tensor b = a + a;
  Tensor c = b + b;
  c.sum().backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{4, 4});
}
