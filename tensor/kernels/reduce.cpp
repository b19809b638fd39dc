// Reductions over any set of dims: sum, mean, var, logsumexp, max/min with their indices.
//
// Each output element is reduced by one thread, in a fixed order, so results do not depend on
// the thread count. Sums accumulate in double and pairwise (PairwiseSum, pairwise_sum.h), so their rounding
// error grows with log n rather than n, as NumPy's and PyTorch's do.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/impl.h"
#include "tensor/kernels/pairwise_sum.h"

namespace cppgrad::kernels {

namespace {

// The input split into the dims that stay (one output element per index) and those reduced.
struct ReducePlan {
  Shape kept_shape, reduced_shape, out_shape;
  Strides kept_strides, reduced_strides;
  int64_t reduced_numel = 1;
};

ReducePlan plan_reduction(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim, std::string_view op) {
  std::vector<int64_t> wrapped = wrap_dims(dims, t.dim(), op);
  // A 0-d tensor takes dim 0 or -1, as in PyTorch, and has no dim to reduce: the result is itself.
  if (t.dim() == 0) wrapped.clear();
  std::vector<bool> reduce(t.dim(), false);
  for (int64_t d : wrapped) reduce[d] = true;
  ReducePlan p;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (reduce[d]) {
      p.reduced_shape.push_back(t.shape()[d]);
      p.reduced_strides.push_back(t.strides()[d]);
      p.reduced_numel *= t.shape()[d];
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.kept_shape.push_back(t.shape()[d]);
      p.kept_strides.push_back(t.strides()[d]);
      p.out_shape.push_back(t.shape()[d]);
    }
  }
  // An empty input may keep a huge dim: [2^62, 0] summed over dim 1 would be 2^62 sums.
  int64_t bytes = 0;
  CPPGRAD_CHECK(!__builtin_mul_overflow(checked_numel(p.out_shape, op), int64_t{8}, &bytes),
                "{}: reducing shape {} leaves a result of shape {}, too large to exist", op, shape_str(t.shape()),
                shape_str(p.out_shape));
  return p;
}

// For every output element: acc = init; acc = step(acc, x, i) over the reduced elements in
// row-major order (i counts them); out = acc. `Acc` may carry more than a value (an index).
template <class T, class Out, class Acc, class Step, class Finish>
void reduce_into(const ReducePlan& p, const Tensor& t, const Tensor& out, Acc init, Step step, Finish finish) {
  StridedLoop<2> outer(p.kept_shape, {contiguous_strides(p.kept_shape), p.kept_strides});
  StridedLoop<1> inner(p.reduced_shape, {p.reduced_strides});
  const T* in = t.data<T>();
  Out* o = out.data<Out>();
  parallel_runs(outer, [&](const auto& off, int64_t n, const auto& st) {
    for (int64_t k = 0; k < n; ++k) {
      const T* base = in + off[1] + k * st[1];
      Acc acc = init;
      int64_t i = 0;
      inner.for_each_run(
          [&](const auto& roff, int64_t m, const auto& rst) {
            const T* x = base + roff[0];
            for (int64_t j = 0; j < m; ++j, ++i) acc = step(acc, x[j * rst[0]], i);
          });
      o[off[0] + k * st[0]] = finish(acc);
    }
  });
}

// out = (sum of the reduced elements) / divisor, for every output element, pairwise.
template <class T>
void sum_into(const ReducePlan& p, const Tensor& t, const Tensor& out, double divisor) {
  StridedLoop<2> outer(p.kept_shape, {contiguous_strides(p.kept_shape), p.kept_strides});
  StridedLoop<1> inner(p.reduced_shape, {p.reduced_strides});
  const T* in = t.data<T>();
  T* o = out.data<T>();
  parallel_runs(outer, [&](const auto& off, int64_t n, const auto& st) {
    PairwiseSum acc(1);
    for (int64_t k = 0; k < n; ++k) {
      const T* base = in + off[1] + k * st[1];
      acc.reset();
      inner.for_each_run(
          [&](const auto& roff, int64_t m, const auto& rst) {
            if (rst[0] == 1) {
              acc.add_rows(base + roff[0], m);  // a contiguous run: rows of width 1
              return;
            }
            const T* x = base + roff[0];
            for (int64_t j = 0; j < m; ++j) {
              acc.block()[0] += x[j * rst[0]];
              acc.end_value();
            }
          });
      double total = 0;
      acc.totals(&total);
      o[off[0] + k * st[0]] = static_cast<T>(divisor == 1.0 ? total : total / divisor);
    }
  });
}

}  // namespace

Tensor impl::sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  ReducePlan p = plan_reduction(t, dims, keepdim, "sum");
  if (!is_floating(t.dtype())) {  // integers and bools sum to int64, as in PyTorch
    Tensor out = empty(p.out_shape, kInt64);
    dispatch(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      reduce_into<T, int64_t>(
          p, t, out, int64_t{0}, [](int64_t acc, T x, int64_t) { return acc + static_cast<int64_t>(x); },
          [](int64_t acc) { return acc; });
    });
    return out;
  }
  Tensor out = empty(p.out_shape, t.dtype());
  dispatch_floating(t.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    sum_into<T>(p, t, out, 1.0);
  });
  return out;
}

