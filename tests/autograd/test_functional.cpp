// autograd::functional: vjp, jvp, jacobian, hessian, vhp, hvp against derivatives known in
// closed form (a quadratic form, softmax's Jacobian diag(p) − ppᵀ) and against central finite
// differences in float64 (a small MLP of several tensors).
#include <doctest/doctest.h>

#include <cmath>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
namespace AF = cppgrad::autograd::functional;
using test::allclose;
using test::contains;
using test::error_message;

namespace {

Tensor randn64(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, kFloat64, gen);
}


// ∂fᵢ/∂xⱼ by central differences, shape fᵢ.shape + xⱼ.shape: (f(x + εeₖ) − f(x − εeₖ)) / 2ε.
Tensor numerical_jacobian(const AF::Function& f, std::vector<Tensor> xs, size_t i, size_t j, double eps = 1e-6) {
  NoGradGuard no_grad;
  for (Tensor& x : xs) x = x.detach().clone();
  const Tensor& x = xs[j];
  Tensor out = f(xs)[i];
  std::vector<Tensor> columns;
  for (int64_t k = 0; k < x.numel(); ++k) {
    double& element = x.data<double>()[k];
    const double saved = element;
    element = saved + eps;
    Tensor plus = f(xs)[i].clone();
    element = saved - eps;
    Tensor minus = f(xs)[i].clone();
    element = saved;
    columns.push_back(((plus - minus) / (2 * eps)).reshape({-1}));
  }
  Shape shape = out.shape();
  shape.insert(shape.end(), x.shape().begin(), x.shape().end());
  // columns[k] is ∂f/∂x_k over all outputs: stacked on the last dim, then reshaped
  return stack(columns, 1).reshape(shape);
}

}  // namespace

TEST_CASE("quadratic form: gradient, Jacobian, Hessian, vhp and hvp in closed form") {
  // f(x) = xᵀ A x with A not symmetric: ∇f = (A + Aᵀ) x, H = A + Aᵀ
  Tensor A = randn64({3, 3}, 1), x = randn64({3}, 2), v = randn64({3}, 3);
  Tensor S = A + A.t();
  AF::ScalarFunction f = [&](const std::vector<Tensor>& in) { return in[0].matmul(A.matmul(in[0])); };

  std::vector<std::vector<Tensor>> H = AF::hessian(f, {x});
  REQUIRE(H.size() == 1);
  CHECK(H[0][0].shape() == Shape{3, 3});
  CHECK(allclose(H[0][0], S, 1e-12, 1e-12));
  CHECK_FALSE(H[0][0].requires_grad());

  AF::Product vh = AF::vhp(f, {x}, {v});
  CHECK(allclose(vh.outputs[0], x.matmul(A.matmul(x)), 1e-12, 1e-12));
  CHECK(allclose(vh.value[0], v.matmul(S), 1e-12, 1e-12));
  AF::Product hv = AF::hvp(f, {x}, {v});
  CHECK(allclose(hv.value[0], S.matmul(v), 1e-12, 1e-12));

  // The gradient map g(x) = (A + Aᵀ) x is linear: its Jacobian is A + Aᵀ, its vjp vᵀ(A + Aᵀ).
  AF::Function grad_map = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{S.matmul(in[0])}; };
  CHECK(allclose(AF::jacobian(grad_map, {x})[0][0], S, 1e-12, 1e-12));
  CHECK(allclose(AF::vjp(grad_map, {x}, {v}).value[0], v.matmul(S), 1e-12, 1e-12));
  CHECK(allclose(AF::jvp(grad_map, {x}, {v}).value[0], S.matmul(v), 1e-12, 1e-12));
  // The single-tensor forms.
  CHECK(allclose(AF::hessian([&](const Tensor& t) { return t.matmul(A.matmul(t)); }, x), S, 1e-12, 1e-12));
  CHECK(allclose(AF::jacobian([&](const Tensor& t) { return S.matmul(t); }, x), S, 1e-12, 1e-12));
}

