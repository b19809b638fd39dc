// Elementwise kernels: unary maps, binary ops with NumPy broadcasting, comparisons, where.
//
// The ops themselves are rows of tensor/op_tables.h; this file turns each row's forward column
// into a loop over the elements, one element at a time: the reference. kernels::unary and
// kernels::binary (dispatch.cpp) run these, or in fast mode the same rows in loops the compiler
// vectorises (fast/elementwise.cpp).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "runtime/reference_mode.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/fast/elementwise.h"
#include "tensor/kernels/impl.h"

namespace cppgrad::kernels {

// ---- the loops: one element at a time ----------------------------------------------------------
namespace {

// out = f(in), elementwise, out and in of the same shape: one element at a time.
template <class Out, class In, class F>
void map_into(const Tensor& out, const Tensor& in, F f) {
  StridedLoop<2> loop(out.shape(), {out.strides(), in.strides()});
  Out* o = out.data<Out>();
  const In* i = in.data<In>();
  loop.for_each_run([&](const auto& off, int64_t n, const auto& st) {
    for (int64_t k = 0; k < n; ++k) o[off[0] + k * st[0]] = f(i[off[1] + k * st[1]]);
  });
}

// out = f(a, b), elementwise; a and b already expanded to out's shape.
template <class Out, class In, class F>
void zip_into(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  StridedLoop<3> loop(out.shape(), {out.strides(), a.strides(), b.strides()});
  Out* o = out.data<Out>();
  const In* x = a.data<In>();
  const In* y = b.data<In>();
  loop.for_each_run([&](const auto& off, int64_t n, const auto& st) {
    for (int64_t k = 0; k < n; ++k) o[off[0] + k * st[0]] = f(x[off[1] + k * st[1]], y[off[2] + k * st[2]]);
  });
}

}  // namespace

// ---- unary: one case per row of CPPGRAD_UNARY_OPS (tensor/op_tables.h) ----------------------

// out = forward(x) for each element x, by map_into above, in the dtypes the row allows
// (dispatch_floating or dispatch_numeric names the op when given another): one case a row,
// CPPGRAD_UNARY_LOOP (kernels/impl.h), which the fast form expands with its own loop.
Tensor impl::unary(Unary op, const Tensor& t) {
  Tensor out = empty(t.shape(), t.dtype());
  switch (op) { CPPGRAD_UNARY_OPS(CPPGRAD_UNARY_LOOP) }
  return out;
}

// ---- binary: one case per row of CPPGRAD_BINARY_OPS ------------------------------------------

// a and b in the result's dtype (PyTorch's rule, result_type), expanded to the broadcast shape.
Operands broadcast_operands(const Tensor& a, const Tensor& b, DType dtype, std::string_view op) {
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  return {expand(to(a, dtype), shape), expand(to(b, dtype), shape), shape, dtype};
}
Operands binary_operands(Binary op, const Tensor& a, const Tensor& b) {
  DType dtype = result_type(a, b);
  if (op == Binary::Div && !is_floating(dtype)) dtype = kFloat32;  // true division, as torch.div
  return broadcast_operands(a, b, dtype, binary_name(op));
}

namespace {
// out = forward(x, y) for each pair of elements, by zip_into above (CPPGRAD_BINARY_LOOP).
template <class T>
void binary_loop(Binary op, const Tensor& out, const Tensor& a, const Tensor& b) {
  switch (op) { CPPGRAD_BINARY_OPS(CPPGRAD_BINARY_LOOP) }
}
}  // namespace

Tensor impl::binary(Binary op, const Tensor& a, const Tensor& b) {
  Operands ops = binary_operands(op, a, b);
  Tensor out = empty(ops.shape, ops.dtype);
  dispatch_numeric(ops.dtype, binary_name(op), [&](auto tag) { binary_loop<decltype(tag)>(op, out, ops.a, ops.b); });
  return out;
}

// ---- comparisons, pow, where, masked_fill, and PyTorch's dtype rule ------------------------------

// The dtype of a binary op's result, by PyTorch's rule (torch.result_type). Dtypes come in
// kinds, bool < integer < floating. Two tensors of the same dimensionality (both 0-d, or both
// not) promote as `promote` ranks them. A 0-d tensor beside a dimensioned one counts only when
// its kind is higher: float32 (n-d) + float64 (0-d) is float32, int64 (n-d) + float64 (0-d) is
// float64, bool (n-d) + int64 (0-d) is int64.
namespace {
int kind(DType d) { return is_floating(d) ? 2 : d == kBool ? 0 : 1; }
}  // namespace
DType result_type(const Tensor& a, const Tensor& b) {
  const bool a_0d = a.dim() == 0, b_0d = b.dim() == 0;
  if (a_0d == b_0d) return promote(a.dtype(), b.dtype());
  const DType dimensioned = a_0d ? b.dtype() : a.dtype(), zero_dim = a_0d ? a.dtype() : b.dtype();
  return kind(zero_dim) > kind(dimensioned) ? promote(dimensioned, zero_dim) : dimensioned;
}

// b broadcast to a's shape (which the result must keep) and converted to a's dtype.
Operands in_place_operands(Binary op, const Tensor& a, const Tensor& b) {
  Shape shape = broadcast_shapes(a.shape(), b.shape(), binary_name(op));
  CPPGRAD_CHECK(shape == a.shape(), "{}_: the result shape {} differs from the in-place target's shape {}", binary_name(op),
        shape_str(shape), shape_str(a.shape()));
  return {a, expand(to(b, a.dtype()), shape), shape, a.dtype()};
}

// The rows in place: a = a (op) b, b broadcast to a's shape and converted to a's dtype.
void impl::binary_(Binary op, const Tensor& a, const Tensor& b) {
  Operands ops = in_place_operands(op, a, b);
  dispatch_numeric(a.dtype(), binary_name(op), [&](auto tag) { binary_loop<decltype(tag)>(op, a, a, ops.b); });
  a.bump_version();
}

namespace {
// The loops the kernels below run: the fast form's unless reference mode is on.
template <class Out, class In, class F>
void map_into_either(const Tensor& out, const Tensor& in, F f) {
  if (reference_mode()) return map_into<Out, In>(out, in, f);
  fast::map_into<Out, In>(out, in, f);
}
template <class Out, class In, class F>
void zip_into_either(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  if (reference_mode()) return zip_into<Out, In>(out, a, b, f);
  fast::zip_into<Out, In>(out, a, b, f);
}
}  // namespace

Tensor impl::pow(const Tensor& t, double exponent) {
  Tensor out = empty(t.shape(), t.dtype());
  dispatch_floating(t.dtype(), "pow", [&](auto tag) {
    using T = decltype(tag);
    const T p = static_cast<T>(exponent);
    if (exponent == 2.0)
      map_into_either<T, T>(out, t, [](T x) { return x * x; });
    else
      map_into_either<T, T>(out, t, [p](T x) { return std::pow(x, p); });
  });
  return out;
}

// out = (x op y) for each pair of elements, in their common dtype; out is bool.
Tensor impl::compare(Compare op, const Tensor& a, const Tensor& b) {
  Operands ops = broadcast_operands(a, b, result_type(a, b), compare_name(op));
  const Tensor &x = ops.a, &y = ops.b;
  Tensor out = empty(ops.shape, kBool);
  dispatch(ops.dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
#define CPPGRAD_COMPARE_KERNEL(name, Enum, symbol) \
      case Compare::Enum: zip_into_either<bool, T>(out, x, y, [](T p, T q) { return p symbol q; }); break;
      CPPGRAD_COMPARE_OPS(CPPGRAD_COMPARE_KERNEL)
#undef CPPGRAD_COMPARE_KERNEL
    }
  });
  return out;
}

