// autograd::Function: ops written in user code, with their own backward. Ops are defined here
// as a user would (with one, two and three outputs), gradchecked and gradgradchecked; then the
// context's parts (saved tensors and their version check, plain values, needs_input_grad,
// non-differentiable outputs) and the errors a wrong backward gets.
#include <doctest/doctest.h>

#include <cmath>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using autograd::FunctionCtx;
using test::contains;
using test::error_message;
using test::leaf;

namespace {


// y = x · σ(β x), β a plain number.
struct Swish : autograd::Function<Swish> {
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, double beta) {
    ctx.save_for_backward({x});
    ctx.saved_data["beta"] = beta;
    return x * (x * beta).sigmoid();
  }
  // dx = dy · (σ + β x σ (1 − σ)),  σ = σ(β x)
  static std::vector<Tensor> backward(FunctionCtx& ctx, const std::vector<Tensor>& grad_outputs) {
    Tensor x = ctx.get_saved_variables()[0];
    double beta = ctx.saved_data["beta"].to_double();
    Tensor s = (x * beta).sigmoid();
    return {grad_outputs[0] * (s + x * beta * s * (1.0 - s)), Tensor()};
  }
};

// Two inputs, two outputs: (r·cos θ, r·sin θ), polar to Cartesian. Saves an output (y) to show
// that a saved output works for second derivatives too.
struct PolarToCartesian : autograd::Function<PolarToCartesian> {
  static inline int backward_calls = 0;
  static inline bool last_needed_r = true;
  static std::string name() { return "polar_to_cartesian"; }
  static std::vector<Tensor> forward(FunctionCtx& ctx, const Tensor& r, const Tensor& theta) {
    Tensor x = r * theta.cos(), y = r * theta.sin();
    ctx.save_for_backward({r, theta, y});
    return {x, y};
  }
  // dr = dx·cos θ + dy·sin θ;  dθ = −dx·y + dy·x  (x = r cos θ, y = r sin θ)
  static std::vector<Tensor> backward(FunctionCtx& ctx, const std::vector<Tensor>& g) {
    ++backward_calls;
    last_needed_r = ctx.needs_input_grad(0);
    const auto& saved = ctx.get_saved_variables();
    const Tensor &r = saved[0], &theta = saved[1], &y = saved[2];
    Tensor dr = ctx.needs_input_grad(0) ? g[0] * theta.cos() + g[1] * theta.sin() : Tensor();
    Tensor dtheta = ctx.needs_input_grad(1) ? -(g[0] * y) + g[1] * (r * theta.cos()) : Tensor();
    return {dr, dtheta};
  }
};

// Like Swish with the β x σ (1 − σ) term forgotten: a wrong backward gradcheck must catch.
struct BadSwish : autograd::Function<BadSwish> {
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return x * x.sigmoid();
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, const std::vector<Tensor>& g) {
    return {g[0] * ctx.get_saved_variables()[0].sigmoid()};
  }
};

// The maximum of each row and where it is: the indices are not differentiable.
struct RowMax : autograd::Function<RowMax> {
  static std::vector<Tensor> forward(FunctionCtx& ctx, const Tensor& x) {
    ValuesIndices m = x.max(1);
    ctx.save_for_backward({m.indices});
    ctx.saved_data["columns"] = x.size(1);
    ctx.mark_non_differentiable({m.indices});
    return {m.values, m.indices};
  }
  // dx[i, j] = dvalues[i] where j is row i's argmax, else 0
  static std::vector<Tensor> backward(FunctionCtx& ctx, const std::vector<Tensor>& g) {
    CHECK_FALSE(g[1].defined());  // no gradient for the indices
    Tensor indices = ctx.get_saved_variables()[0];
    Tensor one_hot = (arange(ctx.saved_data["columns"].to_int()) == indices.unsqueeze(1))
                         .to(g[0].dtype());
    return {g[0].unsqueeze(1) * one_hot};
  }
};

// Three outputs of three kinds: each row's sum times a number (float64, one per row), the
// squares rounded to float32 (the input's shape) and each row's argmax (int64: no gradient).
struct RowStats : autograd::Function<RowStats> {
  static std::vector<Tensor> forward(FunctionCtx& ctx, const Tensor& x, double scale) {
    ctx.save_for_backward({x});
    ctx.saved_data["scale"] = scale;
    return {x.sum({1}) * scale, (x * x).to(kFloat32), x.argmax(1)};
  }
  // dx[i, j] = scale·dsums[i] + 2·x[i, j]·dsquares[i, j]
  static std::vector<Tensor> backward(FunctionCtx& ctx, const std::vector<Tensor>& g) {
    CHECK_FALSE(g[2].defined());
    CHECK(g[1].dtype() == kFloat32);
    Tensor x = ctx.get_saved_variables()[0];
    return {g[0].unsqueeze(1) * ctx.saved_data["scale"].to_double() + 2.0 * x * g[1].to(kFloat64), Tensor()};
  }
};

}  // namespace

