// matmul: 1-D, 2-D and batched (broadcast batch dims), through cblas_sgemm / cblas_dgemm.
//
// BLAS reads a matrix given a base pointer, a leading dimension and a transpose flag, so any
// view whose rows or whose columns are contiguous (a transpose, a slice of columns, a head of a
// reshaped projection) goes to BLAS as it is; only other layouts are copied first.
#include <algorithm>
#include <cblas.h>

#include <climits>
#include <optional>

#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/kernels/impl.h"

namespace cppgrad::kernels {

namespace {

struct BlasLayout {
  bool transposed;  // stored column-major: BLAS reads it as the transpose of a row-major matrix
  int64_t ld;       // leading dimension
};

// How BLAS can read a rows x cols matrix whose elements sit at i*row_stride + j*col_stride.
std::optional<BlasLayout> blas_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (cols == 1 || col_stride == 1) {  // row-major, rows row_stride apart
    int64_t ld = rows == 1 ? std::max<int64_t>(cols, 1) : row_stride;
    if (ld >= std::max<int64_t>(cols, 1)) return BlasLayout{false, ld};
  }
  if (rows == 1 || row_stride == 1) {  // column-major, columns col_stride apart
    int64_t ld = cols == 1 ? std::max<int64_t>(rows, 1) : col_stride;
    if (ld >= std::max<int64_t>(rows, 1)) return BlasLayout{true, ld};
  }
  return std::nullopt;
}

// The layout of t's last two dims, copying t to contiguous when BLAS cannot read it.
BlasLayout blas_ready(Tensor& t) {
  const int64_t n = t.dim();
  auto layout = blas_layout(t.shape()[n - 2], t.shape()[n - 1], t.strides()[n - 2], t.strides()[n - 1]);
  if (layout) return *layout;
  t = contiguous(t);
  return *blas_layout(t.shape()[n - 2], t.shape()[n - 1], t.strides()[n - 2], t.strides()[n - 1]);
}

// t broadcast to `shape`: itself when it has that shape already, as in a plain 2-D product.
Tensor broadcast_to(const Tensor& t, const Shape& shape) { return t.shape() == shape ? t : expand(t, shape); }

// a: [..., M, K] and b: [..., K, N], batch dims already broadcast to `batch`.
Tensor batched_matmul(Tensor a, Tensor b, const Shape& batch) {
  const int64_t m = a.shape()[a.dim() - 2], k = a.shape()[a.dim() - 1], n = b.shape()[b.dim() - 1];
  CPPGRAD_CHECK(m < INT_MAX && n < INT_MAX && k < INT_MAX, "matmul: matrix dims {}x{}x{} exceed BLAS's int range", m, k, n);
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  if (k == 0) return zeros(out_shape, a.dtype());  // an empty inner product is zero
  Tensor out = empty(out_shape, a.dtype());  // unset: every GEMM runs with beta = 0 and writes all of C
  if (out.numel() == 0) return out;

  // [..., M, K] @ [K, N] with a's batch dims folding into M: one large GEMM instead of many.
  if (b.dim() == 2 && a.dim() > 2) {
    Strides folded;
    if (view_strides(a, {numel(batch) * m, k}, folded) && folded[1] == 1) {
      Tensor a2 = as_strided(a, {numel(batch) * m, k}, folded, a.offset());
      BlasLayout lb = blas_ready(b);
      dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
        using T = decltype(tag);
        gemm<T>(false, lb.transposed, numel(batch) * m, n, k, a2.data<T>(), folded[0], b.data<T>(), lb.ld,
                out.data<T>(), n, T(0), &a2, &b);
      });
      return out;
    }
  }

  BlasLayout la = blas_ready(a);
  BlasLayout lb = blas_ready(b);
  Shape a_shape = batch, b_shape = batch;
  a_shape.insert(a_shape.end(), {m, k});
  b_shape.insert(b_shape.end(), {k, n});
  Tensor ae = broadcast_to(a, a_shape), be = broadcast_to(b, b_shape);
  const int64_t nb = static_cast<int64_t>(batch.size());
  // Offsets of each batch's matrices, batch index in row-major order.
  Strides a_batch(ae.strides().begin(), ae.strides().begin() + nb);
  Strides b_batch(be.strides().begin(), be.strides().begin() + nb);
  const int64_t batches = numel(batch);
  dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = ae.data<T>();
    const T* pb = be.data<T>();
    T* pc = out.data<T>();
    parallel_for(batches, m * n * k, [&](int64_t i) {
      int64_t oa = 0, ob = 0, rest = i;
      for (int64_t d = nb - 1; d >= 0; --d) {
        int64_t idx = rest % batch[d];
        rest /= batch[d];
        oa += idx * a_batch[d];
        ob += idx * b_batch[d];
      }
      // One product (batches == 1) runs on this thread, whose cast cache may keep its operands.
      gemm<T>(la.transposed, lb.transposed, m, n, k, pa + oa, la.ld, pb + ob, lb.ld, pc + i * m * n, n, T(0),
              batches == 1 ? &ae : nullptr, batches == 1 ? &be : nullptr);
    });
  });
  return out;
}

