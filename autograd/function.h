// autograd::Function: a differentiable op written in user code, as torch::autograd::Function.
// A fused kernel of your own (a swish, a custom loss) gets a backward you write:
//
//   struct Swish : autograd::Function<Swish> {
//     // y = x · σ(β x)
//     static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x, double beta) {
//       ctx.save_for_backward({x});
//       ctx.saved_data["beta"] = beta;
//       return x * (x * beta).sigmoid();
//     }
//     // dx = dy · (σ + β x σ (1 − σ)), σ = σ(β x); one gradient per forward argument
//     static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& grad_outputs) {
//       Tensor x = ctx.get_saved_variables()[0];
//       double beta = ctx.saved_data["beta"].to_double();
//       Tensor s = (x * beta).sigmoid();
//       return {grad_outputs[0] * (s + x * beta * s * (1.0 - s)), Tensor()};  // none for beta
//     }
//   };
//   Tensor y = Swish::apply(x, 1.5);          // y.grad_fn()->name() == "SwishBackward"
//
// - forward runs under no-grad, with any arguments: tensors become the op's inputs, anything
//   else is passed through. It returns a Tensor or a std::vector<Tensor> (several outputs).
// - backward gets one gradient per output (zeros for an output that received none; undefined
//   for a non-differentiable one) and returns one per forward argument: an undefined Tensor for
//   a non-tensor argument or an input that needs none (ctx.needs_input_grad(i) says which).
// - Written with cppgrad's differentiable ops, backward is itself differentiable: create_graph
//   gives second derivatives (gradgradcheck works on it).
// - Tensors saved with save_for_backward are checked when backward reads them, as the built-in
//   ops' are: changing one in place in between is an error naming the op.
// - The op is named by a static `name()` if Derived has one, else by its class name.
//
// The op is one node of the graph with one output per tensor forward returns: each
// differentiable output has it as grad_fn, and backward runs once, with every output's gradient.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <variant>
#include <vector>

#include "node.h"
#include "trace.h"

namespace cppgrad::autograd {

template <class Derived>
struct Function;

// A plain value a forward keeps for its backward (torch's IValue, for the usual kinds).
class SavedValue {
 public:
  SavedValue() = default;
  SavedValue(double v) : value_(v) {}                             // NOLINT: implicit, as an assignment
  SavedValue(int v) : value_(static_cast<int64_t>(v)) {}          // NOLINT
  SavedValue(int64_t v) : value_(v) {}                            // NOLINT
  SavedValue(bool v) : value_(v) {}                               // NOLINT
  SavedValue(std::string v) : value_(std::move(v)) {}             // NOLINT
  SavedValue(const char* v) : value_(std::string(v)) {}           // NOLINT
  SavedValue(std::vector<int64_t> v) : value_(std::move(v)) {}    // NOLINT: a shape, dims
  SavedValue(std::vector<double> v) : value_(std::move(v)) {}     // NOLINT

  // Each throws cppgrad::Error if the value is of another kind (an int64 reads as a double too).
  double to_double() const;
  int64_t to_int() const;
  bool to_bool() const;
  const std::string& to_string() const;
  const std::vector<int64_t>& to_int_list() const;
  const std::vector<double>& to_double_list() const;

 private:
  std::variant<std::monostate, double, int64_t, bool, std::string, std::vector<int64_t>, std::vector<double>> value_;
};

class FunctionCtx {
 public:
  // In forward: the tensors backward will need (inputs or outputs).
  void save_for_backward(std::vector<Tensor> tensors);
  // In backward: those tensors, in order. An output comes back as the op's output (with the op
  // as grad_fn when a graph is being built), so second derivatives see it.
  const std::vector<Tensor>& get_saved_variables() const;
  // Plain values (β, a dim, a shape) by name.
  std::map<std::string, SavedValue> saved_data;
  // In forward: outputs that have no gradient (indices, masks); integer outputs never do.
  void mark_non_differentiable(const std::vector<Tensor>& outputs);
  // Whether forward argument i (counting every argument after ctx) is a tensor that needs a
  // gradient; backward may skip computing the others and return an undefined Tensor.
  bool needs_input_grad(size_t argument) const;

