// Ordering along one dim (sort, topk) and drawing categories from weights (multinomial).
//
// Every row along `dim` is ordered by PyTorch's rule: ascending puts NaN after +inf (NaN counts as
// the largest value), descending puts it first. sort keeps equal values in their input order in
// either direction (ties go to the lower index, as torch.sort, stable on the CPU). topk orders ties
// as PyTorch 1.13's CPU kernel does, which is not by index (see topk_row). Each row is ordered on
// its own, so the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tensor/kernels/impl.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"

namespace cppgrad::kernels {

namespace {

// a < b, with NaN larger than every number and equal to itself.
template <class T>
bool less_nan_last(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

// The first k of a row of n for sort: ties broken by index make the order total, so a partial
// sort gives the same first k as a full stable sort would.
template <class T>
void sort_row(const T* row, int64_t n, int64_t k, bool descending, std::vector<std::pair<T, int64_t>>& queue) {
  for (int64_t j = 0; j < n; ++j) queue[j] = {row[j], j};
  std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), [descending](const auto& a, const auto& b) {
    if (descending ? less_nan_last(b.first, a.first) : less_nan_last(a.first, b.first)) return true;
    if (descending ? less_nan_last(a.first, b.first) : less_nan_last(b.first, a.first)) return false;
    return a.second < b.second;
  });
}

// The first k of a row of n for topk, as PyTorch 1.13's CPU kernel (ATen's TopKImpl.h) orders
// them: (value, index) pairs in input order, compared by value alone (NaN the largest), ordered by
// std::partial_sort when k·64 <= n, else by std::nth_element (the k-th in place) then std::sort
// of the k - 1 before it. Neither algorithm is stable: tied values come out in the order they
// leave them (topk(4) of [3, 1, 3, 2, 1, 3, 1, 2] is indices [2, 0, 5, 3] in PyTorch), which the
// same calls on the same standard library (GCC's, as Debian builds PyTorch with) reproduce.
template <class T>
void topk_row(const T* row, int64_t n, int64_t k, bool largest, std::vector<std::pair<T, int64_t>>& queue) {
  using Elem = std::pair<T, int64_t>;
  auto is_nan = [](T v) {
    if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
    return false;
  };
  for (int64_t j = 0; j < n; ++j) queue[j] = {row[j], j};
  auto larger = [&](const Elem& x, const Elem& y) { return (is_nan(x.first) && !is_nan(y.first)) || x.first > y.first; };
  auto smaller = [&](const Elem& x, const Elem& y) { return (!is_nan(x.first) && is_nan(y.first)) || x.first < y.first; };
  auto order = [&](auto before) {
    if (k * 64 <= n) {
      std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), before);
    } else {
      std::nth_element(queue.begin(), queue.begin() + k - 1, queue.end(), before);
      std::sort(queue.begin(), queue.begin() + k - 1, before);
    }
  };
  if (largest)
    order(larger);
  else
    order(smaller);
}

// The first k positions (of n) of each row of x (rows, n), contiguous, ordered: values and
// indices (rows, k).
template <class T>
void order_rows(const Tensor& x, int64_t k, bool descending, bool pytorch_topk, const Tensor& values,
                const Tensor& indices) {
  const int64_t rows = values.size(0), n = x.size(1);
  if (k == 0) return;
  const T* in = x.data<T>();
  T* v = values.data<T>();
  int64_t* idx = indices.data<int64_t>();
  const int64_t work = n * (64 - __builtin_clzll(static_cast<uint64_t>(n) | 1));  // ~ n log n comparisons
  parallel_for(rows, work, [&](int64_t r) {
    std::vector<std::pair<T, int64_t>> queue(static_cast<size_t>(n));
    if (pytorch_topk)
      topk_row(in + r * n, n, k, descending, queue);
    else
      sort_row(in + r * n, n, k, descending, queue);
    for (int64_t j = 0; j < k; ++j) {
      v[r * k + j] = queue[j].first;
      idx[r * k + j] = queue[j].second;
    }
  });
}

// sort and topk: `dim` moved last, rows ordered, moved back.
ValuesIndices order_along(const Tensor& t, int64_t k, int64_t dim, bool descending, const char* op,
                          bool pytorch_topk = false) {
  if (t.dim() == 0) {  // one element, at index 0 (k = 0 gives it too, as in PyTorch)
    wrap_dim(dim, 0, op);
    CPPGRAD_CHECK(k >= 0 && k <= 1, "{}: k = {} out of range for a 0-d tensor (one element)", op, k);
    return {clone(t), zeros({}, kInt64)};
  }
  dim = wrap_dim(dim, t.dim(), op);
  const int64_t n = t.size(dim);
  CPPGRAD_CHECK(k >= 0 && k <= n, "{}: k = {} out of range for dim {} of size {} (shape {})", op, k, dim, n,
                shape_str(t.shape()));
  Tensor moved = contiguous(transpose(t, dim, -1));  // (..., n)
  Shape out_shape = moved.shape();
  out_shape.back() = k;
  const int64_t rows = n == 0 ? numel(out_shape) : moved.numel() / n;
  Tensor values = empty(out_shape, t.dtype());
  Tensor indices = empty(out_shape, kInt64);
  dispatch(t.dtype(), [&](auto tag) {
    order_rows<decltype(tag)>(reshape(moved, {rows, n}), k, descending, pytorch_topk, reshape(values, {rows, k}),
                              reshape(indices, {rows, k}));
  });
  return {contiguous(transpose(values, dim, -1)), contiguous(transpose(indices, dim, -1))};
}

}  // namespace

