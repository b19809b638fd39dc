// Copies and conversions: the one place data moves from one layout (or dtype) to another.
#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/impl.h"

namespace cppgrad::kernels {

void impl::copy_(const Tensor& dst, const Tensor& src) {
  Tensor from = expand(src, dst.shape());  // throws if src does not broadcast to dst
  StridedLoop<2> loop(dst.shape(), {dst.strides(), from.strides()});
  dispatch(dst.dtype(), [&](auto dst_tag) {
    using D = decltype(dst_tag);
    dispatch(from.dtype(), [&](auto src_tag) {
      using S = decltype(src_tag);
      D* out = dst.data<D>();
      const S* in = from.data<S>();
      parallel_runs(loop, [&](const auto& off, int64_t n, const auto& st) {
        D* o = out + off[0];
        const S* i = in + off[1];
        if (st[0] == 1 && st[1] == 1)
          for (int64_t k = 0; k < n; ++k) o[k] = static_cast<D>(i[k]);
        else
          for (int64_t k = 0; k < n; ++k) o[k * st[0]] = static_cast<D>(i[k * st[1]]);
      });
    });
  });
  dst.bump_version();
}

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : clone(t); }

// A new contiguous tensor holding t's values in `dtype`.
static Tensor copy_as(const Tensor& t, DType dtype) {
  Tensor out = empty(t.shape(), dtype);
  copy_(out, t);
  return out;
}

Tensor clone(const Tensor& t) { return copy_as(t, t.dtype()); }
Tensor to(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : copy_as(t, dtype); }

void impl::fill_(const Tensor& t, double value) {
  StridedLoop<1> loop(t.shape(), {t.strides()});
  dispatch(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = static_cast<T>(value);
    T* p = t.data<T>();
    parallel_runs(loop, [&](const auto& off, int64_t n, const auto& st) {
      for (int64_t k = 0; k < n; ++k) p[off[0] + k * st[0]] = v;
    });
  });
  t.bump_version();
}

Tensor scalar_operand(double value, DType dtype) {
  check_value_fits(value, dtype, "scalar operand");
  Tensor t = empty({}, dtype);
  fill_(t, value);
  return t;
}

}  // namespace cppgrad::kernels