TEST_CASE("custom op with a plain-value argument: values, grad_fn name, gradcheck and gradgradcheck") {
  Tensor x = leaf({3, 4}, 900);
  Tensor y = Swish::apply(x, 1.5);
  CHECK(y.grad_fn()->name() == "SwishBackward");
  CHECK(test::allclose(y, x * (x * 1.5).sigmoid()));
  auto f = [](const std::vector<Tensor>& in) { return Swish::apply(in[0], 1.5); };
  CHECK(gradcheck(f, {x}));
  CHECK(gradgradcheck(f, {x}));
  // Composed with other ops and used twice.
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return Swish::apply(in[0].tanh(), -0.5) * in[0]; }, {x}));
}

TEST_CASE("custom op with two inputs and two outputs: gradcheck and gradgradcheck on each output and both") {
  Tensor r = test::positive_leaf({5}, 901);
  Tensor theta = leaf({5}, 902);
  std::vector<Tensor> xy = PolarToCartesian::apply(r, theta);
  REQUIRE(xy.size() == 2);
  CHECK(test::allclose(xy[0], r * theta.cos()));
  CHECK(test::allclose(xy[1], r * theta.sin()));
  for (int which : {0, 1, 2}) {
    CAPTURE(which);
    // Only x, only y (the other output's gradient is zeros), or both mixed.
    auto f = [which](const std::vector<Tensor>& in) {
      std::vector<Tensor> out = PolarToCartesian::apply(in[0], in[1]);
      return which < 2 ? out[static_cast<size_t>(which)] : out[0] * out[1] + out[1].exp();
    };
    CHECK(gradcheck(f, {r, theta}));
    CHECK(gradgradcheck(f, {r, theta}));
  }
  // One node with two outputs: both outputs have it as grad_fn, and an op on y has an edge to
  // its output 1. Its edges lead straight to the inputs.
  REQUIRE(xy[0].grad_fn() != nullptr);
  CHECK(xy[0].grad_fn() == xy[1].grad_fn());
  CHECK(xy[0].grad_fn()->name() == "PolarToCartesianBackward");
  CHECK(xy[0].grad_fn()->num_outputs == 2);
  for (const auto& edge : xy[0].grad_fn()->next) CHECK(edge.leaf != nullptr);
  Tensor twice_y = xy[1] * 2.0;
  const autograd::Edge& into_y = twice_y.grad_fn()->next[0];
  CHECK(into_y.node == xy[1].grad_fn());
  CHECK(into_y.output == 1);
  CHECK((xy[0] * 2.0).grad_fn()->next[0].output == 0);
}

TEST_CASE("custom op with three outputs of different shapes and dtypes, one an integer") {
  Tensor x = leaf({3, 4}, 911);
  std::vector<Tensor> out = RowStats::apply(x, 1.5);
  REQUIRE(out.size() == 3);
  CHECK(out[0].shape() == Shape{3});
  CHECK(out[1].dtype() == kFloat32);
  CHECK(out[2].dtype() == kInt64);
  CHECK(out[0].grad_fn() == out[1].grad_fn());
  CHECK_FALSE(out[2].requires_grad());
  CHECK(test::allclose(out[0], x.sum({1}) * 1.5));
  CHECK(test::allclose(out[2].to(kFloat64), x.argmax(1).to(kFloat64)));
  // The float32 output rounds: differences over a wider step, for which x² is still exact.
  GradcheckOptions loose;
  loose.eps = 1e-3;
  loose.atol = 1e-4;
  for (int which : {0, 1, 2}) {
    CAPTURE(which);
    // The sums alone (the squares unused: zeros reach backward for them), the squares alone,
    // or both, the sums used twice.
    auto f = [which](const std::vector<Tensor>& in) {
      std::vector<Tensor> o = RowStats::apply(in[0], 1.5);
      Tensor squares = o[1].to(kFloat64).sum({1});
      return which == 0 ? o[0] : which == 1 ? squares : o[0] * o[0] + squares;
    };
    CHECK(gradcheck(f, {x}, loose));
    CHECK(gradgradcheck(f, {x}, loose));
  }
  // dx = 1.5 (the sums) + 2x (the squares)
  (out[0].sum() + out[1].sum()).backward();
  CHECK(test::allclose(x.grad(), 1.5 + 2.0 * x.detach(), 1e-6, 1e-6));
}

