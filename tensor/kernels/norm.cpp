// layer_norm's fused kernels over rows of the last N elements: y, and each row's mean and 1/std
// forward; dx, dw and db backward, each row read once or twice while it sits in cache (some nine
// passes forward and twenty backward as separate tensor ops). layer_norm's reference is its
// formula as tensor ops (autograd/ops_nn.cpp); the row loops, and the derivative, are in
// fast/norm.cpp.
#include <vector>

#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/fast/norm.h"
#include "tensor/kernels/impl.h"

namespace cppgrad::kernels {

namespace {

struct Rows {
  int64_t count, width;
};

Rows rows_of(const Tensor& x, int64_t normalized_numel, const char* op) {
  CPPGRAD_CHECK(normalized_numel >= 1 && x.numel() % normalized_numel == 0 && x.dim() >= 1,
                "{}: input {} cannot be split into rows of {} elements", op, shape_str(x.shape()), normalized_numel);
  return {x.numel() / normalized_numel, normalized_numel};
}

void check_affine(const Tensor& t, const Tensor& x, int64_t width, const char* what) {
  if (!t.defined()) return;
  CPPGRAD_CHECK(t.numel() == width && t.dtype() == x.dtype(), "layer_norm: {} {} ({}) does not match rows of {} {}",
                what, shape_str(t.shape()), dtype_name(t.dtype()), width, dtype_name(x.dtype()));
}

}  // namespace

LayerNormResult impl::layer_norm(const Tensor& input, int64_t normalized_dims, const Tensor& weight, const Tensor& bias,
                           double eps) {
  // The arguments were checked by the public entry (autograd/ops_nn.cpp) before its fast form
  // (autograd/fast/layer_norm.cpp), the one caller, came here.
  int64_t width = 1;
  for (int64_t d = input.dim() - normalized_dims; d < input.dim(); ++d) width *= input.size(d);
  const Rows r = rows_of(input, width, "layer_norm");
  Tensor x = contiguous(input);
  LayerNormResult out{empty(x.shape(), x.dtype()), empty({r.count}, x.dtype()), empty({r.count}, x.dtype())};
  // A weight without a bias (or the reverse) runs as affine with the missing one 1 (or 0):
  // v·1 and v + 0 are v exactly.
  const bool affine = weight.defined() || bias.defined();
  const Tensor w = !affine ? Tensor() : weight.defined() ? contiguous(weight) : ones({r.width}, x.dtype());
  const Tensor b = !affine ? Tensor() : bias.defined() ? contiguous(bias) : zeros({r.width}, x.dtype());
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* wp = affine ? w.data<T>() : nullptr;
    const T* bp = affine ? b.data<T>() : nullptr;
    fast::layer_norm_forward<T>(r.count, r.width, eps, x.data<T>(), wp, bp, out.y.data<T>(), out.mean.data<T>(), out.rstd.data<T>());
  });
  return out;
}

LayerNormGrads impl::layer_norm_backward(const Tensor& grad, const Tensor& input, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool need_input, bool need_weight, bool need_bias) {
  const Rows r = rows_of(input, mean.numel() > 0 ? input.numel() / mean.numel() : 1, "layer_norm_backward");
  CPPGRAD_CHECK(grad.shape() == input.shape() && grad.dtype() == input.dtype() && rstd.numel() == r.count,
                "layer_norm_backward: grad {} does not match input {}", shape_str(grad.shape()), shape_str(input.shape()));
  check_affine(weight, input, r.width, "weight");
  Tensor x = contiguous(input), g = contiguous(grad);
  LayerNormGrads out;
  if (need_input) out.dx = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const Tensor weight_c = weight.defined() ? contiguous(weight) : Tensor();
    const T* w = weight.defined() ? weight_c.data<T>() : nullptr;
    const T *xs = x.data<T>(), *gs = g.data<T>(), *mu = mean.data<T>(), *rs = rstd.data<T>();
    if (need_input) fast::layer_norm_input_grad<T>(r.count, r.width, xs, gs, w, mu, rs, out.dx.data<T>());
    if (need_weight || need_bias) {
      std::vector<double> dw(static_cast<size_t>(r.width), 0.0), db(static_cast<size_t>(r.width), 0.0);
      fast::layer_norm_affine_grads<T>(r.count, r.width, xs, gs, mu, rs, dw.data(), db.data());
      auto to_tensor = [&](const std::vector<double>& acc) {
        Tensor t = empty({r.width}, x.dtype());
        for (int64_t j = 0; j < r.width; ++j) t.data<T>()[j] = static_cast<T>(acc[j]);
        return t;
      };
      if (need_weight) out.dweight = to_tensor(dw);
      if (need_bias) out.dbias = to_tensor(db);
    }
  });
  return out;
}

}  // namespace cppgrad::kernels
