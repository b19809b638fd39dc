// Derivatives of whole functions (autograd/functional.h), built on autograd::grad.
#include "autograd/functional.h"

namespace cppgrad::autograd::functional {

namespace {

// The points the function is differentiated at, each requiring grad. With create_graph an input
// that already requires grad is used as it is, so the results stay connected to it; otherwise a
// detached alias (same values, no history) that requires grad.
std::vector<Tensor> prepare_inputs(const std::vector<Tensor>& inputs, bool create_graph, const char* op) {
  CPPGRAD_CHECK(!inputs.empty(), "{}: no inputs given", op);
  std::vector<Tensor> xs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    CPPGRAD_CHECK(x.defined() && x.is_floating_point(), "{}: input {} must be a defined floating tensor", op, i);
    xs.push_back(create_graph && x.requires_grad() ? x : x.detach().requires_grad_());
  }
  return xs;
}

// Checks `given` against `like` (one per tensor, same shapes); fills in ones when it is empty
// and `like` is a single one-element tensor.
std::vector<Tensor> vectors_like(const std::vector<Tensor>& given, const std::vector<Tensor>& like, const char* op,
                                 const char* what, const char* of) {
  if (given.empty()) {
    CPPGRAD_CHECK(like.size() == 1 && like[0].numel() == 1,
                  "{}: {} can be left out only when there is one {} with one element; there are {}", op, what, of,
                  like.size());
    return {ones_like(like[0])};
  }
  CPPGRAD_CHECK(given.size() == like.size(), "{}: {} {} for {} {}s", op, given.size(), what, like.size(), of);
  for (size_t i = 0; i < given.size(); ++i)
    CPPGRAD_CHECK(given[i].defined() && given[i].shape() == like[i].shape(), "{}: {} {} has shape {}, its {} has shape {}",
                  op, what, i, given[i].defined() ? shape_str(given[i].shape()) : "(undefined)", of,
                  shape_str(like[i].shape()));
  return given;
}

// Σᵢ vᵢᵀ ∂outputsᵢ/∂xs, one tensor per x; zeros where nothing depends on x. Outputs that do not
// require grad (constants) contribute nothing.
std::vector<Tensor> gradients(const std::vector<Tensor>& outputs, const std::vector<Tensor>& v, const std::vector<Tensor>& xs,
                              bool create_graph) {
  std::vector<Tensor> roots, root_grads;
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].defined() && outputs[i].requires_grad()) {
      roots.push_back(outputs[i]);
      root_grads.push_back(i < v.size() ? v[i] : Tensor());
    }
  std::vector<Tensor> g(xs.size());
  if (!roots.empty())
    g = autograd::grad(roots, xs, root_grads, /*retain_graph=*/true, create_graph, /*allow_unused=*/true);
  for (size_t k = 0; k < g.size(); ++k)
    if (!g[k].defined()) g[k] = zeros_like(xs[k]);
  return g;
}

// J u by the double-vjp trick (see the header): g(d) = Jᵀd for a dummy d, then (∂g/∂d)ᵀ u = J u.
std::vector<Tensor> jacobian_vector(const std::vector<Tensor>& outputs, const std::vector<Tensor>& xs,
                                    const std::vector<Tensor>& u, bool create_graph) {
  std::vector<Tensor> dummies;
  for (const Tensor& out : outputs) dummies.push_back(zeros_like(out).requires_grad_());
  std::vector<Tensor> g = gradients(outputs, dummies, xs, /*create_graph=*/true);  // Jᵀd, linear in d
  return gradients(g, u, dummies, create_graph);
}

// J[i][j] = ∂outputsᵢ/∂xsⱼ, shape outputsᵢ.shape + xsⱼ.shape, one backward per output element.
std::vector<std::vector<Tensor>> jacobian_of(const std::vector<Tensor>& outputs, const std::vector<Tensor>& xs,
                                             bool create_graph) {
  std::vector<std::vector<Tensor>> J(outputs.size(), std::vector<Tensor>(xs.size()));
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    const int64_t n = out.numel();
    std::vector<std::vector<Tensor>> rows(xs.size());  // rows[j][r] = ∂out[r]/∂xs[j]
    for (int64_t r = 0; r < n && out.requires_grad(); ++r) {
      Tensor one_hot = zeros({n}, out.dtype());
      {
        NoGradGuard no_grad;
        one_hot.narrow(0, r, 1).fill_(1.0);
      }
      std::vector<Tensor> g = gradients({out}, {one_hot.reshape(out.shape())}, xs, create_graph);
      for (size_t j = 0; j < xs.size(); ++j) rows[j].push_back(g[j]);
    }
    for (size_t j = 0; j < xs.size(); ++j) {
      Shape shape = out.shape();
      shape.insert(shape.end(), xs[j].shape().begin(), xs[j].shape().end());
      J[i][j] = rows[j].empty() ? zeros(shape, xs[j].dtype()) : stack(rows[j], 0).reshape(shape);
    }
  }
  return J;
}

