// C = op(A) · op(B) + beta · C through cblas_sgemm / cblas_dgemm, row-major, for the kernels
// that call BLAS on raw buffers (matmul, fused attention).
//
// The same bits at any thread count (runtime/parallel.h, deterministic_threads()): BLAS runs on
// one thread, and a large product is cut into blocks of rows of C (or of columns, when C is
// wider than tall) at boundaries set by the shapes alone; cppgrad's threads take the blocks, and
// BLAS computes each block the same way whichever thread runs it, and however many there are.
// Each element of C is one BLAS dot product over all of k: nothing is split along k.
//
// Inside an autocast region (tensor/autocast.h) a float32 product goes to gemm_bf16
// (bf16_gemm.cpp): its inputs rounded to bfloat16, the sums in float32, cut into the same blocks;
// except on a CPU without bfloat16 instructions, where it stays here (autocast::Kernel::Float32).
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <fmt/format.h>

#include "../../runtime/parallel.h"
#include "../../runtime/profile.h"
#include "../autocast.h"
#include "../iterate.h"

namespace cppgrad::kernels {

// Whether a product is cut into gemm_blocks: Blocks when it is called on its own (the blocks are
// its threads' work), Whole when its caller is already one item of a parallel loop (fused
// attention's tiles), whose threads the loop keeps busy: cutting it would only multiply the
// calls (each repacking its uncut operand). Either is fixed by the call site, so the bits do
// not depend on the thread count.
enum class GemmCut { Blocks, Whole };

namespace detail {
template <class T>
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
               T* c, int64_t ldc, T beta) {
  const auto trans_a = ta ? CblasTrans : CblasNoTrans;
  const auto trans_b = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, trans_a, trans_b, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, beta, c,
                (int)ldc);
  else
    cblas_dgemm(CblasRowMajor, trans_a, trans_b, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb, beta, c,
                (int)ldc);
}

// How a product of m × n × k is cut: blocks of `size` rows (or columns) of C, from the shape
// alone. Below kWholeWork multiply-adds the product is one block (splitting it costs more calls
// than it saves). Each block repacks the operand that is not cut (BLAS packs it per call), so
// the longer side of C is the one cut, and into at most 4 blocks (2 per thread on 2 cores; each
// more repacks that operand once more, where OpenBLAS alone packs it once per call) of at least
// 64 (in multiples of 16, a whole number of the micro-kernels' tiles).
struct GemmBlocks {
  bool by_rows;
  int64_t size, count;
};
inline GemmBlocks gemm_blocks(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kWholeWork = int64_t{1} << 21, kMinBlock = 64;
  const bool by_rows = m >= n;
  const int64_t side = by_rows ? m : n;
  auto rounded = [](int64_t size) { return (size + 15) / 16 * 16; };
  if (m * n * k < kWholeWork || side < 2 * kMinBlock) return {by_rows, side, 1};
  // 4 blocks where each has 64 rows, else 2 (never 3: on 2 threads one would wait a whole block)
  const int64_t size = side >= 4 * kMinBlock ? rounded((side + 3) / 4) : rounded((side + 1) / 2);
  return {by_rows, size, (side + size - 1) / size};
}

// C = op(A)·op(B) + beta·C by block_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta) on each
// block of C (gemm_blocks), or on all of C at once when threads need not give the same bits.
template <class In, class Out, class BlockGemm>
void blocked_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const In* a, int64_t lda, const In* b, int64_t ldb,
                  Out* c, int64_t ldc, Out beta, GemmCut cut, BlockGemm&& block_gemm) {
  if (!deterministic_threads() || cut == GemmCut::Whole) return block_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta);
  const GemmBlocks blocks = gemm_blocks(m, n, k);
  if (blocks.count == 1) return block_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta);
  parallel_for(blocks.count, blocks.size * (blocks.by_rows ? n : m) * k, [&](int64_t i) {
    const int64_t start = i * blocks.size;
    if (blocks.by_rows) {  // rows start.. of op(A) and of C
      const int64_t rows = std::min(blocks.size, m - start);
      block_gemm(ta, tb, rows, n, k, ta ? a + start : a + start * lda, lda, b, ldb, c + start * ldc, ldc, beta);
    } else {  // columns start.. of op(B) and of C
      const int64_t cols = std::min(blocks.size, n - start);
      block_gemm(ta, tb, m, cols, k, a, lda, tb ? b + start * ldb : b + start, ldb, c + start, ldc, beta);
    }
  });
}

// Autocast's product (bf16_gemm.cpp). a_of and b_of, when given, are the tensors a and b point
// into: their rounded copies are kept in the cast cache (tensor/autocast_cache.h).
void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float* c, int64_t ldc, float beta, GemmCut cut, const Tensor* a_of, const Tensor* b_of);
// A product's name in the profile: autocast's apart, and small products (attention's per-head
// matrices) apart, as call overhead dominates them.
inline const char* product_name(bool bf16, int64_t m, int64_t n, int64_t k) {
  const bool small = m * n * k < 65536;
  return bf16 ? (small ? "bf16 gemm, small" : "bf16 gemm") : (small ? "blas gemm, small" : "blas gemm");
}
// Counts, into autocast's cast_stats, products and roundings made by a kernel that rounds its
// operands itself (the fused attention's tiles).
void count_autocast(int64_t products, int64_t operands_rounded, int64_t bytes_rounded);
}  // namespace detail

// The operands' tensors (a_of, b_of) matter only to autocast's cast cache; callers that have
// them (matmul, linear) pass them, callers multiplying raw blocks do not.
template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
          int64_t ldc, T beta = T(0), const Tensor* a_of = nullptr, const Tensor* b_of = nullptr,
          GemmCut cut = GemmCut::Blocks) {
  if constexpr (std::is_same_v<T, float>)
    if (autocast::is_enabled() && autocast::kernel() != autocast::Kernel::Float32) {
      profile::Scope scope(detail::product_name(true, m, n, k));
      return detail::gemm_bf16(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta, cut, a_of, b_of);
    }
  profile::Scope scope(detail::product_name(false, m, n, k));
  if (scope.traced())  // C (m, n) = op(A) (m, k) · op(B) (k, n)
    scope.describe(fmt::format("m={} n={} k={}{}{} {}", m, n, k, ta ? " Aᵀ" : "", tb ? " Bᵀ" : "",
                               sizeof(T) == 4 ? "float32" : "float64"));
  detail::blocked_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta, cut,
                       [](auto... args) { detail::blas_gemm(args...); });
}

}  // namespace cppgrad::kernels
