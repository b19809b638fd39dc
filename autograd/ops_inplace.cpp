// In-place ops. Each writes into the tensor's storage and bumps its version counter, so a
// node that saved this tensor for backward will refuse to use the changed values.
//
// Under no_grad (optimizer steps, initialisation) they are plain kernels. When the graph must
// see them, the op is computed out of place on the tensor's current history, the result is
// written into the storage, and the tensor's grad_fn becomes the new op's node, as PyTorch's
// in-place ops rebase history.
#include <cmath>

#include "autograd/functions.h"
#include "tensor/kernels.h"

namespace cppgrad {

using autograd::AutogradMeta;
using autograd::GradMode;

namespace {

// The bytes of storage that t's elements span: the first, and one past the last.
std::pair<int64_t, int64_t> byte_span(const Tensor& t) {
  int64_t first = t.offset(), last = t.offset();
  for (size_t d = 0; d < t.shape().size(); ++d)
    (t.strides()[d] < 0 ? first : last) += (t.shape()[d] - 1) * t.strides()[d];
  const auto size = static_cast<int64_t>(dtype_size(t.dtype()));
  return {first * size, (last + 1) * size};
}

// Whether writing dst element by element may change elements of src not yet read: src in dst's
// storage, the two spans meeting, and src not dst's own elements in dst's order (y.mul_(y)).
bool overlaps(const Tensor& dst, const Tensor& src) {
  if (!src.defined() || src.storage() != dst.storage() || src.numel() == 0 || dst.numel() == 0) return false;
  if (src.shape() == dst.shape() && src.strides() == dst.strides() && src.offset() == dst.offset() &&
      src.dtype() == dst.dtype())
    return false;
  auto [dst_first, dst_end] = byte_span(dst);
  auto [src_first, src_end] = byte_span(src);
  return dst_first < src_end && src_first < dst_end;
}

// An in-place op keeps self's dtype, and an integer tensor cannot hold a floating result:
// refused as PyTorch refuses it, where a conversion would drop the fraction (add_(2.5) added 2).
// A whole-number scalar is an integer's, so counter.add_(1) stays accepted.
void check_integer_result(const Tensor& self, std::string_view op, const Tensor& other) {
  CPPGRAD_CHECK(self.is_floating_point() || !other.is_floating_point(),
                "{}: result type {} can't be cast to the desired output type {}", op, dtype_name(other.dtype()),
                dtype_name(self.dtype()));
}
void check_integer_result(const Tensor& self, std::string_view op, double value) {
  CPPGRAD_CHECK(self.is_floating_point() || (value == std::floor(value) && fits_int64(value)),
                "{}: result type float32 (of the value {}) can't be cast to the desired output type {}", op, value,
                dtype_name(self.dtype()));
}
// True division's result is floating whatever the operands (torch.div), so never an integer's.
void check_true_division(const Tensor& self) {
  CPPGRAD_CHECK(self.is_floating_point(),
                "div_: result type float32 can't be cast to the desired output type {} (true division is floating; "
                "divide out of place, or convert with .to(kFloat32) first)", dtype_name(self.dtype()));
}

template <class OutOfPlace, class Raw>
Tensor& apply_inplace(Tensor& self, std::string_view op, const Tensor& other, OutOfPlace out_of_place, Raw raw) {
  // An op with an operand writes values that differ from element to element: where two elements
  // of self are one memory location (an expanded view), the last write would win. Refused as
  // PyTorch refuses it; fill_ and masked_fill_, which write one value, are not.
  if (other.defined())
    for (size_t d = 0; d < self.shape().size(); ++d)
      CPPGRAD_CHECK(self.shape()[d] <= 1 || self.strides()[d] != 0,
                    "{}: unsupported operation: more than one element of the written-to tensor (shape {}, strides {}) "
                    "refers to a single memory location. Please clone() the tensor before performing the operation.",
                    op, shape_str(self.shape()), shape_str(self.strides()));
  const bool tracked = GradMode::is_enabled() && (self.requires_grad() || (other.defined() && other.requires_grad()));
  if (!tracked) {
    // An operand in memory the op writes is read from a copy, so the result is the elementwise
    // one from the old values, as the graph's path below gives (it computes out of place);
    // PyTorch refuses this instead. a[1:].copy_(a[:3]) read elements already overwritten.
    raw(overlaps(self, other) ? kernels::clone(other) : other);
    return self;
  }
  CPPGRAD_CHECK(!(self.is_leaf() && self.requires_grad()),
        "{}: a leaf tensor that requires grad (shape {}) is being modified in place; do it inside a NoGradGuard",
        op, shape_str(self.shape()));
  CPPGRAD_CHECK(!self.impl()->is_view,
        "{}: in-place change of a view (shape {}) inside the graph is not supported; use the out-of-place op", op,
        shape_str(self.shape()));
  // The history as it stands: the current values in a tensor of their own, so that the new
  // node neither saves `self` (which will point at that node: a cycle) nor saves memory that the
  // write below overwrites (mul_ and div_ need the old values for their backward).
  Tensor history = kernels::clone(self);
  if (self.impl()->autograd) history.impl()->autograd = std::make_shared<AutogradMeta>(*self.impl()->autograd);
  // `other` may be `self` itself (y.mul_(y)): then it too stands for the old values.
  const Tensor& operand = other.defined() && other.is_same(self) ? history : other;
  Tensor result = out_of_place(history, operand);
  CPPGRAD_CHECK(result.shape() == self.shape(), "{}: the result shape {} differs from the in-place target's shape {}", op,
        shape_str(result.shape()), shape_str(self.shape()));
  kernels::copy_(self, result);
  auto meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = result.requires_grad();
  meta->grad_fn = result.grad_fn();
  if (meta->grad_fn) meta->output_nr = result.impl()->autograd->output_nr;
  // retain_grad() follows the tensor to its new history, as in PyTorch: .grad is then the
  // gradient of the value after this op (and the node before it no longer writes it).
  if (self.retains_grad() && meta->grad_fn) {
    meta->retains_grad = true;
    meta->grad = self.grad();
    meta->grad_fn->retained.emplace_back(meta->output_nr, meta);
  }
  self.impl()->autograd = std::move(meta);
  return self;
}

}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_integer_result(*this, "add_", other);
  CPPGRAD_CHECK(is_floating_point() || (alpha == std::floor(alpha) && fits_int64(alpha)),
                "add_: alpha {} must be a whole number, as the result keeps the dtype {}", alpha, dtype_name(dtype()));
  return apply_inplace(
      *this, "add_", other, [&](const Tensor& h, const Tensor& o) { return alpha == 1.0 ? h + o : h + o * alpha; },
      [&](const Tensor& o) {
        // alpha in the result's dtype: in an integer operand's dtype a fraction was dropped.
        const DType scale = promote(o.dtype(), dtype());
        kernels::binary_(kernels::Binary::Add, *this,
                         alpha == 1.0 ? o : kernels::binary(kernels::Binary::Mul, o, kernels::scalar_operand(alpha, scale)));
      });
}

