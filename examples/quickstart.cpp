// Quickstart: fit a small MLP to y = x² / 3 + tanh(2x) with Adam. The README shows this file.
#include <fmt/core.h>

#include "cppgrad.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

int main() {
  manual_seed(0);
  Tensor x = rand({256, 1}) * 6.0 - 3.0;     // (256, 1) inputs in [-3, 3)
  Tensor y = x * x / 3.0 + (x * 2.0).tanh();  // (256, 1) targets

  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(1, 64), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(64, 64), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(64, 1));
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));

  for (int step = 1; step <= 500; ++step) {
    Tensor loss = F::mse_loss(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 100 == 0) fmt::print("step {:>3}  loss {:.5f}\n", step, loss.item());
  }
  nn::save(*model, "quickstart.safetensors");  // reload with nn::load(*model, path)
  return 0;
}
