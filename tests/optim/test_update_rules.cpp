// SGD, Adam and AdamW against their published update rules: three steps on a small float64
// quadratic, each compared with the same steps written out here in plain doubles.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "cppgrad.h"
#include "optim_helpers.h"

using namespace cppgrad;
using namespace cppgrad::optim;
using optimtest::Quadratic;

namespace {

using Trajectory = std::vector<std::vector<double>>;  // the parameters after each step

// Steps `opt` on the quadratic and compares the parameters after each step with `expected`.
void run_and_compare(Optimizer& opt, const Quadratic& q, const Trajectory& expected) {
  for (size_t k = 0; k < expected.size(); ++k) {
    opt.zero_grad();
    q.backward();
    opt.step();
    INFO("after step " << k + 1);
    optimtest::check_quadratic(q, expected[k]);
  }
}

// How far two finite trajectories lie apart: a NaN or an infinity (which would make any
// "they differ" check pass) fails the test instead.
double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  const double worst = check::max_abs_diff(a, b);
  REQUIRE(std::isfinite(worst));
  return worst;
}

// SGD with momentum μ, dampening τ, weight decay λ, optional Nesterov (Sutskever et al. 2013,
// in PyTorch's form):
//   g ← ∇f(p) + λp
//   b ← g (first step),  b ← μb + (1-τ)g (later steps)
//   d ← g + μb (Nesterov) or b (otherwise); without momentum d ← g
//   p ← p - lr·d
struct SgdReference {
  double lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;

  Trajectory run(const Quadratic& q, int steps) const {
    std::vector<double> p = q.start, b(p.size(), 0.0);
    Trajectory out;
    for (int t = 1; t <= steps; ++t) {
      std::vector<double> grad = q.grad(p);
      for (size_t i = 0; i < p.size(); ++i) {
        double g = grad[i] + weight_decay * p[i];
        double d = g;
        if (momentum != 0.0) {
          b[i] = (t == 1) ? g : momentum * b[i] + (1.0 - dampening) * g;
          d = nesterov ? g + momentum * b[i] : b[i];
        }
        p[i] -= lr * d;
      }
      out.push_back(p);
    }
    return out;
  }
};

// Adam, Algorithm 1 of Kingma & Ba (2015), with bias-corrected moments:
//   g ← ∇f(p) + λp                 (L2 penalty; AdamW instead: p ← p·(1 - lr·λ), g ← ∇f(p))
//   m ← β1·m + (1-β1)·g,   v ← β2·v + (1-β2)·g²
//   m̂ = m / (1-β1ᵗ),       v̂ = v / (1-β2ᵗ)
//   AMSGrad (Reddi et al. 2018, as PyTorch): v_max ← max(v_max, v), v̂ = v_max / (1-β2ᵗ)
//   p ← p - lr · m̂ / (√v̂ + ε)
struct AdamReference {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool amsgrad = false, decoupled = false;

  Trajectory run(const Quadratic& q, int steps) const {
    std::vector<double> p = q.start, m(p.size(), 0.0), v(p.size(), 0.0), v_max(p.size(), 0.0);
    Trajectory out;
    for (int t = 1; t <= steps; ++t) {
      std::vector<double> grad = q.grad(p);
      for (size_t i = 0; i < p.size(); ++i) {
        double g = grad[i];
        if (decoupled)
          p[i] *= 1.0 - lr * weight_decay;
        else
          g += weight_decay * p[i];
        m[i] = beta1 * m[i] + (1.0 - beta1) * g;
        v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
        v_max[i] = std::max(v_max[i], v[i]);
        const double m_hat = m[i] / (1.0 - std::pow(beta1, t));
        const double v_hat = (amsgrad ? v_max[i] : v[i]) / (1.0 - std::pow(beta2, t));
        p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
      }
      out.push_back(p);
    }
    return out;
  }
};

}  // namespace

TEST_CASE("SGD plain follows p = p - lr g") {
  Quadratic q;
  SGD opt(q.params(), SGDOptions(0.1));
  Trajectory expected = SgdReference{.lr = 0.1}.run(q, 3);
  // One step by hand as well: x0 = 1 - 0.1·2·1·(1 - 0.5) = 0.9.
  CHECK(expected[0][0] == doctest::Approx(0.9));
  run_and_compare(opt, q, expected);
}