TEST_CASE("softmax's Jacobian is diag(p) - p pᵀ, and jvp and vjp are its products") {
  Tensor z = randn64({5}, 4), u = randn64({5}, 5);
  Tensor p = softmax(z, 0);
  Tensor expected = -p.unsqueeze(1).matmul(p.unsqueeze(0));
  for (int64_t i = 0; i < 5; ++i) expected.at<double>({i, i}) += p.at<double>({i});
  AF::Function f = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{softmax(in[0], 0)}; };
  Tensor J = AF::jacobian(f, {z})[0][0];
  CHECK(allclose(J, expected, 1e-14, 1e-12));
  // Every row sums to zero: softmax's outputs always sum to one.
  CHECK(allclose(J.sum(1), zeros({5}, kFloat64), 1e-15, 0.0));
  AF::Product jv = AF::jvp(f, {z}, {u});  // by the double-vjp trick
  CHECK(allclose(jv.outputs[0], p, 1e-15, 0.0));
  CHECK(allclose(jv.value[0], expected.matmul(u), 1e-14, 1e-12));
  CHECK(allclose(AF::vjp(f, {z}, {u}).value[0], u.matmul(expected), 1e-14, 1e-12));
  // Over rows of a matrix: each row's Jacobian, and zero between rows.
  Tensor zz = randn64({2, 3}, 6);
  Tensor JJ = AF::jacobian([](const Tensor& t) { return softmax(t, 1); }, zz);  // (2, 3, 2, 3)
  CHECK(JJ.shape() == Shape{2, 3, 2, 3});
  CHECK(allclose(JJ.select(0, 0).select(1, 1), zeros({3, 3}, kFloat64), 1e-15, 0.0));
  Tensor p1 = softmax(zz[1], 0);
  Tensor block = -p1.unsqueeze(1).matmul(p1.unsqueeze(0));
  for (int64_t i = 0; i < 3; ++i) block.at<double>({i, i}) += p1.at<double>({i});
  CHECK(allclose(JJ.select(0, 1).select(1, 1), block, 1e-14, 1e-12));
}

TEST_CASE("a small MLP of several tensors: every Jacobian and the Hessian against finite differences") {
  // f(x, W1, b1, W2) = {tanh(x W1ᵀ + b1) W2ᵀ, Σ W1²}: two outputs, four inputs
  Tensor x = randn64({2, 3}, 7), W1 = randn64({4, 3}, 8) * 0.5, b1 = randn64({4}, 9), W2 = randn64({2, 4}, 10) * 0.5;
  AF::Function mlp = [](const std::vector<Tensor>& in) {
    Tensor h = (in[0].matmul(in[1].t()) + in[2]).tanh();
    return std::vector<Tensor>{h.matmul(in[3].t()), (in[1] * in[1]).sum()};
  };
  std::vector<Tensor> inputs{x, W1, b1, W2};
  std::vector<std::vector<Tensor>> J = AF::jacobian(mlp, inputs);
  REQUIRE(J.size() == 2);
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 4; ++j) {
      CAPTURE(i);
      CAPTURE(j);
      Tensor numerical = numerical_jacobian(mlp, inputs, i, j);
      CHECK(J[i][j].shape() == numerical.shape());
      // Central differences with ε = 1e-6 are good to about ε² · f''' + 1e-16 / ε ≈ 1e-9.
      CHECK(allclose(J[i][j], numerical, 1e-8, 1e-6));
    }
  // The second output does not depend on x: its Jacobian there is zeros, not an error.
  CHECK(allclose(J[1][0], zeros({2, 3}, kFloat64), 0.0, 0.0));

  // jvp and vjp of several tensors agree with the Jacobians: J u = Σⱼ Jᵢⱼ uⱼ, vᵀJ = Σᵢ vᵢᵀ Jᵢⱼ.
  std::vector<Tensor> u{randn64({2, 3}, 11), randn64({4, 3}, 12), randn64({4}, 13), randn64({2, 4}, 14)};
  std::vector<Tensor> v{randn64({2, 2}, 15), randn64({}, 16)};
  AF::Product jv = AF::jvp(mlp, inputs, u);
  AF::Product vj = AF::vjp(mlp, inputs, v);
  for (size_t i = 0; i < 2; ++i) {
    Tensor sum = zeros(jv.value[i].shape(), kFloat64);
    for (size_t j = 0; j < 4; ++j)
      sum = sum + J[i][j].reshape({jv.value[i].numel(), u[j].numel()}).matmul(u[j].reshape({-1})).reshape(jv.value[i].shape());
    CHECK(allclose(jv.value[i], sum, 1e-12, 1e-10));
  }
  for (size_t j = 0; j < 4; ++j) {
    Tensor sum = zeros(inputs[j].shape(), kFloat64);
    for (size_t i = 0; i < 2; ++i)
      sum = sum + v[i].reshape({1, -1}).matmul(J[i][j].reshape({v[i].numel(), inputs[j].numel()})).reshape(inputs[j].shape());
    CHECK(allclose(vj.value[j], sum, 1e-12, 1e-10));
  }

  // The Hessian of a loss of the MLP, block by block, against finite differences of its gradient.
  AF::ScalarFunction loss = [&](const std::vector<Tensor>& in) { return mlp(in)[0].square().sum(); };
  AF::Function gradient = [&](const std::vector<Tensor>& in) {
    return AF::vjp([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{loss(a)}; }, in).value;
  };
  std::vector<std::vector<Tensor>> H = AF::hessian(loss, inputs);
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = 0; j < 4; ++j) {
      CAPTURE(i);
      CAPTURE(j);
      CHECK(allclose(H[i][j], numerical_jacobian(gradient, inputs, i, j), 1e-7, 1e-6));
      // Symmetric: H[i][j] is H[j][i] with the index groups swapped.
      Tensor swapped = H[j][i].reshape({inputs[j].numel(), inputs[i].numel()}).t().reshape(H[i][j].shape());
      CHECK(allclose(H[i][j], swapped, 1e-12, 1e-10));
    }
  std::vector<Tensor> w{randn64({2, 3}, 17), randn64({4, 3}, 18), randn64({4}, 19), randn64({2, 4}, 20)};
  AF::Product hv = AF::hvp(loss, inputs, w), vh = AF::vhp(loss, inputs, w);
  for (size_t i = 0; i < 4; ++i) {
    Tensor sum = zeros(inputs[i].shape(), kFloat64);
    for (size_t j = 0; j < 4; ++j)
      sum = sum + H[i][j].reshape({inputs[i].numel(), inputs[j].numel()}).matmul(w[j].reshape({-1})).reshape(inputs[i].shape());
    CHECK(allclose(hv.value[i], sum, 1e-12, 1e-10));
    CHECK(allclose(vh.value[i], sum, 1e-12, 1e-10));  // H is symmetric
  }
}