ValuesIndices impl::sort(const Tensor& t, int64_t dim, bool descending) {
  return order_along(t, t.dim() == 0 ? 1 : t.size(wrap_dim(dim, t.dim(), "sort")), dim, descending, "sort");
}

ValuesIndices impl::topk(const Tensor& t, int64_t k, int64_t dim, bool largest) {
  return order_along(t, k, dim, /*descending=*/largest, "topk", /*pytorch_topk=*/true);
}

// Each row of `weights` is a distribution over its categories, weight / Σ weights.
//
// With replacement, every draw is independent: u uniform in [0, 1), the category is the first
// whose cumulative share exceeds u. A category of weight 0 adds nothing to the cumulative share,
// so it is never drawn.
//
// Without replacement, the draws are successive: each picks among the categories not yet drawn,
// in proportion to their weights. That is an exponential race: category i finishes at time
// E_i / w_i with E_i ~ Exp(1); the first to finish is i with probability w_i / Σ w, and since
// exponential times forget how long they have run, the rest of the race is a fresh race among
// the others. So the categories in order of E_i / w_i are the successive draws (Efraimidis and
// Spirakis's weighted sampling; PyTorch's CPU kernel draws this way too), and the first
// num_samples of that order are the sample. Categories of weight 0 never finish: they come after
// every positive one, in index order, as PyTorch also returns them when asked for more samples
// than there are positive weights.
//
// Draws are made row by row on the calling thread: n per row without replacement, num_samples
// with; the same generator state gives the same samples.
Tensor impl::multinomial(const Tensor& weights, int64_t num_samples, bool replacement, Generator& gen) {
  CPPGRAD_CHECK(weights.dim() == 1 || weights.dim() == 2,
                "multinomial: expected 1-D or 2-D weights (categories, or rows of categories), got shape {}",
                shape_str(weights.shape()));
  CPPGRAD_CHECK(weights.is_floating_point(), "multinomial: expected floating weights (float32 or float64), got {}",
                dtype_name(weights.dtype()));
  const int64_t n = weights.size(-1);
  CPPGRAD_CHECK(num_samples > 0, "multinomial: num_samples must be positive, got {}", num_samples);
  CPPGRAD_CHECK(replacement || num_samples <= n,
                "multinomial: cannot draw {} samples without replacement from {} categories (shape {})", num_samples,
                n, shape_str(weights.shape()));
  const int64_t rows = weights.dim() == 2 ? weights.size(0) : 1;
  Tensor w = to(contiguous(reshape(weights, {rows, n})), kFloat64);
  Tensor out = empty(weights.dim() == 2 ? Shape{rows, num_samples} : Shape{num_samples}, kInt64);
  const double* all = w.data<double>();
  int64_t* o = out.data<int64_t>();
  std::vector<double> cumulative(static_cast<size_t>(n));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = all + r * n;
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      CPPGRAD_CHECK(std::isfinite(row[i]) && row[i] >= 0,
                    "multinomial: weights must be finite and non-negative, got {} at category {} of row {}", row[i], i,
                    r);
      total += row[i];
      cumulative[i] = total;
    }
    CPPGRAD_CHECK(total > 0, "multinomial: row {} of weights (shape {}) sums to 0: no category can be drawn", r,
                  shape_str(weights.shape()));
    int64_t* samples = o + r * num_samples;
    if (replacement) {
      // The cumulative sum reaches `total` at the last positive weight; u·total < total, unless
      // the product rounds up to it, when the last positive category is the one u points at.
      const int64_t last_positive = std::lower_bound(cumulative.begin(), cumulative.end(), total) - cumulative.begin();
      for (int64_t s = 0; s < num_samples; ++s) {
        const double u = gen.uniform() * total;
        const int64_t first_above = std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin();
        samples[s] = std::min(first_above, last_positive);
      }
      continue;
    }
    std::vector<double>& finish = cumulative;  // reused: the race's finishing times
    for (int64_t i = 0; i < n; ++i) {
      const double e = -std::log1p(-gen.uniform());  // Exp(1), finite: 1 - u > 0
      finish[i] = row[i] > 0 ? e / row[i] : std::numeric_limits<double>::infinity();
    }
    std::iota(order.begin(), order.end(), int64_t{0});
    std::partial_sort(order.begin(), order.begin() + num_samples, order.end(), [&](int64_t a, int64_t b) {
      return finish[a] < finish[b] || (finish[a] == finish[b] && a < b);
    });
    std::copy(order.begin(), order.begin() + num_samples, samples);
  }
  return out;
}

}  // namespace cppgrad::kernels