Tensor logical_not(const Tensor& t) {
  CPPGRAD_CHECK(t.dtype() == kBool, "logical_not: expected a bool tensor, got {}", dtype_name(t.dtype()));
  Tensor out = empty(t.shape(), kBool);
  map_into_either<bool, bool>(out, t, [](bool x) { return !x; });
  return out;
}

Tensor impl::where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  CPPGRAD_CHECK(condition.dtype() == kBool, "where: condition must be bool, got {}", dtype_name(condition.dtype()));
  Shape shape = broadcast_shapes(broadcast_shapes(condition.shape(), a.shape(), "where"), b.shape(), "where");
  DType dtype = result_type(a, b);
  Tensor c = expand(condition, shape), x = expand(to(a, dtype), shape), y = expand(to(b, dtype), shape);
  Tensor out = empty(shape, dtype);
  StridedLoop<4> loop(shape, {out.strides(), c.strides(), x.strides(), y.strides()});
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    const bool* pc = c.data<bool>();
    const T* px = x.data<T>();
    const T* py = y.data<T>();
    parallel_runs(loop, [&](const auto& off, int64_t n, const auto& st) {
      if (st[1] == 0 && st[0] == 1 && st[2] == 1 && st[3] == 1) {  // one condition for the run (a row mask)
        const T* from = pc[off[1]] ? px + off[2] : py + off[3];
        std::copy(from, from + n, o + off[0]);
        return;
      }
      for (int64_t k = 0; k < n; ++k)
        o[off[0] + k * st[0]] = pc[off[1] + k * st[1]] ? px[off[2] + k * st[2]] : py[off[3] + k * st[3]];
    });
  });
  return out;
}

