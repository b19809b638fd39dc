// A first look at cppgrad: build a small graph, run backward, read the gradients.
#include <fmt/core.h>

#include "cppgrad.h"

using namespace cppgrad;

int main() {
  manual_seed(0);
  Tensor x = randn({3, 4}, TensorOptions().requires_grad());
  Tensor w = randn({4, 2}, TensorOptions().requires_grad());
  Tensor y = x.matmul(w).tanh();  // (3, 4) @ (4, 2) -> (3, 2)
  Tensor loss = (y * y).mean();
  loss.backward();
  fmt::print("x = {}\nw = {}\ny = tanh(x @ w) = {}\nloss = mean(y²) = {:.6f}\n", x, w, y, loss.item());
  fmt::print("dloss/dw = {}\n", w.grad());
  fmt::print("the graph's last node: {}\n", loss.grad_fn()->name());
  return 0;
}
