// nn::functional_call (torch.func.functional_call): a Hessian-vector product of a model's loss
// with respect to parameters passed in, against PyTorch's (scripts/make_parity_refs.py) and
// against finite differences of the gradient; the module restored after the call and after a
// throw; tied weights; buffers updated where they were given; the errors.
#include <doctest/doctest.h>

#include "cppgrad.h"
#include "nn_helpers.h"
#include "parity_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
namespace F = cppgrad::nn::functional;
using namespace nntest;
using namespace paritytest;

namespace {

std::shared_ptr<Sequential> mlp(int64_t in, int64_t hidden, int64_t out) {
  auto model = std::make_shared<Sequential>(std::make_shared<Linear>(in, hidden), std::make_shared<Tanh>(),
                                            std::make_shared<Linear>(hidden, out));
  model->to(kFloat64);
  return model;
}

// The loss's gradient with respect to the tensors given, kept differentiable (create_graph).
std::vector<Tensor> loss_gradient(Module& model, const std::map<std::string, Tensor>& params, const Tensor& x,
                                  const Tensor& target, bool create_graph) {
  Tensor loss = F::mse_loss(functional_call(static_cast<Sequential&>(model), params, x), target);
  std::vector<Tensor> inputs;
  for (const auto& [name, p] : params) inputs.push_back(p);
  return autograd::grad({loss}, inputs, {}, /*retain_graph=*/false, create_graph);
}

}  // namespace

TEST_CASE("parity with PyTorch: functional_call's output, gradient and Hessian-vector product, BatchNorm's buffers given") {
  const SafetensorsContents file = load_safetensors(kData + "/functional_call_hvp.safetensors");
  auto model = std::make_shared<Sequential>(std::make_shared<Linear>(3, 4), std::make_shared<BatchNorm1d>(4),
                                            std::make_shared<Tanh>(), std::make_shared<Linear>(4, 2));
  model->to(kFloat64);
  model->load_state_dict(params_of(file));
  const NamedTensors own_before = model->state_dict();
  std::map<std::string, Tensor> given;
  std::vector<std::string> parameter_names;
  for (const auto& [name, t] : file.tensors) {
    if (name.rfind("in.p.", 0) != 0) continue;
    const std::string key = name.substr(5);
    given[key] = t.clone();
    if (t.is_floating_point() && key.find("running") == std::string::npos) {
      given[key].requires_grad_();
      parameter_names.push_back(key);
    }
  }
  REQUIRE(parameter_names.size() == 6);  // two Linears' and BatchNorm's weight and bias
  Tensor output = functional_call(model, given, file.at("in.x"));
  expect_close(output, file, "out.output");
  Tensor loss = F::mse_loss(output, file.at("in.target"));
  expect_close(loss, file, "out.loss");
  std::vector<Tensor> params, v;
  for (const std::string& name : parameter_names) params.push_back(given[name]), v.push_back(file.at("in.v." + name));
  std::vector<Tensor> grads = autograd::grad({loss}, params, {}, false, /*create_graph=*/true);
  Tensor grad_dot_v = zeros({}, kFloat64);
  for (size_t i = 0; i < grads.size(); ++i) grad_dot_v = grad_dot_v + (grads[i] * v[i]).sum();
  std::vector<Tensor> hvp = autograd::grad({grad_dot_v}, params);
  // The first Linear's bias shifts each channel BatchNorm then centres: its gradient and its
  // row of H·v are 0 up to rounding (1e-17 on both sides), so absolute differences are compared,
  // against values of order 1: 1e-10 of them.
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(parameter_names[i]);
    CHECK(max_abs_diff(grads[i], file.at("out.grad." + parameter_names[i])) < 1e-10);
    CHECK(max_abs_diff(hvp[i], file.at("out.hvp." + parameter_names[i])) < 1e-10);
  }
  // BatchNorm in training updated the buffers it was given, and not its own.
  expect_close(given["1.running_mean"], file, "state.1.running_mean");
  expect_close(given["1.running_var"], file, "state.1.running_var");
  CHECK(values(given["1.num_batches_tracked"]) == values(file.at("state.1.num_batches_tracked")));
  const NamedTensors own_after = model->state_dict();
  REQUIRE(own_after.size() == own_before.size());
  for (size_t i = 0; i < own_after.size(); ++i) {
    INFO(own_after[i].first);
    CHECK(own_after[i].second.is_same(own_before[i].second));  // the module's own tensors are back
    CHECK(max_abs_diff(own_after[i].second, file.at("param." + own_after[i].first)) == 0.0);  // and untouched
  }
}