TEST_CASE("SGD with momentum and dampening follows the momentum-buffer rule") {
  Quadratic q;
  SGD opt(q.params(), SGDOptions(0.05).momentum(0.9).dampening(0.3));
  SgdReference ref{.lr = 0.05, .momentum = 0.9, .dampening = 0.3};
  Trajectory expected = ref.run(q, 3);
  // The dampening matters from step 2 on: without it the trajectory differs.
  SgdReference undamped = ref;
  undamped.dampening = 0.0;
  CHECK(max_difference(undamped.run(q, 3)[2], expected[2]) > 1e-3);
  run_and_compare(opt, q, expected);
}

TEST_CASE("SGD with Nesterov momentum looks ahead along the buffer") {
  Quadratic q;
  SGD opt(q.params(), SGDOptions(0.05).momentum(0.9).nesterov(true));
  SgdReference ref{.lr = 0.05, .momentum = 0.9, .nesterov = true};
  Trajectory expected = ref.run(q, 3);
  SgdReference classical = ref;
  classical.nesterov = false;
  CHECK(max_difference(classical.run(q, 3)[0], expected[0]) > 1e-3);
  run_and_compare(opt, q, expected);
}

TEST_CASE("SGD weight decay adds lambda p to the gradient") {
  SUBCASE("without momentum") {
    Quadratic q;
    SGD opt(q.params(), SGDOptions(0.1).weight_decay(0.2));
    run_and_compare(opt, q, SgdReference{.lr = 0.1, .weight_decay = 0.2}.run(q, 3));
  }
  SUBCASE("with momentum") {
    Quadratic q;
    SGD opt(q.params(), SGDOptions(0.1).weight_decay(0.2).momentum(0.5));
    run_and_compare(opt, q, SgdReference{.lr = 0.1, .momentum = 0.5, .weight_decay = 0.2}.run(q, 3));
  }
}

TEST_CASE("Adam follows Kingma and Ba's bias-corrected update") {
  Quadratic q;
  Adam opt(q.params(), AdamOptions(0.1));
  Trajectory expected = AdamReference{.lr = 0.1}.run(q, 3);
  // The first bias-corrected step moves every element by lr·g/(|g| + ε) ≈ lr toward its target.
  CHECK(expected[0][0] == doctest::Approx(1.0 - 0.1));
  CHECK(expected[0][1] == doctest::Approx(0.4 - 0.1));
  run_and_compare(opt, q, expected);
}

TEST_CASE("Adam with weight decay adds lambda p to the gradient before the moments") {
  Quadratic q;
  Adam opt(q.params(), AdamOptions(0.1).weight_decay(0.5).beta1(0.8).beta2(0.99).eps(1e-6));
  AdamReference ref{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.5};
  run_and_compare(opt, q, ref.run(q, 3));
}

TEST_CASE("Adam with AMSGrad divides by the running maximum of v") {
  Quadratic q;
  // A large rate and a short second-moment memory: after the first step some elements land
  // near their targets, their v shrinks, and the maximum keeps the old value.
  // (beta1 0.5: beta2 must stay above beta1², see Optimizer::check_group.)
  Adam opt(q.params(), AdamOptions(0.5).beta1(0.5).beta2(0.5).amsgrad(true));
  AdamReference ref{.lr = 0.5, .beta1 = 0.5, .beta2 = 0.5, .amsgrad = true};
  Trajectory expected = ref.run(q, 3);
  AdamReference plain = ref;
  plain.amsgrad = false;
  CHECK(max_difference(plain.run(q, 3)[2], expected[2]) > 1e-3);
  run_and_compare(opt, q, expected);
  // The running maximum is part of the state.
  bool has_max = false;
  for (const auto& [name, t] : opt.state_dict()) has_max |= (name == "state.0.max_exp_avg_sq");
  CHECK(has_max);
}

TEST_CASE("AdamW decays the parameters themselves") {
  Quadratic q;
  AdamW opt(q.params(), AdamWOptions(0.1).weight_decay(0.3));
  AdamReference ref{.lr = 0.1, .weight_decay = 0.3, .decoupled = true};
  Trajectory expected = ref.run(q, 3);
  // Decoupled decay is not the same as Adam's L2 penalty.
  AdamReference coupled = ref;
  coupled.decoupled = false;
  CHECK(max_difference(coupled.run(q, 3)[2], expected[2]) > 1e-4);
  run_and_compare(opt, q, expected);
}

TEST_CASE("AdamW defaults to PyTorch's weight decay of 0.01") {
  Quadratic q;
  AdamW opt(q.params());
  CHECK(opt.param_groups()[0].weight_decay == 0.01);
  CHECK(opt.lr() == 1e-3);
  run_and_compare(opt, q, AdamReference{.weight_decay = 0.01, .decoupled = true}.run(q, 3));
}