namespace {
// out = mask ? value : in, elementwise (out may be in itself). The mask is often broadcast along
// the run (a padding mask (B, S, 1) over features (B, S, E)): then the whole run is filled or
// copied. Otherwise a select rather than a branch, so the contiguous loop vectorises.
template <class T>
void masked_fill_into(const Tensor& out, const Tensor& in, const Tensor& mask, T value) {
  StridedLoop<3> loop(out.shape(), {out.strides(), in.strides(), mask.strides()});
  T* o = out.data<T>();
  const T* x = in.data<T>();
  const bool* m = mask.data<bool>();
  parallel_runs(loop, [&](const auto& off, int64_t n, const auto& st) {
    T* po = o + off[0];
    const T* px = x + off[1];
    const bool* pm = m + off[2];
    if (st[2] == 0 && st[0] == 1 && st[1] == 1) {
      if (pm[0])
        std::fill(po, po + n, value);
      else if (po != px)
        std::copy(px, px + n, po);
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      for (int64_t k = 0; k < n; ++k) po[k] = pm[k] ? value : px[k];
    } else {
      for (int64_t k = 0; k < n; ++k) po[k * st[0]] = pm[k * st[2]] ? value : px[k * st[1]];
    }
  });
}

void check_mask(const Tensor& mask) {
  CPPGRAD_CHECK(mask.dtype() == kBool, "masked_fill: mask must be bool, got {}", dtype_name(mask.dtype()));
}
}  // namespace

void impl::masked_fill_(const Tensor& t, const Tensor& mask, double value) {
  check_mask(mask);
  Shape shape = broadcast_shapes(t.shape(), mask.shape(), "masked_fill");
  CPPGRAD_CHECK(shape == t.shape(), "masked_fill: mask of shape {} does not broadcast to the tensor's shape {}",
        shape_str(mask.shape()), shape_str(t.shape()));
  Tensor m = expand(mask, shape);
  dispatch(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    masked_fill_into<T>(t, t, m, static_cast<T>(value));
  });
  t.bump_version();
}

// One pass: each element is read and written once, where a copy and then a fill in place would
// write it twice.
Tensor impl::masked_fill(const Tensor& t, const Tensor& mask, double value) {
  check_mask(mask);
  Shape shape = broadcast_shapes(t.shape(), mask.shape(), "masked_fill");
  Tensor out = empty(shape, t.dtype());
  Tensor x = expand(t, shape), m = expand(mask, shape);
  dispatch(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    masked_fill_into<T>(out, x, m, static_cast<T>(value));
  });
  return out;
}

}  // namespace cppgrad::kernels