TEST_CASE("custom op with two outputs: grad() of one output, hooks and retain_grad on one") {
  Tensor r = test::positive_leaf({4}, 912);
  Tensor theta = leaf({4}, 913);
  std::vector<Tensor> xy = PolarToCartesian::apply(r, theta);
  Tensor loss = (xy[0] * xy[1]).sum();
  // d(x·y)/dy = x, d(x·y)/dx = y: captured at the node's outputs 1 and 0.
  std::vector<Tensor> g = autograd::grad({loss}, {xy[1]}, {}, /*retain_graph=*/true);
  CHECK(test::allclose(g[0], xy[0].detach()));
  g = autograd::grad({loss}, {xy[0], xy[1]}, {}, /*retain_graph=*/true);
  CHECK(test::allclose(g[0], xy[1].detach()));
  CHECK(test::allclose(g[1], xy[0].detach()));
  // x alone reaches the node's output 0: nothing reaches y.
  g = autograd::grad({xy[0].sum()}, {xy[1]}, {}, true, false, /*allow_unused=*/true);
  CHECK_FALSE(g[0].defined());
  CHECK_FALSE(r.grad().defined());  // grad() writes no .grad

  // A hook on y doubles y's gradient only; x's .grad is kept.
  Tensor seen;
  xy[1].register_hook([&](const Tensor& grad) {
    seen = grad;
    return grad * 2.0;
  });
  xy[0].retain_grad();
  (xy[0] + xy[1]).sum().backward();
  CHECK(test::allclose(seen, ones({4}, kFloat64)));
  CHECK(test::allclose(xy[0].grad(), ones({4}, kFloat64)));
  CHECK_FALSE(xy[1].grad().defined());
  // dθ = −dx·y + dy·x with dx = 1, dy = 2
  CHECK(test::allclose(theta.grad(), -xy[1].detach() + 2.0 * xy[0].detach()));
}

TEST_CASE("custom op with two outputs: retain_graph, and a second backward without it") {
  Tensor r = test::positive_leaf({3}, 914);
  Tensor theta = leaf({3}, 915);
  std::vector<Tensor> xy = PolarToCartesian::apply(r, theta);
  Tensor loss = (xy[0] + xy[1]).sum();
  const int calls = PolarToCartesian::backward_calls;
  loss.backward({}, /*retain_graph=*/true);
  Tensor once = r.grad().clone();
  loss.backward();
  CHECK(PolarToCartesian::backward_calls == calls + 2);  // once a backward, for both outputs
  CHECK(test::allclose(r.grad(), 2.0 * once));
  CHECK(contains(error_message([&] { loss.backward(); }), "backward through the graph a second time"));
}

TEST_CASE("custom op with two outputs: a saved output changed in place is an error naming the op") {
  Tensor r = test::positive_leaf({3}, 916);
  Tensor theta = leaf({3}, 917);
  std::vector<Tensor> xy = PolarToCartesian::apply(r, theta);  // saves y
  Tensor x = xy[0] * 1.0;
  xy[1].mul_(2.0);
  std::string msg = error_message([&] { x.sum().backward(); });
  CHECK(contains(msg, "modified by an in-place operation"));
  CHECK(contains(msg, "polar_to_cartesian"));
}

TEST_CASE("custom op: an input that needs no gradient gets none, and backward is told") {
  Tensor r = tensor({1.0, 2.0}, kFloat64);  // no grad
  Tensor theta = leaf({2}, 903);
  std::vector<Tensor> xy = PolarToCartesian::apply(r, theta);
  (xy[0] + xy[1]).sum().backward();
  CHECK(PolarToCartesian::last_needed_r == false);
  CHECK_FALSE(r.grad().defined());
  // d/dθ (r cos θ + r sin θ) = r (cos θ − sin θ)
  CHECK(test::allclose(theta.grad(), r * (theta.detach().cos() - theta.detach().sin())));

  // No input requires grad: no node at all, and backward never runs.
  const int calls = PolarToCartesian::backward_calls;
  std::vector<Tensor> plain = PolarToCartesian::apply(r, theta.detach());
  CHECK_FALSE(plain[0].requires_grad());
  CHECK(PolarToCartesian::backward_calls == calls);
}

TEST_CASE("custom op: non-differentiable outputs") {
  Tensor x = leaf({3, 4}, 904);
  std::vector<Tensor> m = RowMax::apply(x);
  CHECK(m[0].requires_grad());
  CHECK_FALSE(m[1].requires_grad());
  CHECK(m[1].dtype() == kInt64);
  CHECK(m[0].grad_fn()->name() == "RowMaxBackward");
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return RowMax::apply(in[0])[0]; }, {x}));
  CHECK(gradgradcheck([](const std::vector<Tensor>& in) { return RowMax::apply(in[0])[0].square(); }, {x}));
}

