#include "autograd/gradcheck.h"

#include <algorithm>
#include <cmath>

#include "tensor/kernels.h"

namespace cppgrad {

namespace {

std::vector<size_t> checked_inputs(const std::vector<Tensor>& inputs, std::string_view op) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    CPPGRAD_CHECK(inputs[i].dtype() == kFloat64,
          "{}: input {} is {}; finite differences need float64 (convert with .to(kFloat64))", op, i,
          dtype_name(inputs[i].dtype()));
    // Perturbing one element of an expanded input moves every element that shares its memory, so
    // the finite differences would not be the partial derivatives (PyTorch refuses these too).
    bool overlapping = false;
    for (int64_t d = 0; d < inputs[i].dim(); ++d) overlapping = overlapping || (inputs[i].stride(d) == 0 && inputs[i].size(d) > 1);
    CPPGRAD_CHECK(!overlapping, "{}: input {} of shape {} has a dim of stride 0 (an expanded tensor): its elements share "
                  "memory, so finite differences cannot move one alone; pass .contiguous()", op, i,
                  shape_str(inputs[i].shape()));
    idx.push_back(i);
  }
  CPPGRAD_CHECK(!idx.empty(), "{}: no input requires grad, so there is nothing to check", op);
  return idx;
}

// Row-major multi-index of flat element j of `shape`.
std::vector<int64_t> unravel(int64_t j, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = j % shape[d];
    j /= shape[d];
  }
  return index;
}

Tensor evaluate(const GradcheckFunction& fn, const std::vector<Tensor>& inputs) {
  NoGradGuard no_grad;
  Tensor out = fn(inputs);
  CPPGRAD_CHECK(out.defined() && out.dtype() == kFloat64, "gradcheck: the function must return a float64 tensor");
  return kernels::contiguous(out);
}

// (f(x + ε d) − f(x − ε d)) / 2ε for a direction d: `move_to(s)` sets the input to x + s·ε·d
// computed from the saved x (s = +1, -1), and `move_to(0)` writes x's own bits back. So the
// input ends bit-identical, which x + ε − 2ε + ε in floating point would not be, and, written
// element by element with at<double>() (no kernel), its version counter never moves.
template <class MoveTo>
Tensor central_difference(const GradcheckFunction& fn, const std::vector<Tensor>& inputs, double eps, MoveTo move_to) {
  move_to(+1.0);
  Tensor plus = evaluate(fn, inputs);
  move_to(-1.0);
  Tensor minus = evaluate(fn, inputs);
  move_to(0.0);
  return kernels::binary(kernels::Binary::Div, kernels::binary(kernels::Binary::Sub, plus, minus),
                         full({}, 2 * eps, kFloat64));
}

// The ops of the graph below `out`, from the output down, each once ("; the graph's ops: TanhBackward,
// SwishBackward"), so that a failure names the op whose backward may be wrong.
std::string graph_ops(const Tensor& out) {
  if (!out.grad_fn()) return "";
  std::vector<std::string> names;
  std::vector<const autograd::Node*> stack{out.grad_fn().get()}, seen{out.grad_fn().get()};
  constexpr size_t kMaxNames = 12;
  bool more = false;
  while (!stack.empty()) {
    const autograd::Node* node = stack.back();
    stack.pop_back();
    const std::string name = node->name();
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      if (names.size() == kMaxNames) {
        more = true;
        break;
      }
      names.push_back(name);
    }
    for (auto it = node->next.rbegin(); it != node->next.rend(); ++it)
      if (it->node && std::find(seen.begin(), seen.end(), it->node.get()) == seen.end()) {
        seen.push_back(it->node.get());
        stack.push_back(it->node.get());
      }
  }
  return fmt::format("; the graph's ops: {}{}", fmt::join(names, ", "), more ? ", ..." : "");
}

bool close(double analytic, double numerical, const GradcheckOptions& o) {
  return std::abs(analytic - numerical) <= o.atol + o.rtol * std::abs(numerical);
}

// The analytic gradients of <out, v> with respect to each checked input (zeros when unused).
std::vector<Tensor> analytic_vjp(const Tensor& out, const Tensor& v, const std::vector<Tensor>& inputs,
                                 const std::vector<size_t>& idx) {
  std::vector<Tensor> wrt;
  for (size_t i : idx) wrt.push_back(inputs[i]);
  // An output that depends on no checked input (in gradgradcheck, a gradient that is constant,
  // as pow(x, 0)'s) has a zero Jacobian.
  std::vector<Tensor> grads(wrt.size());
  if (out.requires_grad())
    grads = autograd::grad({out}, wrt, {v}, /*retain_graph=*/true, false, /*allow_unused=*/true);
  for (size_t k = 0; k < grads.size(); ++k) {
    if (!grads[k].defined()) grads[k] = zeros(wrt[k].shape(), kFloat64);
    CPPGRAD_CHECK(grads[k].shape() == wrt[k].shape(), "gradcheck: gradient of shape {} for input {} of shape {}",
          shape_str(grads[k].shape()), idx[k], shape_str(wrt[k].shape()));
    grads[k] = kernels::contiguous(grads[k]);
  }
  return grads;
}

