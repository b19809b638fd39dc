// gradcheck: compares the gradients backward computes with central finite differences,
//   ∂f/∂x_j ≈ (f(x + ε e_j) − f(x − ε e_j)) / 2ε,
// in float64, as torch.autograd.gradcheck does. gradgradcheck does the same for the gradients
// themselves (backward run with create_graph=true), checking second derivatives.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "node.h"

namespace cppgrad {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  // Compare random projections vᵀJu instead of every entry of J: one backward and two forward
  // passes per input instead of one per element. For large inputs.
  bool fast_mode = false;
  uint64_t seed = 0;  // for fast mode's u and v, and gradgradcheck's output gradients
};

using GradcheckFunction = std::function<Tensor(const std::vector<Tensor>&)>;

// Inputs that require grad are checked; the others are held fixed. Every input that requires
// grad must be float64. Returns true, or throws cppgrad::Error naming the input, the element,
// and both values.
bool gradcheck(const GradcheckFunction& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});
bool gradgradcheck(const GradcheckFunction& fn, const std::vector<Tensor>& inputs,
                   const GradcheckOptions& options = {});

}  // namespace cppgrad
