// A kernel's span in a trace (runtime/profile.h) with its operands' shapes and dtypes:
//   CPPGRAD_PROFILE_KERNEL("layer_norm", input, weight);   // "[8,64,128] float32, [128] float32"
// As CPPGRAD_PROFILE_SCOPE otherwise: the description is formatted only while a trace is recorded.
#pragma once

#include <string>

#include "runtime/profile.h"
#include "tensor/tensor.h"

namespace cppgrad::kernels {

// "[2,3] float32, [3] float32" (an undefined tensor: "none").
template <class... Tensors>
std::string operands_text(const Tensors&... tensors) {
  std::string out;
  auto add = [&](const Tensor& t) {
    if (!out.empty()) out += ", ";
    out += t.defined() ? shape_str(t.shape()) + " " + std::string(dtype_name(t.dtype())) : "none";
  };
  (add(tensors), ...);
  return out;
}

}  // namespace cppgrad::kernels

#define CPPGRAD_PROFILE_KERNEL(name, ...)                       \
  ::cppgrad::profile::Scope profile_kernel_scope(name);         \
  if (profile_kernel_scope.traced()) profile_kernel_scope.describe(::cppgrad::kernels::operands_text(__VA_ARGS__))
