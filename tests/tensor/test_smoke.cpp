#include <doctest/doctest.h>

#include "cppgrad.h"

using namespace cppgrad;

TEST_CASE("smoke: matmul of a 2x3 and 3x2") {
  Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
  Tensor b = tensor({{1, 0}, {0, 1}, {1, 1}});
  Tensor c = a.matmul(b);
  CHECK(c.shape() == Shape{2, 2});
  CHECK(c.to_vector<float>() == std::vector<float>{4, 5, 10, 11});
}
