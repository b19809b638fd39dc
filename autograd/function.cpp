// Recording a user-written op (autograd/function.h) as one node of the graph.
#include "autograd/function.h"

#include <cxxabi.h>

#include <cstdlib>
#include <utility>

namespace cppgrad::autograd {

// ---- SavedValue -------------------------------------------------------------------------------

namespace {
template <class T>
const T& saved_as(const auto& value, const char* kind) {
  if (const T* v = std::get_if<T>(&value)) return *v;
  throw Error(fmt::format("FunctionCtx::saved_data: the value is not {}", kind));
}
}  // namespace

double SavedValue::to_double() const {
  if (const int64_t* v = std::get_if<int64_t>(&value_)) return static_cast<double>(*v);
  return saved_as<double>(value_, "a double");
}
int64_t SavedValue::to_int() const { return saved_as<int64_t>(value_, "an integer"); }
bool SavedValue::to_bool() const { return saved_as<bool>(value_, "a bool"); }
const std::string& SavedValue::to_string() const { return saved_as<std::string>(value_, "a string"); }
const std::vector<int64_t>& SavedValue::to_int_list() const {
  return saved_as<std::vector<int64_t>>(value_, "a list of integers");
}
const std::vector<double>& SavedValue::to_double_list() const {
  return saved_as<std::vector<double>>(value_, "a list of doubles");
}

// ---- FunctionCtx ------------------------------------------------------------------------------

void FunctionCtx::save_for_backward(std::vector<Tensor> tensors) {
  CPPGRAD_CHECK(!in_backward_, "{}: save_for_backward is called in forward, not in backward", op_);
  to_save_ = std::move(tensors);
}

const std::vector<Tensor>& FunctionCtx::get_saved_variables() const {
  CPPGRAD_CHECK(in_backward_, "{}: get_saved_variables is called in backward, not in forward", op_);
  return unpacked_;
}

void FunctionCtx::mark_non_differentiable(const std::vector<Tensor>& outputs) {
  non_differentiable_.insert(non_differentiable_.end(), outputs.begin(), outputs.end());
}

bool FunctionCtx::needs_input_grad(size_t argument) const {
  CPPGRAD_CHECK(argument < needs_input_grad_.size(), "{}: needs_input_grad({}) but forward has {} arguments", op_,
                argument, needs_input_grad_.size());
  return needs_input_grad_[argument];
}

std::string short_type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                   std::free);
  std::string name = status == 0 && demangled ? demangled.get() : type.name();
  // "cppgrad::nn::Linear", "(anonymous namespace)::Net", "Block<ns::X>": the last name, with its
  // template arguments.
  size_t depth = 0, start = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<' || name[i] == '(') ++depth;
    if ((name[i] == '>' || name[i] == ')') && depth > 0) --depth;
    if (depth == 0 && name.compare(i, 2, "::") == 0) start = i + 2;
  }
  return name.substr(start);
}

// ---- recording --------------------------------------------------------------------------------

namespace {
bool contains_tensor(const std::vector<Tensor>& list, const Tensor& t) {
  for (const Tensor& x : list)
    if (x.is_same(t)) return true;
  return false;
}
}  // namespace

std::vector<Tensor> FunctionRecorder::record(std::shared_ptr<FunctionCtx> ctx, std::vector<Tensor> outputs,
                                             const std::vector<Tensor>& arguments, const std::vector<bool>& is_tensor,
                                             UserBackward backward) {
  const std::string op = ctx->op_;
  // The node's outputs are forward's; the floating ones not marked get a gradient.
  std::vector<bool> differentiable;
  for (size_t k = 0; k < outputs.size(); ++k) {
    CPPGRAD_CHECK(outputs[k].defined(), "{}: forward returned an undefined tensor as output {}", op, k);
    differentiable.push_back(outputs[k].is_floating_point() && !contains_tensor(ctx->non_differentiable_, outputs[k]));
  }
  std::vector<Tensor> inputs;  // the tensor arguments, in order: the node's edges
  std::vector<size_t> input_of_argument(arguments.size(), 0);
  std::vector<Shape> input_shapes;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!is_tensor[i]) continue;
    input_of_argument[i] = inputs.size();
    inputs.push_back(arguments[i]);
    input_shapes.push_back(arguments[i].defined() ? arguments[i].shape() : Shape{});
  }
  // The context must not keep the outputs: the node owns the context, and an output owning the
  // node would make a cycle. The node keeps what forward saved (an output as a graph-free alias).
  const std::vector<Tensor> to_save = std::exchange(ctx->to_save_, {});
  ctx->non_differentiable_.clear();
  std::vector<Shape> output_shapes;
  std::vector<DType> output_dtypes;
  for (const Tensor& out : outputs) {
    output_shapes.push_back(out.shape());
    output_dtypes.push_back(out.dtype());
  }

  OutputsBackwardFn node_backward = [ctx, n_saved = to_save.size(), differentiable, output_shapes, output_dtypes,
                                     input_of_argument, is_tensor, input_shapes,
                                     backward](const Grads& grads, const Saved& saved) -> Grads {
    const std::string& op = ctx->op_;
    // The saved tensors as forward listed them; each differentiable output's gradient, zeros
    // for one that received none (as PyTorch's materialize_grads).
    std::vector<Tensor> unpacked;
    for (size_t i = 0; i < n_saved; ++i) unpacked.push_back(saved[i]);
    std::vector<Tensor> grad_outputs(grads.size());
    for (size_t k = 0; k < grads.size(); ++k)
      if (differentiable[k])
        grad_outputs[k] = grads[k].defined() ? grads[k] : zeros(output_shapes[k], output_dtypes[k]);
    for (size_t i = 0; i < is_tensor.size(); ++i)
      ctx->needs_input_grad_[i] = is_tensor[i] && saved.needs_grad(input_of_argument[i]);

    ctx->unpacked_ = std::move(unpacked);
    ctx->in_backward_ = true;
    std::vector<Tensor> grads_in;
    try {
      grads_in = backward(*ctx, grad_outputs);
    } catch (...) {
      ctx->unpacked_.clear();
      ctx->in_backward_ = false;
      throw;
    }
    ctx->unpacked_.clear();  // a rebuilt output points at this node: do not keep it
    ctx->in_backward_ = false;

    CPPGRAD_CHECK(grads_in.size() == is_tensor.size(), "{}: backward returned {} gradients for {} forward arguments",
                  op, grads_in.size(), is_tensor.size());
    Grads input_grads(input_shapes.size());
    for (size_t i = 0; i < grads_in.size(); ++i) {
      if (!grads_in[i].defined()) continue;
      CPPGRAD_CHECK(is_tensor[i], "{}: backward returned a gradient for argument {}, which is not a tensor", op, i);
      const size_t input = input_of_argument[i];
      if (!saved.needs_grad(input)) continue;  // not asked for: dropped, as PyTorch does
      CPPGRAD_CHECK(grads_in[i].shape() == input_shapes[input],
                    "{}: backward returned a gradient of shape {} for argument {} of shape {}", op,
                    shape_str(grads_in[i].shape()), i, shape_str(input_shapes[input]));
      input_grads[input] = grads_in[i];
    }
    return input_grads;
  };
  return record_outputs(op, std::move(outputs), differentiable, inputs, to_save, std::move(node_backward));
}

}  // namespace cppgrad::autograd
