// Uses the installed cppgrad through its umbrella header: a matmul (BLAS), a backward pass
// (autograd) and a printed tensor (fmt). Exits 0 when each gives the right answer. The umbrella
// header holds the core only: the program tools, the file formats (.npz, BPE) and Hugging
// Face's checkpoints are the other consumers' parts, and this one links none of their libraries.
// Nor oneDNN: without the onednn component autocast multiplies in float32 (its Auto kernel) and
// refuses to be told to use oneDNN.
#include <cppgrad/cppgrad.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using namespace cppgrad;
  Tensor x = tensor({{1, 2}, {3, 4}}, TensorOptions().requires_grad());
  Tensor w = tensor({0.5, -1}).reshape({2, 1});
  // y = sum((x w)^2), x w = [-1.5, -2.5], so y = 8.5 and dy/dx = 2 (x w) w^T.
  Tensor y = x.matmul(w).square().sum();
  y.backward();

  const std::vector<float> expected = {-1.5f, 3.0f, -2.5f, 5.0f};
  const std::vector<float> got = x.grad().to_vector<float>();
  bool ok = std::abs(y.item<float>() - 8.5f) < 1e-5f && got.size() == expected.size();
  for (size_t i = 0; ok && i < got.size(); ++i) ok = std::abs(got[i] - expected[i]) < 1e-5f;

  bool refused = false;
  try {
    autocast::set_kernel(autocast::Kernel::OneDnn);
  } catch (const Error&) {
    refused = true;
  }
  const bool float32_products = !autocast::has_onednn() && autocast::kernel() == autocast::Kernel::Float32 && refused;
  std::printf("autocast without cppgrad::onednn: %s (%s)\n", autocast::kernel_name(autocast::kernel()).data(),
              float32_products ? "ok" : "WRONG");
  ok = ok && float32_products;

  std::printf("y = %g\ndy/dx = %s\n%s\n", y.item<float>(), x.grad().str().c_str(), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