TEST_CASE("a Hessian-vector product through functional_call equals the gradient's finite difference along v") {
  auto model = mlp(3, 5, 2);
  Tensor x = randn64({7, 3}, 9301), target = randn64({7, 2}, 9302);
  std::map<std::string, Tensor> params, v;
  uint64_t seed = 9310;
  for (const auto& [name, p] : model->named_parameters()) {
    params[name] = randn64(p.shape(), ++seed, true);
    v[name] = randn64(p.shape(), ++seed);
  }
  std::vector<Tensor> grads = loss_gradient(*model, params, x, target, /*create_graph=*/true);
  Tensor grad_dot_v = zeros({}, kFloat64);
  size_t i = 0;
  for (const auto& [name, p] : params) grad_dot_v = grad_dot_v + (grads[i++] * v[name]).sum();
  std::vector<Tensor> params_list;
  for (const auto& [name, p] : params) params_list.push_back(p);
  std::vector<Tensor> hvp = autograd::grad({grad_dot_v}, params_list);
  // (∇L(p + εv) − ∇L(p − εv)) / 2ε = H·v + O(ε²): with ε = 1e-4 the truncation is ~1e-8 of the
  // third derivatives, and the rounding ~1e-16 / 1e-4; a wrong second derivative is O(1).
  const double eps = 1e-4;
  auto shifted = [&](double sign) {
    std::map<std::string, Tensor> moved;
    for (const auto& [name, p] : params) moved[name] = (p.detach() + v[name] * (sign * eps)).requires_grad_();
    return loss_gradient(*model, moved, x, target, false);
  };
  std::vector<Tensor> plus = shifted(1.0), minus = shifted(-1.0);
  for (size_t k = 0; k < hvp.size(); ++k) {
    INFO("parameter " << k);
    CHECK(max_abs_diff(hvp[k], (plus[k] - minus[k]) / (2 * eps)) < 1e-6);
  }
}

TEST_CASE("functional_call restores the module after a throw, replaces a tied tensor under either name") {
  auto model = mlp(3, 4, 2);
  const Tensor own = model->named_parameters().at(0).second;
  std::map<std::string, Tensor> given{{"0.weight", randn64({4, 3}, 9401, true)}};
  CHECK_THROWS_AS(functional_call(model, given, ones({2, 5}, kFloat64)), Error);  // 5 features, not 3
  CHECK(model->named_parameters().at(0).second.is_same(own));
  auto first = std::static_pointer_cast<Linear>(model->children().at(0));
  CHECK(first->weight.is_same(own));

  // Tied: a second Linear whose weight is the first's; replacing it by one name replaces both.
  struct Twice : Module {
    Twice() {
      a = register_module("a", std::make_shared<Linear>(2, 2, false));
      b = register_module("b", std::make_shared<Linear>(2, 2, false));
      b->weight = a->weight;
      to(kFloat64);
    }
    Tensor forward(const Tensor& x) { return b->forward(a->forward(x)); }
    std::shared_ptr<Linear> a, b;
  } twice;
  Tensor w = randn64({2, 2}, 9402, true), x = randn64({3, 2}, 9403);
  Tensor expected = x.matmul(w.t()).matmul(w.t());
  CHECK(max_abs_diff(functional_call(twice, {{"a.weight", w}}, x), expected) == 0.0);
  CHECK(max_abs_diff(functional_call(twice, {{"b.weight", w}}, x), expected) == 0.0);
  CHECK(twice.b->weight.is_same(twice.a->weight));
  CHECK_FALSE(twice.a->weight.is_same(w));
  CHECK(check::contains(error_message([&] { functional_call(twice, {{"a.weight", w}, {"b.weight", w * 2.0}}, x); }),
                        "name one tied tensor"));
}

TEST_CASE("functional_call refuses unknown names, other shapes, and tensors its forward cannot see") {
  auto model = mlp(3, 4, 2);
  Tensor x = ones({2, 3}, kFloat64);
  std::string unknown = error_message([&] { functional_call(model, {{"0.wieght", zeros({4, 3}, kFloat64)}}, x); });
  CHECK(contains(unknown, "Sequential has no parameter or buffer '0.wieght'"));
  CHECK(contains(unknown, "0.weight, 0.bias, 2.weight, 2.bias"));
  CHECK(contains(error_message([&] { functional_call(model, {{"2.bias", zeros({3}, kFloat64)}}, x); }),
                 "'2.bias' is [2] in the Sequential, the tensor given is [3]"));
  // A module that keeps its parameter in a plain Tensor: refused, not silently ignored.
  struct Plain : Module {
    Plain() { w = register_parameter("w", ones({2}, kFloat64)); }
    Tensor forward(const Tensor& x) { return x * w; }
    Tensor w;
  } plain;
  CHECK(contains(error_message([&] { functional_call(plain, {{"w", zeros({2}, kFloat64)}}, ones({2}, kFloat64)); }),
                 "kept in no nn::Parameter member"));
}
