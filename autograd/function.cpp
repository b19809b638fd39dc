// Recording a user-written op (autograd/function.h) as one node of the graph.
#include "autograd/function.h"

#include <cxxabi.h>

#include <cstdlib>

#include "tensor/kernels.h"

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

// Where output k lives in the joined tensor of several outputs.
struct Piece {
  int64_t offset = 0;
  Shape shape;
};

// Output k of the joined tensor: a differentiable view, so gradients flow back into the node.
Tensor piece_of(const Tensor& joined, const Piece& piece, size_t count) {
  if (count == 1) return joined;
  return joined.narrow(0, piece.offset, numel(piece.shape)).view(piece.shape);
}

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
  // The differentiable outputs (floating, not marked) are joined into the node's one output.
  std::vector<size_t> differentiable;
  for (size_t k = 0; k < outputs.size(); ++k) {
    CPPGRAD_CHECK(outputs[k].defined(), "{}: forward returned an undefined tensor as output {}", op, k);
    if (outputs[k].is_floating_point() && !contains_tensor(ctx->non_differentiable_, outputs[k]))
      differentiable.push_back(k);
  }
  std::vector<Tensor> inputs;  // the tensor arguments, in order: the node's edges
  for (size_t i = 0; i < arguments.size(); ++i)
    if (is_tensor[i]) inputs.push_back(arguments[i]);
  if (differentiable.empty() || !GradMode::is_enabled() || !any_requires_grad(inputs)) {
    ctx->to_save_.clear();
    ctx->non_differentiable_.clear();
    return outputs;
  }

  std::vector<Piece> pieces;
  Tensor joined;
  if (differentiable.size() == 1) {
    joined = outputs[differentiable[0]];
    pieces.push_back({0, joined.shape()});
  } else {
    const DType dtype = outputs[differentiable[0]].dtype();
    std::vector<Tensor> flat;
    int64_t offset = 0;
    for (size_t k : differentiable) {
      const Tensor& out = outputs[k];
      CPPGRAD_CHECK(out.dtype() == dtype, "{}: differentiable outputs must share a dtype; output {} is {}, output {} is {}",
                    op, differentiable[0], dtype_name(dtype), k, dtype_name(out.dtype()));
      pieces.push_back({offset, out.shape()});
      offset += out.numel();
      flat.push_back(kernels::reshape(kernels::contiguous(out), {out.numel()}));
    }
    joined = kernels::cat(flat, 0);
  }

  // What backward will read: a saved differentiable output is rebuilt from the joined output
  // (record keeps that as the node's own output, without a cycle); anything else is kept as is.
  struct Slot {
    bool is_output = false;
    size_t index = 0;  // into record's saved list, or into `pieces`
  };
  std::vector<Slot> slots;
  std::vector<Tensor> to_save;
  for (const Tensor& t : ctx->to_save_) {
    Slot slot;
    for (size_t p = 0; p < differentiable.size() && t.defined(); ++p)
      if (outputs[differentiable[p]].is_same(t)) slot = {true, p};
    if (!slot.is_output) {
      slot.index = to_save.size();
      to_save.push_back(t);
    }
    slots.push_back(slot);
  }
  const size_t joined_slot = to_save.size();
  to_save.push_back(joined);
  // The context must not keep the outputs: the node owns the context, and an output owning the
  // node would make a cycle.
  ctx->to_save_.clear();
  ctx->non_differentiable_.clear();

  const size_t n_outputs = outputs.size();
  std::vector<size_t> input_of_argument(arguments.size(), 0);
  for (size_t i = 0, next = 0; i < arguments.size(); ++i)
    if (is_tensor[i]) input_of_argument[i] = next++;

  BackwardFn node_backward = [ctx, slots, pieces, differentiable, joined_slot, n_outputs, input_of_argument, is_tensor,
                              backward, shapes = [&] {
                                std::vector<Shape> s;
                                for (const Tensor& in : inputs) s.push_back(in.defined() ? in.shape() : Shape{});
                                return s;
                              }()](const Tensor& grad, const Saved& saved) -> Grads {
    const std::string& op = ctx->op_;
    // The saved tensors as forward listed them; the gradient of each output.
    std::vector<Tensor> unpacked;
    for (const Slot& slot : slots)
      unpacked.push_back(slot.is_output ? piece_of(saved[joined_slot], pieces[slot.index], pieces.size())
                                        : saved[slot.index]);
    std::vector<Tensor> grad_outputs(n_outputs);
    for (size_t p = 0; p < differentiable.size(); ++p) grad_outputs[differentiable[p]] = piece_of(grad, pieces[p], pieces.size());
    for (size_t i = 0; i < is_tensor.size(); ++i)
      ctx->needs_input_grad_[i] = is_tensor[i] && saved.needs_grad(input_of_argument[i]);

    ctx->unpacked_ = std::move(unpacked);
    ctx->in_backward_ = true;
    std::vector<Tensor> grads;
    try {
      grads = backward(*ctx, grad_outputs);
    } catch (...) {
      ctx->unpacked_.clear();
      ctx->in_backward_ = false;
      throw;
    }
    ctx->unpacked_.clear();  // a rebuilt output points at this node: do not keep it
    ctx->in_backward_ = false;

    CPPGRAD_CHECK(grads.size() == is_tensor.size(), "{}: backward returned {} gradients for {} forward arguments", op,
                  grads.size(), is_tensor.size());
    Grads input_grads(shapes.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      CPPGRAD_CHECK(is_tensor[i], "{}: backward returned a gradient for argument {}, which is not a tensor", op, i);
      const size_t input = input_of_argument[i];
      if (!saved.needs_grad(input)) continue;  // not asked for: dropped, as PyTorch does
      CPPGRAD_CHECK(grads[i].shape() == shapes[input], "{}: backward returned a gradient of shape {} for argument {} of shape {}",
                    op, shape_str(grads[i].shape()), i, shape_str(shapes[input]));
      input_grads[input] = grads[i];
    }
    return input_grads;
  };

  Tensor recorded = autograd::record(op, joined, inputs, to_save, std::move(node_backward));
  for (size_t p = 0; p < differentiable.size(); ++p)
    outputs[differentiable[p]] = piece_of(recorded, pieces[p], pieces.size());
  return outputs;
}

}  // namespace cppgrad::autograd
