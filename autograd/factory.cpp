// The factories a user calls: each makes its tensor with the graph-free factory of the same name
// (tensor/factory.cpp) and, when the options ask for it, makes it a leaf that requires grad, as
// torch.zeros(..., requires_grad=True) does.
#include "autograd/trace.h"
#include "tensor/tensor.h"

namespace cppgrad {

namespace {
Tensor leaf(Tensor t, const TensorOptions& options) {
  if (options.requires_grad_) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions options) { return leaf(empty(shape, options.dtype_), options); }
Tensor zeros(const Shape& shape, TensorOptions options) { return leaf(zeros(shape, options.dtype_), options); }
Tensor ones(const Shape& shape, TensorOptions options) { return leaf(ones(shape, options.dtype_), options); }
Tensor full(const Shape& shape, double value, TensorOptions options) {
  return leaf(full(shape, value, options.dtype_), options);
}
Tensor scalar_tensor(double value, TensorOptions options) { return leaf(scalar_tensor(value, options.dtype_), options); }
Tensor arange(double end, TensorOptions options) { return leaf(arange(end, options.dtype_), options); }
Tensor arange(double start, double end, double step, TensorOptions options) {
  autograd::TraceScope trace;  // ONNX's Range, its length read from the graph (a model's position ids)
  return trace.note(leaf(arange(start, end, step, options.dtype_), options),
                    [&] { return autograd::TracedOp{"arange", {}, {{"start", start}, {"step", step}}}; });
}
Tensor eye(int64_t n, TensorOptions options) { return leaf(eye(n, options.dtype_), options); }
Tensor rand(const Shape& shape, TensorOptions options, Generator& gen) {
  return leaf(rand(shape, options.dtype_, gen), options);
}
Tensor randn(const Shape& shape, TensorOptions options, Generator& gen) {
  return leaf(randn(shape, options.dtype_, gen), options);
}

Tensor tensor(std::initializer_list<double> values, TensorOptions options) {
  return leaf(tensor(values, options.dtype_), options);
}
Tensor tensor(std::initializer_list<std::initializer_list<double>> values, TensorOptions options) {
  return leaf(tensor(values, options.dtype_), options);
}
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<double>>> values,
              TensorOptions options) {
  return leaf(tensor(values, options.dtype_), options);
}

}  // namespace cppgrad