TEST_CASE("custom op: a wrong backward is caught by gradcheck, and the message names the op") {
  Tensor x = leaf({4}, 905);
  std::string msg = error_message([&] { gradcheck([](const std::vector<Tensor>& in) { return BadSwish::apply(in[0]); }, {x}); });
  CHECK(contains(msg, "Jacobian mismatch"));
  CHECK(contains(msg, "BadSwishBackward"));
  // Inside a larger function too: the op is listed among the graph's ops.
  msg = error_message([&] {
    gradcheck([](const std::vector<Tensor>& in) { return BadSwish::apply(in[0] * 2.0).sum().tanh(); }, {x});
  });
  CHECK(contains(msg, "BadSwishBackward"));
}

TEST_CASE("custom op: a saved tensor changed in place is an error naming the op") {
  Tensor x = leaf({3}, 906);
  Tensor h = x * 1.0;
  Tensor y = Swish::apply(h, 1.0);
  h.mul_(2.0);
  std::string msg = error_message([&] { y.sum().backward(); });
  CHECK(contains(msg, "modified by an in-place operation"));
  CHECK(contains(msg, "Swish"));
}

TEST_CASE("custom op: errors of a wrong backward's shape or count, and of the context") {
  struct WrongCount : autograd::Function<WrongCount> {
    static Tensor forward(FunctionCtx&, const Tensor& x, int) { return x * 2.0; }
    static std::vector<Tensor> backward(FunctionCtx&, const std::vector<Tensor>& g) { return {g[0] * 2.0}; }
  };
  struct WrongShape : autograd::Function<WrongShape> {
    static Tensor forward(FunctionCtx&, const Tensor& x) { return x.sum(); }
    static std::vector<Tensor> backward(FunctionCtx&, const std::vector<Tensor>& g) { return {g[0]}; }
  };
  struct GradForNumber : autograd::Function<GradForNumber> {
    static Tensor forward(FunctionCtx&, const Tensor& x, double) { return x * 2.0; }
    static std::vector<Tensor> backward(FunctionCtx&, const std::vector<Tensor>& g) { return {g[0] * 2.0, g[0]}; }
  };
  Tensor x = leaf({2, 2}, 907);
  CHECK(contains(error_message([&] { WrongCount::apply(x, 3).sum().backward(); }),
                 "WrongCount: backward returned 1 gradients for 2 forward arguments"));
  CHECK(contains(error_message([&] { WrongShape::apply(x).backward(); }),
                 "WrongShape: backward returned a gradient of shape [] for argument 0 of shape [2,2]"));
  CHECK(contains(error_message([&] { GradForNumber::apply(x, 1.0).sum().backward(); }),
                 "GradForNumber: backward returned a gradient for argument 1, which is not a tensor"));
  autograd::SavedValue v = 3.0;
  CHECK(contains(error_message([&] { v.to_string(); }), "not a string"));
  CHECK(autograd::SavedValue(int64_t{4}).to_double() == 4.0);
}

TEST_CASE("custom op: create_graph gives second derivatives through a user backward") {
  // d²/dx² of x·σ(x) at x, by the formula: σ'(x)(2 + x(1 − 2σ(x))), σ' = σ(1 − σ)
  Tensor x = tensor({-1.0, 0.5, 2.0}, TensorOptions(kFloat64).requires_grad());
  Tensor g = autograd::grad({Swish::apply(x, 1.0).sum()}, {x}, {}, false, /*create_graph=*/true)[0];
  Tensor h = autograd::grad({g.sum()}, {x})[0];
  for (int64_t i = 0; i < 3; ++i) {
    double v = x.at<double>({i}), s = 1.0 / (1.0 + std::exp(-v));
    CHECK(h.at<double>({i}) == doctest::Approx(s * (1 - s) * (2 + v * (1 - 2 * s))).epsilon(1e-12));
  }
}

TEST_CASE("custom op: the graph is freed with its outputs (no cycle through the context)") {
  const int64_t nodes_before = autograd::live_node_count();
  {
    Tensor r = test::positive_leaf({3}, 908), theta = leaf({3}, 909);
    std::vector<Tensor> xy = PolarToCartesian::apply(r, theta);  // saves output y
    Tensor z = Swish::apply(xy[1], 2.0);
    CHECK(autograd::live_node_count() > nodes_before);
  }
  CHECK(autograd::live_node_count() == nodes_before);
}

TEST_CASE("record keeps its own copy of an op name built at run time") {
  Tensor x = leaf({2}, 910);
  Tensor y;
  {
    std::string name = std::string("scaled_") + std::to_string(3);  // gone after this block
    y = autograd::record(name, x.detach() * 3.0, {x}, {}, [](const Tensor& g, const autograd::Saved&) -> autograd::Grads {
      return {g * 3.0};
    });
    name.assign(name.size(), '#');  // overwrite the characters too
  }
  CHECK(y.grad_fn()->op == "scaled_3");
  CHECK(y.grad_fn()->name() == "Scaled3Backward");
  y.sum().backward();
  CHECK(test::allclose(x.grad(), full({2}, 3.0, kFloat64)));
}
