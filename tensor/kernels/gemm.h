// C = op(A) · op(B) + beta · C through cblas_sgemm / cblas_dgemm, row-major, for the kernels
// that call BLAS on raw buffers (matmul, fused attention).
#pragma once

#include <cblas.h>

#include <cstdint>
#include <type_traits>

#include "../../runtime/profile.h"

namespace cppgrad::kernels {

template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
          int64_t ldc, T beta = T(0)) {
  // Small products (attention's per-head matrices) are reported apart: call overhead dominates them.
  CPPGRAD_PROFILE_SCOPE(m * n * k < 65536 ? "blas gemm, small" : "blas gemm");
  const auto trans_a = ta ? CblasTrans : CblasNoTrans;
  const auto trans_b = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, trans_a, trans_b, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, beta, c,
                (int)ldc);
  else
    cblas_dgemm(CblasRowMajor, trans_a, trans_b, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb, beta, c,
                (int)ldc);
}

}  // namespace cppgrad::kernels
