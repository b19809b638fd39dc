#include "nn/rmsnorm.h"

#include "autograd/fast/rms_norm.h"
#include "autograd/trace.h"
#include "runtime/reference_mode.h"

#include <limits>

namespace cppgrad::nn {

namespace functional {

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, std::optional<double> eps) {
  const auto k = static_cast<int64_t>(normalized_shape.size());
  CPPGRAD_CHECK(k >= 1 && x.dim() >= k && Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
                "rms_norm: input {} does not end with normalized_shape {}", shape_str(x.shape()),
                shape_str(normalized_shape));
  CPPGRAD_CHECK(x.is_floating_point(), "rms_norm: input must be floating, got {}", dtype_name(x.dtype()));
  CPPGRAD_CHECK(!weight.defined() || weight.shape() == normalized_shape,
                "rms_norm: weight {} should have normalized_shape {}", shape_str(weight.shape()),
                shape_str(normalized_shape));
  CPPGRAD_CHECK(!eps || *eps >= 0.0, "rms_norm: eps {} must not be negative", eps.value_or(0.0));
  const double epsilon = eps.value_or(x.dtype() == kFloat64 ? std::numeric_limits<double>::epsilon()
                                                             : std::numeric_limits<float>::epsilon());
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  // The reference, as the formula reads, of {x, weight}; autograd differentiates it (and its
  // gradient again).
  auto formula = [dims, epsilon](const std::vector<Tensor>& in) {
    Tensor inv_rms = ((in[0] * in[0]).mean(dims, true) + epsilon).rsqrt();  // (..., 1, ..., 1)
    Tensor y = in[0] * inv_rms;
    return in[1].defined() ? y * in[1] : y;
  };
  // The fast form: one pass over each row forward and one backward, where the derivative is
  // written (tensor/kernels/fast/rms_norm.cpp).
  const bool fast_dtypes = (x.dtype() == kFloat32 || x.dtype() == kFloat64) &&
                           (!weight.defined() || weight.dtype() == x.dtype());
  autograd::TraceScope trace;  // one op in ONNX, whichever form computes it
  auto traced = [&] { return autograd::TracedOp{"rms_norm", {x, weight}, {{"normalized_dims", k}, {"eps", epsilon}}}; };
  if (!reference_mode() && fast_dtypes) return trace.note(cppgrad::fast::rms_norm(x, k, weight, epsilon, formula), traced);
  return trace.note(formula({x, weight}), traced);
}

}  // namespace functional

RMSNorm::RMSNorm(Shape shape, std::optional<double> eps_, bool elementwise_affine)
    : normalized_shape(std::move(shape)), eps(eps_) {
  CPPGRAD_CHECK(!normalized_shape.empty(), "RMSNorm: normalized_shape must name at least one dim");
  for (int64_t n : normalized_shape)
    CPPGRAD_CHECK(n > 0, "RMSNorm: normalized_shape {} must be positive", shape_str(normalized_shape));
  CPPGRAD_CHECK(!eps || *eps >= 0.0, "RMSNorm: eps {} must not be negative", eps.value_or(0.0));
  if (elementwise_affine) weight = register_parameter("weight", ones(normalized_shape));
}

Tensor RMSNorm::forward(const Tensor& x) { return functional::rms_norm(x, normalized_shape, weight, eps); }

std::string RMSNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", shape_str(normalized_shape),
                     eps ? fmt::format("{}", *eps) : "None", weight.defined());
}

}  // namespace cppgrad::nn