bool slow_check(const GradcheckFunction& fn, const std::vector<Tensor>& inputs, const std::vector<size_t>& idx,
                const GradcheckOptions& o) {
  Tensor out = fn(inputs);
  CPPGRAD_CHECK(out.dtype() == kFloat64, "gradcheck: the function must return a float64 tensor, got {}",
        dtype_name(out.dtype()));
  const int64_t n_out = out.numel();
  // Row r of each Jacobian, from a backward with a one-hot output gradient.
  std::vector<std::vector<Tensor>> rows(n_out);
  for (int64_t r = 0; r < n_out; ++r) {
    Tensor v = zeros(out.shape(), kFloat64);
    v.data<double>()[r] = 1.0;
    rows[r] = analytic_vjp(out, v, inputs, idx);
  }
  for (size_t k = 0; k < idx.size(); ++k) {
    const Tensor& x = inputs[idx[k]];
    for (int64_t j = 0; j < x.numel(); ++j) {
      double& element = x.at<double>(unravel(j, x.shape()));
      const double original = element;
      Tensor column = central_difference(fn, inputs, o.eps,
                                         [&](double s) { element = s == 0.0 ? original : original + s * o.eps; });
      const double* numerical = column.data<double>();
      for (int64_t r = 0; r < n_out; ++r) {
        double analytic = rows[r][k].data<double>()[j];
        if (!close(analytic, numerical[r], o))
          throw Error(fmt::format("gradcheck: Jacobian mismatch for input {} (shape {}) at input element {} and "
                                  "output element {}: analytic {:.10g} vs numerical {:.10g}{}",
                                  idx[k], shape_str(x.shape()), shape_str(unravel(j, x.shape())), r, analytic,
                                  numerical[r], graph_ops(out)));
      }
    }
  }
  return true;
}

bool fast_check(const GradcheckFunction& fn, const std::vector<Tensor>& inputs, const std::vector<size_t>& idx,
                const GradcheckOptions& o) {
  Generator gen(o.seed);
  Tensor out = fn(inputs);
  Tensor v = randn(out.shape(), kFloat64, gen);
  std::vector<Tensor> vjp = analytic_vjp(out, v, inputs, idx);
  for (size_t k = 0; k < idx.size(); ++k) {
    const Tensor& x = inputs[idx[k]];
    Tensor u = randn(x.shape(), kFloat64, gen);
    // analytic vᵀ J u = <vᵀJ, u>;  numerical: <v, (f(x+εu) − f(x−εu)) / 2ε>
    double analytic = kernels::sum(kernels::binary(kernels::Binary::Mul, vjp[k], u), {}, false).item<double>();
    const std::vector<double> original = kernels::contiguous(x).to_vector<double>();
    const std::vector<double> direction = kernels::contiguous(u).to_vector<double>();
    Tensor ju = central_difference(fn, inputs, o.eps, [&](double s) {
      for (int64_t j = 0; j < x.numel(); ++j) {
        const size_t k = static_cast<size_t>(j);
        x.at<double>(unravel(j, x.shape())) = s == 0.0 ? original[k] : original[k] + s * o.eps * direction[k];
      }
    });
    double numerical = kernels::sum(kernels::binary(kernels::Binary::Mul, ju, v), {}, false).item<double>();
    if (!close(analytic, numerical, o))
      throw Error(fmt::format("gradcheck (fast mode): projection vᵀJu mismatch for input {} (shape {}): analytic "
                              "{:.10g} vs numerical {:.10g}{}",
                              idx[k], shape_str(x.shape()), analytic, numerical, graph_ops(out)));
  }
  return true;
}

}  // namespace

bool gradcheck(const GradcheckFunction& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  std::vector<size_t> idx = checked_inputs(inputs, "gradcheck");
  return options.fast_mode ? fast_check(fn, inputs, idx, options) : slow_check(fn, inputs, idx, options);
}

bool gradgradcheck(const GradcheckFunction& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  std::vector<size_t> idx = checked_inputs(inputs, "gradgradcheck");
  Shape out_shape;
  {
    NoGradGuard no_grad;
    out_shape = fn(inputs).shape();
  }
  Generator gen(options.seed + 1);
  Tensor v = randn(out_shape, TensorOptions(kFloat64).requires_grad(), gen);
  // The function checked: (x, v) -> all of vᵀ ∂f/∂x, flattened and joined.
  auto first_gradients = [&](const std::vector<Tensor>& xs_and_v) {
    autograd::GradModeGuard grad_mode(true);  // also while finite differences evaluate it
    std::vector<Tensor> xs(xs_and_v.begin(), xs_and_v.end() - 1);
    Tensor out = fn(xs);
    std::vector<Tensor> wrt;
    for (size_t i : idx) wrt.push_back(xs[i]);
    std::vector<Tensor> grads = autograd::grad({out}, wrt, {xs_and_v.back()}, /*retain_graph=*/true,
                                               /*create_graph=*/true, /*allow_unused=*/true);
    std::vector<Tensor> flat;
    for (size_t k = 0; k < grads.size(); ++k)
      flat.push_back(grads[k].defined() ? grads[k].reshape({-1}) : zeros({wrt[k].numel()}, kFloat64));
    return cat(flat, 0);
  };
  std::vector<Tensor> all = inputs;
  all.push_back(v);
  return gradcheck(first_gradients, all, options);
}

}  // namespace cppgrad