TEST_CASE("create_graph makes the results differentiable, without it they are plain and inputs are untouched") {
  Tensor x = tensor({0.5, -1.0, 2.0}, TensorOptions(kFloat64).requires_grad());
  AF::Function cube = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0].pow(3.0).sum()}; };
  AF::Product plain = AF::vjp(cube, {x});
  CHECK_FALSE(plain.value[0].requires_grad());
  CHECK(allclose(plain.value[0], 3.0 * x.detach().square()));
  CHECK_FALSE(x.grad().defined());  // .grad is not touched
  AF::Product graph = AF::vjp(cube, {x}, {}, /*create_graph=*/true);
  REQUIRE(graph.value[0].requires_grad());
  // d/dx Σ 3x² = 6x, through the vjp's graph back to x itself
  Tensor second = autograd::grad({graph.value[0].sum()}, {x})[0];
  CHECK(allclose(second, 6.0 * x.detach()));
  // jacobian with create_graph: d/dx of Σ J = d/dx Σ 3x² again
  Tensor J = AF::jacobian([](const Tensor& t) { return t.pow(3.0); }, x, true);
  CHECK(J.requires_grad());
  CHECK(allclose(autograd::grad({J.sum()}, {x})[0], 6.0 * x.detach()));
}

TEST_CASE("functional errors name the function and the shapes") {
  Tensor x = randn64({3}, 21);
  AF::Function f = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 2.0}; };
  CHECK(contains(error_message([&] { AF::vjp(f, {x}); }), "vjp: v can be left out only when"));
  CHECK(contains(error_message([&] { AF::vjp(f, {x}, {randn64({2}, 1)}); }), "vjp: v 0 has shape [2], its output has shape [3]"));
  CHECK(contains(error_message([&] { AF::jvp(f, {x}, {x, x}); }), "jvp: 2 u for 1 inputs"));
  CHECK(contains(error_message([&] { AF::hessian([](const std::vector<Tensor>& in) { return in[0] * 1.0; }, {x}); }),
                 "hessian: the function must return a one-element tensor, got shape [3]"));
  CHECK(contains(error_message([&] { AF::jacobian(f, {arange(3)}); }), "jacobian: input 0 must be a defined floating tensor"));
}
