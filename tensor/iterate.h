// The one loop every elementwise kernel runs: walk a shape in row-major order over several
// operands, each with its own strides (0 where it is broadcast), as an odometer does.
//
// Dims that are laid out back to back in every operand are merged first, so a contiguous
// tensor becomes a single run the compiler vectorises. The loop is serial; on threads, each
// walks its own range of the elements (parallel_runs, runtime/parallel_loop.h).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "../runtime/parallel_loop.h"
#include "autocast.h"
#include "shape.h"

namespace cppgrad {

// ---- the odometer ------------------------------------------------------------------------------
template <size_t N>
struct StridedLoop {
  Shape shape;
  std::array<Strides, N> strides;

  StridedLoop(const Shape& full_shape, const std::array<Strides, N>& full_strides) {
    // Drop size-1 dims, then merge dim i into dim i+1 where every operand allows it.
    for (size_t d = 0; d < full_shape.size(); ++d) {
      if (full_shape[d] == 1) continue;
      bool merge = !shape.empty();
      for (size_t k = 0; k < N && merge; ++k)
        merge = strides[k].back() == full_strides[k][d] * full_shape[d];
      if (merge) {
        shape.back() *= full_shape[d];
        for (size_t k = 0; k < N; ++k) strides[k].back() = full_strides[k][d];
      } else {
        shape.push_back(full_shape[d]);
        for (size_t k = 0; k < N; ++k) strides[k].push_back(full_strides[k][d]);
      }
    }
    if (shape.empty()) {  // a single element
      shape.push_back(1);
      for (size_t k = 0; k < N; ++k) strides[k].push_back(0);
    }
  }

  int64_t inner_size() const { return shape.back(); }
  // The product of the outer dims (not numel / inner, which divides by zero for an empty dim).
  int64_t run_count() const { return cppgrad::numel(Shape(shape.begin(), shape.end() - 1)); }
  int64_t numel() const { return run_count() * inner_size(); }

  // body(offsets, n, inner_strides): a run of n elements starting at offsets[k] of operand k.
  template <class Body>
  void for_each_run(Body&& body) const {
    for_runs_in(body, 0, numel());
  }

  // Calls body on the runs, or pieces of runs, that cover elements [first, last).
  template <class Body>
  void for_runs_in(Body& body, int64_t first, int64_t last) const {
    if (first >= last) return;
    const int64_t inner_n = inner_size();
    std::array<int64_t, N> inner;
    for (size_t k = 0; k < N; ++k) inner[k] = strides[k].back();
    const int64_t outer_dims = static_cast<int64_t>(shape.size()) - 1;
    Shape index(outer_dims);
    std::array<int64_t, N> offsets{};
    int64_t rest = first / inner_n;  // multi-index of the run holding element `first`
    for (int64_t d = outer_dims - 1; d >= 0; --d) {
      index[d] = rest % shape[d];
      rest /= shape[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += index[d] * strides[k][d];
    }
    int64_t skip = first % inner_n;  // elements of the first run that belong to an earlier range
    while (first < last) {
      const int64_t n = std::min(inner_n - skip, last - first);
      std::array<int64_t, N> start = offsets;
      for (size_t k = 0; k < N; ++k) start[k] += skip * inner[k];
      body(start, n, inner);
      first += n;
      skip = 0;
      for (int64_t d = outer_dims - 1; d >= 0; --d) {  // step the odometer to the next run
        for (size_t k = 0; k < N; ++k) offsets[k] += strides[k][d];
        if (++index[d] < shape[d]) break;
        for (size_t k = 0; k < N; ++k) offsets[k] -= shape[d] * strides[k][d];
        index[d] = 0;
      }
    }
  }
};

// ---- on threads ---------------------------------------------------------------------------------
// Runs f(i) for i in [0, n) on the framework's threads when the work is large enough. Each
// thread runs under the caller's autocast state (tensor/autocast.h), which is per thread.
template <class F>
void parallel_for(int64_t n, int64_t work_per_item, F&& f) {
  const int threads = n >= 2 ? threads_for(n * work_per_item) : 1;
  if (threads <= 1) {
    auto body = f;  // a local copy, as in the parallel region below
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  const autocast::State caller_autocast = autocast::state();
  run_on_threads(threads, [&](int64_t part, int64_t parts) {
    autocast::Guard same_autocast(caller_autocast);
    // Each thread calls its own copy of f. Called through the shared one, the compiler must
    // assume that the loop's stores (to a float array, say) may change f's captured values (a
    // float scale, say), so it reloads them every element and gives up vectorising.
    auto body = f;
    for (int64_t i = (n * part + parts - 1) / parts; i < (n * (part + 1) + parts - 1) / parts; ++i) body(i);
  });
}

// Runs f(first, count) over the columns [0, width) of a sum down columns, in as many blocks as
// there are threads (each a multiple of 16 columns): a column's sum is the same however the
// columns are split, and few wide blocks read each row in long runs (narrow ones each made a
// pass over every page of the rows, which the prefetcher restarts at every page).
template <class F>
void parallel_for_columns(int64_t width, int64_t work_per_column, F&& f) {
  const int64_t parts = std::max(1, get_num_threads());
  const int64_t block = std::max<int64_t>(16, ((width + parts - 1) / parts + 15) / 16 * 16);
  // f is captured by value, so that each thread's copy of the loop holds its own (see parallel_for).
  parallel_for((width + block - 1) / block, block * work_per_column, [f, block, width](int64_t b) {
    const int64_t first = b * block;
    f(first, std::min(block, width - first));
  });
}

}  // namespace cppgrad