 private:
  template <class Derived>
  friend struct Function;
  friend struct FunctionRecorder;
  std::string op_;
  std::vector<Tensor> to_save_;
  std::vector<Tensor> non_differentiable_;
  std::vector<bool> needs_input_grad_;
  std::vector<Tensor> unpacked_;  // set while backward runs
  bool in_backward_ = false;
};

// The part of Function<Derived> that does not depend on Derived (autograd/function.cpp).
struct FunctionRecorder {
  using UserBackward = std::function<std::vector<Tensor>(FunctionCtx&, const std::vector<Tensor>&)>;
  // `arguments` holds one entry per forward argument: the tensor, or an undefined Tensor for a
  // non-tensor; `is_tensor` tells them apart. Returns the outputs, recorded in the graph.
  static std::vector<Tensor> record(std::shared_ptr<FunctionCtx> ctx, std::vector<Tensor> outputs,
                                    const std::vector<Tensor>& arguments, const std::vector<bool>& is_tensor,
                                    UserBackward backward);
};

// "Swish" for struct Swish, "Block<3>" for Block<3>: the class name without its namespaces.
std::string short_type_name(const std::type_info& type);

template <class Derived>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
    static_assert((!std::is_same_v<std::decay_t<Args>, std::vector<Tensor>> && ...),
                  "autograd::Function::apply: pass tensors one by one, not as a std::vector<Tensor>");
    auto ctx = std::make_shared<FunctionCtx>();
    if constexpr (requires { Derived::name(); })
      ctx->op_ = Derived::name();
    else
      ctx->op_ = short_type_name(typeid(Derived));
    std::vector<Tensor> arguments;
    std::vector<bool> is_tensor;
    (collect(arguments, is_tensor, args), ...);
    for (size_t i = 0; i < arguments.size(); ++i)
      ctx->needs_input_grad_.push_back(is_tensor[i] && arguments[i].defined() && arguments[i].requires_grad() &&
                                       GradMode::is_enabled());

    using Result = decltype(Derived::forward(*ctx, std::forward<Args>(args)...));
    static_assert(std::is_same_v<Result, Tensor> || std::is_same_v<Result, std::vector<Tensor>>,
                  "autograd::Function: forward must return a Tensor or a std::vector<Tensor>");
    TraceScope trace;  // one op to a trace (autograd/trace.h), named as the Function is: ONNX has no form of it
    std::vector<Tensor> outputs;
    {
      NoGradGuard no_grad;  // forward's own ops record nothing
      if constexpr (std::is_same_v<Result, Tensor>)
        outputs = {Derived::forward(*ctx, std::forward<Args>(args)...)};
      else
        outputs = Derived::forward(*ctx, std::forward<Args>(args)...);
    }
    outputs = FunctionRecorder::record(ctx, std::move(outputs), arguments, is_tensor,
                                       [](FunctionCtx& c, const std::vector<Tensor>& grads) {
                                         return Derived::backward(c, grads);
                                       });
    if (!outputs.empty()) trace.note(outputs[0], [&] { return TracedOp(ctx->op_, arguments); });
    if constexpr (std::is_same_v<Result, Tensor>)
      return outputs[0];
    else
      return outputs;
  }

 private:
  template <class A>
  static void collect(std::vector<Tensor>& arguments, std::vector<bool>& is_tensor, const A& arg) {
    if constexpr (std::is_same_v<std::decay_t<A>, Tensor>) {
      arguments.push_back(arg);
      is_tensor.push_back(true);
    } else {
      arguments.emplace_back();
      is_tensor.push_back(false);
    }
  }
};

}  // namespace cppgrad::autograd