Tensor impl::mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  CPPGRAD_CHECK(t.is_floating_point(), "mean: expected a floating dtype, got {}", dtype_name(t.dtype()));
  ReducePlan p = plan_reduction(t, dims, keepdim, "mean");
  Tensor out = empty(p.out_shape, t.dtype());
  const double count = static_cast<double>(p.reduced_numel);
  dispatch_floating(t.dtype(), "mean", [&](auto tag) {
    using T = decltype(tag);
    sum_into<T>(p, t, out, count);
  });
  return out;
}

Tensor var(const Tensor& t, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  CPPGRAD_CHECK(t.is_floating_point(), "var: expected a floating dtype, got {}", dtype_name(t.dtype()));
  ReducePlan p = plan_reduction(t, dims, keepdim, "var");
  Tensor centred = binary(Binary::Sub, t, mean(t, dims, /*keepdim=*/true));
  Tensor squares = binary(Binary::Mul, centred, centred);
  Tensor total = sum(squares, dims, keepdim);
  const double denom = static_cast<double>(p.reduced_numel - correction);
  return binary(Binary::Div, total, full({}, denom, t.dtype()));
}

// log Σ exp(x) = m + log Σ exp(x - m), m the max of the reduced set: exp() then neither
// overflows (x = 1e4) nor underflows to a zero sum (x = -1e4). Where m is infinite the shift is 0,
// as in torch.logsumexp: a set that is -inf throughout gives log 0 = -inf, one that holds +inf
// gives +inf, and a NaN gives NaN (std::max skips it, exp does not). An empty set gives -inf.
// Integers and bools give float32, torch's default float dtype.
Tensor impl::logsumexp(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor x = t.is_floating_point() ? t : to(t, kFloat32);
  if (x.dim() == 0) {  // a 0-d tensor is its own set: log exp(x) = x (dims may only name dim 0)
    wrap_dims(dims, 0, "logsumexp");
    return clone(x);
  }
  ReducePlan p = plan_reduction(x, dims, keepdim, "logsumexp");
  // The kept dims first, then the reduced ones: row r of `rows` is output element r's set.
  std::vector<int64_t> order;
  const std::vector<int64_t> reduced = wrap_dims(dims, x.dim(), "logsumexp");
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) order.push_back(d);
  order.insert(order.end(), reduced.begin(), reduced.end());
  Tensor rows = contiguous(permute(x, order));  // (kept..., reduced...)
  Tensor out = empty(p.out_shape, x.dtype());
  const int64_t n = p.reduced_numel;
  dispatch_floating(x.dtype(), "logsumexp", [&](auto tag) {
    using T = decltype(tag);
    const T* in = rows.data<T>();
    T* o = out.data<T>();
    parallel_for(out.numel(), n * 8, [&](int64_t r) {
      const T* row = in + r * n;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<double>(row[j]));
      const double shift = std::isinf(m) ? 0.0 : m;
      double total = 0;  // in double, as every float32 sum here
      for (int64_t j = 0; j < n; ++j) total += std::exp(static_cast<double>(row[j]) - shift);
      o[r] = static_cast<T>(std::log(total) + shift);
    });
  });
  return out;
}

Tensor sum_to(const Tensor& t, const Shape& shape) {
  CPPGRAD_CHECK(shape.size() <= t.shape().size(), "sum_to: cannot sum shape {} to the larger rank of {}",
        shape_str(t.shape()), shape_str(shape));
  const size_t lead = t.shape().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t d = 0; d < t.shape().size(); ++d) {
    if (d < lead) {
      dims.push_back(static_cast<int64_t>(d));
      continue;
    }
    int64_t want = shape[d - lead], have = t.shape()[d];
    CPPGRAD_CHECK(want == have || want == 1, "sum_to: shape {} does not broadcast to {}", shape_str(shape),
          shape_str(t.shape()));
    if (want == 1 && have != 1) dims.push_back(static_cast<int64_t>(d));
  }
  if (dims.empty()) return t.shape() == shape ? t : reshape(t, shape);
  return reshape(sum(t, dims, /*keepdim=*/true), shape);
}

ValuesIndices impl::extremum(Extremum which, const Tensor& t, int64_t dim, bool keepdim) {
  const char* op = which == Extremum::Max ? "max" : "min";
  CPPGRAD_CHECK(t.numel() > 0, "{}: cannot reduce an empty tensor of shape {}", op, shape_str(t.shape()));
  if (t.dim() == 0) return {clone(t), zeros({}, kInt64)};
  dim = wrap_dim(dim, t.dim(), op);
  ReducePlan p = plan_reduction(t, {dim}, keepdim, op);
  Tensor values = empty(p.out_shape, t.dtype());
  Tensor indices = empty(p.out_shape, kInt64);
  dispatch_numeric(t.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    struct Best {
      T value;
      int64_t index;
    };
    const bool is_max = which == Extremum::Max;
    // The first extremum wins; the first NaN beats everything and propagates, as in torch.max.
    auto step = [is_max](Best best, T x, int64_t i) {
      const bool best_is_nan = best.value != best.value;
      bool better = best.index < 0 || (!best_is_nan && (x != x || (is_max ? x > best.value : x < best.value)));
      return better ? Best{x, i} : best;
    };
    reduce_into<T, T>(p, t, values, Best{T{}, -1}, step, [](Best b) { return b.value; });
    reduce_into<T, int64_t>(p, t, indices, Best{T{}, -1}, step, [](Best b) { return b.index; });
  });
  return {values, indices};
}

ValuesIndices extremum_all(Extremum which, const Tensor& t) {
  auto [values, indices] = extremum(which, reshape(t, {-1}), 0, false);
  return {values, indices};
}

}  // namespace cppgrad::kernels
