// Derivatives of whole functions, with torch.autograd.functional's meaning. A function takes
// several tensors and returns several (or one scalar, for hessian, hvp, vhp):
//
//   auto f = [](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {in[0].matmul(in[1]).tanh()}; };
//   auto J = autograd::functional::jacobian(f, {a, b});   // J[0][1]: ∂f₀/∂b, shape f₀.shape + b.shape
//
//   vjp(f, x, v)     vᵀ J            one tensor per input      (one backward)
//   jvp(f, x, u)     J u             one tensor per output     (two backwards, see below)
//   jacobian(f, x)   J[i][j] = ∂fᵢ/∂xⱼ, shape fᵢ.shape + xⱼ.shape   (one backward per output element)
//   hessian(f, x)    H[i][j] = ∂²f/∂xᵢ∂xⱼ, shape xᵢ.shape + xⱼ.shape  (f returns a one-element tensor)
//   vhp(f, x, v)     vᵀ H            one tensor per input
//   hvp(f, x, v)     H v             one tensor per input (equal to vhp: H is symmetric)
//
// jvp has no forward mode here: it is computed by the double-vjp trick. With a dummy u
// (requiring grad), g(u) = Jᵀu is a vjp built with create_graph, linear in u; its own vjp with
// v is (∂g/∂u)ᵀ v = J v. It costs two backward passes and needs every op on the way to have a
// differentiable backward, which cppgrad's ops all do (gradgradcheck checks each); one
// mechanism instead of a second, forward-mode implementation of every op.
//
// The inputs are not changed and their .grad is not touched. Without create_graph the results
// are plain tensors (no graph); with it they can be differentiated again, also with respect to
// inputs that require grad. An input the outputs do not depend on gets zeros.
#pragma once

#include <functional>
#include <vector>

#include "node.h"

namespace cppgrad::autograd::functional {

using Function = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
using ScalarFunction = std::function<Tensor(const std::vector<Tensor>&)>;

// What vjp, jvp, vhp and hvp return: the function's outputs, and the product.
struct Product {
  std::vector<Tensor> outputs;
  std::vector<Tensor> value;
};

// v: one tensor per output, shaped like it; may be left out when the only output has one element.
Product vjp(const Function& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& v = {},
            bool create_graph = false);
// u: one tensor per input, shaped like it; may be left out when the only input has one element.
Product jvp(const Function& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& u = {},
            bool create_graph = false);
std::vector<std::vector<Tensor>> jacobian(const Function& f, const std::vector<Tensor>& inputs, bool create_graph = false);
std::vector<std::vector<Tensor>> hessian(const ScalarFunction& f, const std::vector<Tensor>& inputs,
                                         bool create_graph = false);
Product vhp(const ScalarFunction& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& v,
            bool create_graph = false);
Product hvp(const ScalarFunction& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& v,
            bool create_graph = false);

// One input, one output: jacobian(f, x) has shape f(x).shape + x.shape, hessian(f, x) x.shape + x.shape.
Tensor jacobian(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, bool create_graph = false);
Tensor hessian(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, bool create_graph = false);

}  // namespace cppgrad::autograd::functional