Tensor& Tensor::add_(double value) {
  check_integer_result(*this, "add_", value);
  return add_(kernels::scalar_operand(value, dtype()));
}

Tensor& Tensor::sub_(const Tensor& other) {
  check_integer_result(*this, "sub_", other);
  return apply_inplace(
      *this, "sub_", other, [](const Tensor& h, const Tensor& o) { return h - o; },
      [&](const Tensor& o) { kernels::binary_(kernels::Binary::Sub, *this, o); });
}

Tensor& Tensor::mul_(const Tensor& other) {
  check_integer_result(*this, "mul_", other);
  return apply_inplace(
      *this, "mul_", other, [](const Tensor& h, const Tensor& o) { return h * o; },
      [&](const Tensor& o) { kernels::binary_(kernels::Binary::Mul, *this, o); });
}

Tensor& Tensor::mul_(double value) {
  check_integer_result(*this, "mul_", value);
  return mul_(kernels::scalar_operand(value, dtype()));
}

Tensor& Tensor::div_(const Tensor& other) {
  check_true_division(*this);
  return apply_inplace(
      *this, "div_", other, [](const Tensor& h, const Tensor& o) { return h / o; },
      [&](const Tensor& o) { kernels::binary_(kernels::Binary::Div, *this, o); });
}

Tensor& Tensor::div_(double value) {
  check_true_division(*this);
  return div_(kernels::scalar_operand(value, dtype()));
}

Tensor& Tensor::fill_(double value) {
  check_fill_value(value, dtype(), "fill_");
  return apply_inplace(
      *this, "fill_", Tensor(), [&](const Tensor& h, const Tensor&) { return zeros_like(h) + value; },
      [&](const Tensor&) { kernels::fill_(*this, value); });
}

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::copy_(const Tensor& src) {
  return apply_inplace(
      *this, "copy_", src, [](const Tensor& h, const Tensor& o) { return zeros_like(h) + o.to(h.dtype()); },
      [&](const Tensor& o) { kernels::copy_(*this, o); });
}

Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  check_fill_value(value, dtype(), "masked_fill_");
  return apply_inplace(
      *this, "masked_fill_", Tensor(), [&](const Tensor& h, const Tensor&) { return h.masked_fill(mask, value); },
      [&](const Tensor&) { kernels::masked_fill_(*this, mask, value); });
}

}  // namespace cppgrad
