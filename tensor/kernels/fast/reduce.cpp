// The fast form of a sum or a mean (the rows of tensor/reduction_table.h that add their elements as
// they are) over leading dims of a contiguous tensor (a bias gradient: the rows of (N, out)
// summed): whole rows added into a row of accumulators, in a loop compiled once per vector unit,
// a block of columns per thread.
// The same additions in the same order as the reference (reduce.cpp's reduce_sets, both pairwise:
// pairwise_sum.h), so the same bits. A first reading skips this file.
#include <algorithm>

#include "runtime/simd_clones.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/impl.h"
#include "tensor/kernels/pairwise_sum.h"

namespace cppgrad::kernels::fast {

namespace {

// acc[j] += x[r, j] for every row r in order, row r at x + r·ld. Compiled once per vector unit
// (simd_clones.h): each acc[j] adds the same values in the same order in every version, so the
// same bits.
template <class T>
CPPGRAD_SIMD_CLONES void add_rows_into(const T* __restrict x, int64_t rows, int64_t width, int64_t ld,
                                       double* __restrict acc) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j) acc[j] += x[r * ld + j];
}

}  // namespace

Tensor reduce_leading_dims(Reduction op, const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  if (op != Reduction::Sum && op != Reduction::Mean) return {};
  const bool mean = op == Reduction::Mean;
  if (!t.is_floating_point() || !t.is_contiguous() || dims.empty() || t.numel() == 0 || t.dim() == 0) return {};
  std::vector<int64_t> sorted = wrap_dims(dims, t.dim(), reduction_name(op));
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] != static_cast<int64_t>(i)) return {};
  if (sorted.size() == static_cast<size_t>(t.dim())) return {};  // a full reduction: one output
  int64_t rows = 1;
  for (int64_t d : sorted) rows *= t.shape()[d];
  Shape out_shape;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (d >= static_cast<int64_t>(sorted.size()))
      out_shape.push_back(t.shape()[d]);
    else if (keepdim)
      out_shape.push_back(1);
  Tensor out = empty(out_shape, t.dtype());
  const int64_t width = t.numel() / rows;
  const double divisor = mean ? static_cast<double>(rows) : 1.0;
  dispatch_floating(t.dtype(), reduction_name(op), [&](auto tag) {
    using T = decltype(tag);
    const T* x = t.data<T>();
    T* o = out.data<T>();
    parallel_for_columns(width, rows, [&](int64_t first, int64_t columns) {  // a column's rows in order
      PairwiseSum acc(columns);
      acc.add_rows(x + first, rows, width, [](const T* r, int64_t n, int64_t w, int64_t ld, double* a) {
        add_rows_into<T>(r, n, w, ld, a);
      });
      std::vector<double> totals(static_cast<size_t>(columns));
      acc.totals(totals.data());
      for (int64_t j = 0; j < columns; ++j)
        o[first + j] = static_cast<T>(divisor == 1.0 ? totals[j] : totals[j] / divisor);
    });
  });
  return out;
}

}  // namespace cppgrad::kernels::fast