// "matmul: [2,3] @ [4,5]: <what>". Built only when a check fails: formatting two shapes on
// every call costs more than a whole 8x8 GEMM.
[[noreturn]] void fail(const Tensor& a, const Tensor& b, const std::string& what) {
  throw Error(fmt::format("matmul: {} @ {}: {}", shape_str(a.shape()), shape_str(b.shape()), what));
}

}  // namespace

Tensor impl::matmul(const Tensor& a, const Tensor& b) {
  if (a.dim() < 1 || b.dim() < 1) fail(a, b, "both arguments need at least 1 dim");
  if (a.dtype() != b.dtype())
    fail(a, b, fmt::format("dtypes {} and {} differ", dtype_name(a.dtype()), dtype_name(b.dtype())));
  if (!a.is_floating_point()) fail(a, b, fmt::format("expected float32 or float64, got {}", dtype_name(a.dtype())));
  // A 1-D operand is a row vector on the left or a column vector on the right, removed after.
  Tensor a2 = a.dim() == 1 ? unsqueeze(a, 0) : a;
  Tensor b2 = b.dim() == 1 ? unsqueeze(b, 1) : b;
  const int64_t k_a = a2.shape()[a2.dim() - 1], k_b = b2.shape()[b2.dim() - 2];
  if (k_a != k_b) fail(a, b, fmt::format("inner dimensions {} and {} differ", k_a, k_b));
  Shape batch_a(a2.shape().begin(), a2.shape().end() - 2);
  Shape batch_b(b2.shape().begin(), b2.shape().end() - 2);
  // (Equal batch dims need no broadcasting, nor broadcast_shapes' eagerly formatted check.)
  Shape batch = batch_a == batch_b ? batch_a : broadcast_shapes(batch_a, batch_b, "matmul");
  Tensor out = batched_matmul(a2, b2, batch);
  if (a.dim() == 1) out = squeeze(out, -2);
  if (b.dim() == 1) out = squeeze(out, -1);
  return out;
}

// y = x·Wᵀ + b as one GEMM: y starts as copies of the bias row and the GEMM adds x·Wᵀ to it
// (beta = 1), so the bias costs no extra pass over y. x (..., in), W (out, in), b (out).
Tensor impl::linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  CPPGRAD_CHECK(w.dim() == 2, "linear: weight must be 2-D (out, in), got {}", shape_str(w.shape()));
  CPPGRAD_CHECK(x.dim() >= 1 && x.shape().back() == w.shape()[1], "linear: input {} does not end in the weight's {} features ({})",
                shape_str(x.shape()), w.shape()[1], shape_str(w.shape()));
  CPPGRAD_CHECK(x.dtype() == w.dtype() && x.is_floating_point(), "linear: input {} and weight {} must share a floating dtype",
                dtype_name(x.dtype()), dtype_name(w.dtype()));
  CPPGRAD_CHECK(!b.defined() || (b.dim() == 1 && b.shape()[0] == w.shape()[0] && b.dtype() == w.dtype()),
                "linear: bias {} does not match weight {}", shape_str(b.shape()), shape_str(w.shape()));
  const int64_t in = w.shape()[1], out_features = w.shape()[0], rows = x.numel() / std::max<int64_t>(in, 1);
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor x2 = reshape(x, {rows, in});  // a view when x's rows are laid out evenly
  Tensor out = empty({rows, out_features}, x.dtype());
  if (rows == 0 || out_features == 0) return reshape(out, out_shape);
  if (in == 0) {
    if (b.defined()) copy_(out, b); else fill_(out, 0.0);
    return reshape(out, out_shape);
  }
  BlasLayout lx = blas_ready(x2);
  Tensor wt = transpose(w, 0, 1);  // (in, out): a view BLAS reads with the transpose flag
  BlasLayout lw = blas_ready(wt);
  dispatch_floating(x.dtype(), "linear", [&](auto tag) {
    using T = decltype(tag);
    if (b.defined()) {  // every row starts as b; the GEMM then adds x·Wᵀ to it (beta = 1)
      Tensor bias = contiguous(b);
      const T* bp = bias.data<T>();
      T* o = out.data<T>();
      parallel_for(rows, out_features, [&](int64_t r) { std::copy(bp, bp + out_features, o + r * out_features); });
    }
    gemm<T>(lx.transposed, lw.transposed, rows, out_features, in, x2.data<T>(), lx.ld, wt.data<T>(), lw.ld,
            out.data<T>(), out_features, b.defined() ? T(1) : T(0), &x2, &wt);
  });
  return reshape(out, out_shape);
}

}  // namespace cppgrad::kernels
