// Reductions over any set of dims: the rows of tensor/reduction_table.h (sum, mean, logsumexp,
// amax, amin), var, and max/min with their indices.
//
// Each output element is reduced by one thread, in a fixed order, so results do not depend on
// the thread count. Sums accumulate in double and pairwise (PairwiseSum, pairwise_sum.h), so their rounding
// error grows with log n rather than n, as NumPy's and PyTorch's do.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

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

}  // namespace

// ---- the rows of CPPGRAD_REDUCTION_OPS (tensor/reduction_table.h) -------------------------------

namespace {

enum class Shift { None, Max };
enum class Combine { Add, Max, Min };
// The dtypes column, as types, so that each row compiles only the loops its dtypes run.
struct summable {};
struct floating {};
struct to_float {};
struct numeric {};

// For every output element, its set reduced as the row says: m, the shift; s, the terms t(x)
// combined in V (double for a floating sum, int64_t for an integer one, T for Max and Min);
// out = finish(s, n, m).
template <class T, class Out, class V, class Term, class Finish>
void reduce_sets(const ReducePlan& p, const Tensor& t, const Tensor& out, Shift shift, Combine combine, Term term,
                 Finish finish) {
  StridedLoop<2> outer(p.kept_shape, {contiguous_strides(p.kept_shape), p.kept_strides});
  StridedLoop<1> inner(p.reduced_shape, {p.reduced_strides});
  const T* in = t.data<T>();
  Out* o = out.data<Out>();
  const double n = static_cast<double>(p.reduced_numel);
  parallel_runs(outer, [&](const auto& off, int64_t count, const auto& st) {
    PairwiseSum pairwise(1);
    for (int64_t k = 0; k < count; ++k) {
      const T* base = in + off[1] + k * st[1];
      auto for_each_x = [&](auto f) {  // f(x) for the set's elements, in row-major order
        inner.for_each_run([&](const auto& roff, int64_t len, const auto& rst) {
          const T* x = base + roff[0];
          for (int64_t j = 0; j < len; ++j) f(x[j * rst[0]]);
        });
      };
      V m = 0;
      if (shift == Shift::Max) {
        double top = -std::numeric_limits<double>::infinity();
        for_each_x([&](T x) { top = std::max(top, static_cast<double>(x)); });  // NaN skipped
        m = static_cast<V>(std::isinf(top) ? 0.0 : top);
      }
      V s = 0;
      if constexpr (std::is_floating_point_v<V>) {
        if (combine == Combine::Add) {
          pairwise.reset();
          inner.for_each_run([&](const auto& roff, int64_t len, const auto& rst) {
            const T* x = base + roff[0];
            if (rst[0] == 1) {  // a contiguous run: rows of width 1
              pairwise.add_rows(x, len, 1, [&](const T* r, int64_t rows, int64_t, int64_t, double* acc) {
                for (int64_t i = 0; i < rows; ++i) acc[0] += term(static_cast<V>(r[i]), m);
              });
              return;
            }
            for (int64_t j = 0; j < len; ++j) {
              pairwise.block()[0] += term(static_cast<V>(x[j * rst[0]]), m);
              pairwise.end_value();
            }
          });
          double total = 0;
          pairwise.totals(&total);
          s = static_cast<V>(total);
        }
      } else if (combine == Combine::Add) {
        for_each_x([&](T x) { s = wrapping_add(s, term(static_cast<V>(x), m)); });  // int64 wraps, as PyTorch's
      }
      if (combine != Combine::Add) {  // from the first element on; the first NaN wins and stays
        bool first = true;
        for_each_x([&](T x) {
          const V v = term(static_cast<V>(x), m);
          const bool wins = combine == Combine::Max ? v > s : v < s;
          if (first || (s == s && (v != v || wins))) s = v;
          first = false;
        });
      }
      o[off[0] + k * st[0]] = static_cast<Out>(finish(s, n, m));
    }
  });
}

// A row's reduction of `input`: its dtypes checked or converted, the output made, and the sets
// reduced in the types the row's dtypes give.
template <class Dtypes, class Term, class Finish>
Tensor reduce_row(const char* op, Shift shift, Combine combine, const Tensor& input, const std::vector<int64_t>& dims,
                  bool keepdim, Term term, Finish finish) {
  Tensor t = input;
  if constexpr (std::is_same_v<Dtypes, to_float>)
    if (!t.is_floating_point()) t = to(t, kFloat32);
  if constexpr (std::is_same_v<Dtypes, floating>)
    CPPGRAD_CHECK(t.is_floating_point(), "{}: expected a floating dtype, got {}", op, dtype_name(t.dtype()));
  ReducePlan p = plan_reduction(t, dims, keepdim, op);
  CPPGRAD_CHECK(combine == Combine::Add || p.reduced_numel > 0 || checked_numel(p.out_shape, op) == 0,
                "{}: cannot reduce an empty set: shape {} over dims {}", op, shape_str(t.shape()), shape_str(dims));
  if constexpr (std::is_same_v<Dtypes, summable>) {
    if (!is_floating(t.dtype())) {  // integers and bools sum to int64, as in PyTorch
      Tensor out = empty(p.out_shape, kInt64);
      dispatch(t.dtype(), [&](auto tag) {
        reduce_sets<decltype(tag), int64_t, int64_t>(p, t, out, shift, combine, term, finish);
      });
      return out;
    }
  }
  Tensor out = empty(p.out_shape, t.dtype());
  if constexpr (std::is_same_v<Dtypes, numeric>) {
    dispatch_numeric(t.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      reduce_sets<T, T, T>(p, t, out, shift, combine, term, finish);
    });
  } else {
    dispatch_floating(t.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      reduce_sets<T, T, double>(p, t, out, shift, combine, term, finish);
    });
  }
  return out;
}

}  // namespace