Tensor scalar_output(const ScalarFunction& f, const std::vector<Tensor>& xs, const char* op) {
  Tensor y = f(xs);
  CPPGRAD_CHECK(y.defined() && y.numel() == 1, "{}: the function must return a one-element tensor, got shape {}", op,
                y.defined() ? shape_str(y.shape()) : "(undefined)");
  return y;
}

std::vector<Tensor> finished(std::vector<Tensor> ts, bool create_graph) {
  if (!create_graph)
    for (Tensor& t : ts) t = t.detach();
  return ts;
}

}  // namespace

Product vjp(const Function& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& v, bool create_graph) {
  GradModeGuard grad_on(true);
  std::vector<Tensor> xs = prepare_inputs(inputs, create_graph, "vjp");
  std::vector<Tensor> outputs = f(xs);
  std::vector<Tensor> vs = vectors_like(v, outputs, "vjp", "v", "output");
  // vᵀJ = Σᵢ vᵢᵀ ∂fᵢ/∂x: one backward from every output at once
  std::vector<Tensor> value = gradients(outputs, vs, xs, create_graph);
  return {finished(outputs, create_graph), finished(value, create_graph)};
}

Product jvp(const Function& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& u, bool create_graph) {
  GradModeGuard grad_on(true);
  std::vector<Tensor> xs = prepare_inputs(inputs, create_graph, "jvp");
  std::vector<Tensor> us = vectors_like(u, inputs, "jvp", "u", "input");
  std::vector<Tensor> outputs = f(xs);
  std::vector<Tensor> value = jacobian_vector(outputs, xs, us, create_graph);
  return {finished(outputs, create_graph), finished(value, create_graph)};
}

std::vector<std::vector<Tensor>> jacobian(const Function& f, const std::vector<Tensor>& inputs, bool create_graph) {
  GradModeGuard grad_on(true);
  std::vector<Tensor> xs = prepare_inputs(inputs, create_graph, "jacobian");
  std::vector<std::vector<Tensor>> J = jacobian_of(f(xs), xs, create_graph);
  for (auto& row : J) row = finished(row, create_graph);
  return J;
}

std::vector<std::vector<Tensor>> hessian(const ScalarFunction& f, const std::vector<Tensor>& inputs, bool create_graph) {
  GradModeGuard grad_on(true);
  std::vector<Tensor> xs = prepare_inputs(inputs, create_graph, "hessian");
  // H = the Jacobian of the gradient, which is built with create_graph so it can be differentiated
  std::vector<Tensor> g = gradients({scalar_output(f, xs, "hessian")}, {}, xs, /*create_graph=*/true);
  std::vector<std::vector<Tensor>> H = jacobian_of(g, xs, create_graph);
  for (auto& row : H) row = finished(row, create_graph);
  return H;
}

Product vhp(const ScalarFunction& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& v, bool create_graph) {
  GradModeGuard grad_on(true);
  std::vector<Tensor> xs = prepare_inputs(inputs, create_graph, "vhp");
  std::vector<Tensor> vs = vectors_like(v, inputs, "vhp", "v", "input");
  Tensor y = scalar_output(f, xs, "vhp");
  std::vector<Tensor> g = gradients({y}, {}, xs, /*create_graph=*/true);
  // vᵀH = ∂(gᵀv)/∂x: a vjp of the gradient
  std::vector<Tensor> value = gradients(g, vs, xs, create_graph);
  return {finished({y}, create_graph), finished(value, create_graph)};
}

Product hvp(const ScalarFunction& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& v, bool create_graph) {
  GradModeGuard grad_on(true);
  std::vector<Tensor> xs = prepare_inputs(inputs, create_graph, "hvp");
  std::vector<Tensor> vs = vectors_like(v, inputs, "hvp", "v", "input");
  Tensor y = scalar_output(f, xs, "hvp");
  std::vector<Tensor> g = gradients({y}, {}, xs, /*create_graph=*/true);
  // H v: a jvp of the gradient, by the double-vjp trick (as torch.autograd.functional.hvp)
  std::vector<Tensor> value = jacobian_vector(g, xs, vs, create_graph);
  return {finished({y}, create_graph), finished(value, create_graph)};
}

Tensor jacobian(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, bool create_graph) {
  return jacobian([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; }, {x}, create_graph)[0][0];
}

Tensor hessian(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, bool create_graph) {
  return hessian([&](const std::vector<Tensor>& in) { return f(in[0]); }, {x}, create_graph)[0][0];
}

}  // namespace cppgrad::autograd::functional
