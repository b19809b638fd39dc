// Adam's fast form (a queue of updates run in one parallel loop, vectorised: optim/fast/adam.h)
// against its reference loop (optim/adam.cpp), on the same parameters and gradients.
#include <doctest/doctest.h>

#include <vector>

#include "cppgrad.h"
#include "optim_helpers.h"

using namespace cppgrad;
using namespace cppgrad::optim;
using optimtest::max_abs_diff;

namespace {

// Five steps of a small model (a large parameter, across several of the fast form's 16384-element
// chunks, and a small one) with the optimizer make() builds; the parameters after.
template <class Make>
std::vector<Tensor> five_steps(bool reference, DType dtype, Make make) {
  ReferenceModeGuard mode(reference);
  Generator gen(5);
  std::vector<Tensor> params{randn({40000}, dtype, gen).requires_grad_(), randn({7, 3}, dtype, gen).requires_grad_()};
  auto opt = make(params);
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    Tensor loss = (params[0] * params[0]).sum() * 0.5 + (params[1].tanh() * 3.0).sum();
    loss.backward();
    opt.step();
  }
  return params;
}

}  // namespace

TEST_CASE("Adam's queued fast update equals its reference loop: Adam, AdamW, AMSGrad, float32 and float64") {
  for (DType dtype : {kFloat64, kFloat32}) {
    INFO("dtype ", dtype_name(dtype));
    auto adam = [](std::vector<Tensor> p) { return Adam(p, AdamOptions(0.1).weight_decay(0.01)); };
    auto adamw = [](std::vector<Tensor> p) { return AdamW(p, AdamWOptions(0.1).amsgrad(true)); };
    // The same operations on the same values in the same order, each correctly rounded (the
    // vector sqrt and division too, and the build forbids fused multiply-adds): equal in
    // practice. The tolerance is a margin of a few ulps of values of order 1.
    const double tolerance = dtype == kFloat64 ? 1e-14 : 1e-6;
    for (int which = 0; which < 2; ++which) {
      const char* name = which == 0 ? "Adam" : "AdamW with AMSGrad";
      INFO(name);
      std::vector<Tensor> fast = which == 0 ? five_steps(false, dtype, adam) : five_steps(false, dtype, adamw);
      std::vector<Tensor> reference = which == 0 ? five_steps(true, dtype, adam) : five_steps(true, dtype, adamw);
      for (size_t i = 0; i < fast.size(); ++i) CHECK(max_abs_diff(fast[i], reference[i]) <= tolerance);
    }
  }
}