// One case per row: its columns as the kernel's steps.
Tensor impl::reduce(Reduction op, const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  switch (op) {
#define CPPGRAD_REDUCTION_KERNEL(name, Enum, dtypes, shift, term, combine, finish, ...)             \
    case Reduction::Enum:                                                                          \
      return reduce_row<dtypes>(#name, Shift::shift, Combine::combine, t, dims, keepdim,           \
                                [](auto x, [[maybe_unused]] auto m) { return term; },              \
                                [](auto s, [[maybe_unused]] double n, [[maybe_unused]] auto m) { return finish; });
    CPPGRAD_REDUCTION_OPS(CPPGRAD_REDUCTION_KERNEL)
#undef CPPGRAD_REDUCTION_KERNEL
  }
  return {};
}

Tensor var(const Tensor& t, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  CPPGRAD_CHECK(t.is_floating_point(), "var: expected a floating dtype, got {}", dtype_name(t.dtype()));
  ReducePlan p = plan_reduction(t, dims, keepdim, "var");
  Tensor centred = binary(Binary::Sub, t, kernels::mean(t, dims, /*keepdim=*/true));
  Tensor squares = binary(Binary::Mul, centred, centred);
  Tensor total = kernels::sum(squares, dims, keepdim);
  const double denom = var_divisor(p.reduced_numel, correction);
  return binary(Binary::Div, total, scalar_operand(denom, t.dtype()));
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
  return reshape(kernels::sum(t, dims, /*keepdim=*/true), shape);
}

ValuesIndices impl::extremum(Extremum which, const Tensor& t, int64_t dim, bool keepdim) {
  const char* op = which == Extremum::Max ? "max" : "min";
  if (t.dim() == 0) return {clone(t), zeros({}, kInt64)};
  dim = wrap_dim(dim, t.dim(), op);
  // Each set reduced must hold an element; the other dims may be empty, and then so is the
  // result, as in PyTorch (zeros({0, 3}).max(1) is two empty tensors of shape [0]).
  CPPGRAD_CHECK(t.shape()[dim] > 0, "{}: cannot reduce an empty tensor of shape {} over its dim {} of size 0", op,
                shape_str(t.shape()), dim);
  ReducePlan p = plan_reduction(t, {dim}, keepdim, op);
  Tensor values = empty(p.out_shape, t.dtype());
  Tensor indices = empty(p.out_shape, kInt64);
  if (t.numel() == 0) return {values, indices};
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
  CPPGRAD_CHECK(t.numel() > 0, "{}: cannot reduce an empty tensor of shape {}", which == Extremum::Max ? "max" : "min",
                shape_str(t.shape()));
  return extremum(which, reshape(t, {-1}), 0, false);
}

}  // namespace cppgrad::kernels
