// A differentiable op written outside the library, with autograd::Function: a swish activation,
// y = x · σ(β x), whose backward we write ourselves. The program checks the backward with
// gradcheck and gradgradcheck, then trains a small network that uses it, and exits non-zero if
// anything is off (CTest runs it). See docs/custom-ops.md.
#include <fmt/core.h>

#include "cppgrad.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

// The op: forward and backward side by side, as the library's own ops are written.
struct Swish : autograd::Function<Swish> {
  // y = x · σ(β x)
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x, double beta) {
    ctx.save_for_backward({x});      // checked against in-place changes when backward reads it
    ctx.saved_data["beta"] = beta;   // a plain value
    return x * (x * beta).sigmoid();
  }
  // dx = dy · (σ + β x σ (1 − σ)),  σ = σ(β x); written with cppgrad ops, so it is differentiable too
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& grad_outputs) {
    Tensor x = ctx.get_saved_variables()[0];
    const double beta = ctx.saved_data["beta"].to_double();
    Tensor s = (x * beta).sigmoid();
    return {grad_outputs[0] * (s + x * beta * s * (1.0 - s)), Tensor()};  // none for beta, a number
  }
};

// A module around it, so it slots into Sequential.
struct SwishLayer : nn::UnaryModule {
  explicit SwishLayer(double beta) : beta(beta) {}
  Tensor forward(const Tensor& x) override { return Swish::apply(x, beta); }
  std::string extra_repr() const override { return fmt::format("beta={}", beta); }
  double beta;
};

int main() {
  // 1. The backward against finite differences, first and second derivatives (float64).
  Generator gen(0);
  Tensor x = randn({4, 3}, kFloat64, gen).requires_grad_();
  auto swish = [](const std::vector<Tensor>& in) { return Swish::apply(in[0], 1.7); };
  bool first = gradcheck(swish, {x}), second = gradgradcheck(swish, {x});
  fmt::print("gradcheck {}  gradgradcheck {}  grad_fn {}\n", first ? "ok" : "FAILED", second ? "ok" : "FAILED",
             Swish::apply(x, 1.7).grad_fn()->name());

  // 2. Train with it: fit y = sin(2x) on [-2, 2].
  manual_seed(0);
  Tensor inputs = rand({128, 1}) * 4.0 - 2.0;
  Tensor targets = (inputs * 2.0).sin();
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(1, 32), std::make_shared<SwishLayer>(1.0),
                                                std::make_shared<nn::Linear>(32, 32), std::make_shared<SwishLayer>(1.0),
                                                std::make_shared<nn::Linear>(32, 1));
  fmt::print("{}\n", model->str());
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  double loss_value = 0.0;
  for (int step = 1; step <= 400; ++step) {
    Tensor loss = F::mse_loss(model->forward(inputs), targets);
    opt.zero_grad();
    loss.backward();
    opt.step();
    loss_value = loss.item();
    if (step % 100 == 0) fmt::print("step {:>3}  loss {:.5f}\n", step, loss_value);
  }
  const bool learnt = loss_value < 0.01;  // sin(2x) has variance ≈ 0.5: the fit explains over 98% of it
  fmt::print("{}\n", first && second && learnt ? "ok" : "FAILED");
  return first && second && learnt ? 0 : 1;
}
