// One matrix product both ways, on the same memory: cppgrad's Tensor::matmul and a direct
// cblas_sgemm. Shared by bench_matmul (the detailed table) and suite (its mm-* rows).
//
//   cppgrad  a.matmul(b), where a and b may be transposed views (handed to BLAS as flags)
//            and a fresh output tensor is allocated by every call, as in real use;
//   raw      cblas_sgemm with the matching transpose flags into a buffer allocated once
//            (a batched product is a loop of cblas_sgemm calls, one per matrix).
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cppgrad.h"
#include "rows.h"

namespace bench {

// The operands of one case, as cppgrad tensors (views where the case transposes) over the
// same memory that the raw calls read.
struct MatmulOperands {
  cppgrad::Tensor a_stored, b_stored;  // contiguous storage
  cppgrad::Tensor a, b;                // what cppgrad multiplies: possibly transposed views of the above
  std::vector<float> c_raw;            // raw BLAS's output, allocated once
};

inline MatmulOperands make_operands(const MatmulCase& c) {
  using cppgrad::Shape;
  cppgrad::NoGradGuard no_grad;
  MatmulOperands o;
  const int64_t m = c.fold ? c.m / c.batch : c.m;
  auto stored = [](bool trans, int64_t rows, int64_t cols) { return trans ? Shape{cols, rows} : Shape{rows, cols}; };
  Shape sa = stored(c.trans_a, m, c.k), sb = stored(c.trans_b, c.k, c.n);
  if (c.batch > 0) sa.insert(sa.begin(), c.batch);
  if (c.batch > 0 && !c.fold) sb.insert(sb.begin(), c.batch);
  o.a_stored = cppgrad::randn(sa);
  o.b_stored = cppgrad::randn(sb);
  o.a = c.trans_a ? o.a_stored.mT() : o.a_stored;
  o.b = c.trans_b ? o.b_stored.mT() : o.b_stored;
  o.c_raw.assign(static_cast<size_t>(c.gemms() * c.m * c.n), 0.0f);
  return o;
}

// The caller holds a NoGradGuard, as for every timed product.
inline void cppgrad_matmul(MatmulOperands& o) {
  cppgrad::Tensor out = o.a.matmul(o.b);
}

inline void raw_sgemm(const MatmulCase& c, MatmulOperands& o) {
  const float* a = o.a_stored.data<float>();
  const float* b = o.b_stored.data<float>();
  float* out = o.c_raw.data();
  const auto ta = c.trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = c.trans_b ? CblasTrans : CblasNoTrans;
  const int lda = static_cast<int>(c.trans_a ? c.m : c.k);
  const int ldb = static_cast<int>(c.trans_b ? c.k : c.n);
  const int m = static_cast<int>(c.m), n = static_cast<int>(c.n), k = static_cast<int>(c.k);
  if (c.gemms() == 1) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, out, n);
    return;
  }
  for (int64_t i = 0; i < c.batch; ++i)
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a + i * c.m * c.k, lda, b + i * c.k * c.n, ldb, 0.0f,
                out + i * c.m * c.n, n);
}

// Both sides must compute the same product, or the comparison means nothing.
inline bool same_result(const MatmulCase& c, MatmulOperands& o) {
  cppgrad::NoGradGuard no_grad;
  std::vector<float> mine = o.a.matmul(o.b).to_vector<float>();
  raw_sgemm(c, o);
  double worst = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    const double d = std::abs(double(mine[i]) - double(o.c_raw[i]));
    if (std::isnan(d)) return false;  // std::max would drop it
    worst = std::max(worst, d);
  }
  return mine.size() == o.c_raw.size() && worst <= 1e-3 * std::sqrt(double(c.k));
}

}  // namespace bench