// Issue 44: AdamW(params, AdamWOptions(lr)) decays by PyTorch's 0.01 (before, options that set
// only the rate gave 0); weight_decay(0) turns the decay off. One step from p with gradient g is
// p·(1 - lr·λ) - lr·g / (|g| + ε) (m̂ = g, v̂ = g² after one step); the literals are PyTorch 1.13's
// p after torch.optim.AdamW([p], lr=0.1) (then weight_decay=0) and one step(), float64,
// p = [1.5, -2.0, 0.25], p.grad = [0.3, -0.7, 2.0].
TEST_CASE("AdamW with options that set only the rate decays by 0.01, weight_decay(0) does not decay") {
  const std::vector<double> start = {1.5, -2.0, 0.25}, grad = {0.3, -0.7, 2.0};
  auto one_step = [&](const AdamWOptions& options) {
    Tensor p = tensor(start, {3}).requires_grad_();
    AdamW opt({p}, options);
    p.set_grad(tensor(grad, {3}));
    opt.step();
    return p.to_vector<double>();
  };
  auto closed_form = [&](double lr, double wd) {
    std::vector<double> out;
    for (size_t i = 0; i < start.size(); ++i) out.push_back(start[i] * (1 - lr * wd) - lr * grad[i] / (std::abs(grad[i]) + 1e-8));
    return out;
  };
  const std::vector<double> torch_default = {1.3985000033333332, -1.8980000014285714, 0.14975000049999998};
  const std::vector<double> torch_no_decay = {1.4000000033333333, -1.9000000014285714, 0.1500000005};
  const std::vector<double> got = one_step(AdamWOptions(0.1));
  CHECK(AdamW({tensor({1.0}).requires_grad_()}, AdamWOptions(0.1)).param_groups()[0].weight_decay == 0.01);
  CHECK(max_difference(got, closed_form(0.1, 0.01)) < 1e-15);
  CHECK(max_difference(got, torch_default) < 1e-15);
  const std::vector<double> off = one_step(AdamWOptions(0.1).weight_decay(0.0));
  CHECK(max_difference(off, closed_form(0.1, 0.0)) < 1e-15);
  CHECK(max_difference(off, torch_no_decay) < 1e-15);
  CHECK(max_difference(got, off) > 1e-3);  // the decay moved the weights: the check above can tell
  // Adam's own default stays 0.
  CHECK(Adam({tensor({1.0}).requires_grad_()}, AdamOptions(0.1)).param_groups()[0].weight_decay == 0.0);
}

TEST_CASE("float32 parameters follow the same rules to float32 precision") {
  Quadratic q;
  q.x = q.x.detach().to(kFloat32).requires_grad_();
  q.y = q.y.detach().to(kFloat32).requires_grad_();
  Adam opt(q.params(), AdamOptions(0.1).weight_decay(0.1));
  Trajectory expected = AdamReference{.lr = 0.1, .weight_decay = 0.1}.run(q, 3);
  for (size_t k = 0; k < expected.size(); ++k) {
    opt.zero_grad();
    q.backward();
    opt.step();
    CHECK(q.x.dtype() == kFloat32);
    optimtest::check_quadratic(q, expected[k], 1e-5);
  }
}

TEST_CASE("Adam updates many parameters in one parallel loop, with the same result at 1 and 2 threads") {
  // 40 parameters of 1 to 40,000 elements: together past the parallel grain, so at 2 threads
  // the queued updates are shared out in chunks; each element's update must not change.
  auto run = [](int threads) {
    const int saved = get_num_threads();
    set_num_threads(threads);
    Generator gen(11);
    std::vector<Tensor> params;
    for (int i = 0; i < 40; ++i) {
      Tensor p = randn({1 + i * 1000}, TensorOptions(), gen);
      p.requires_grad_();
      params.push_back(p);
    }
    optim::AdamW opt(params, optim::AdamWOptions(1e-2).amsgrad(true));
    for (int step = 0; step < 3; ++step) {
      Tensor loss = zeros({});
      for (const Tensor& p : params) loss = loss + (p * p * p).sum();
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    set_num_threads(saved);
    std::vector<double> all;
    for (const Tensor& p : params) {
      auto v = optimtest::values(p);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const std::vector<double> one = run(1), two = run(2);
  REQUIRE(one.size() == two.size());
  CHECK(one == two);
  // and the update did happen: every parameter moved by about lr per step
  Generator gen(11);
  Tensor first = randn({1}, TensorOptions(), gen);
  CHECK(std::abs(one[0] - first.item()) > 1e-3);
}
