// bench_matmul: cppgrad's Tensor::matmul against a direct cblas_sgemm on the same data.
//
// Every row times one matrix product both ways, float32, under NoGradGuard:
//   cppgrad  a.matmul(b), where a and b may be transposed views (handed to BLAS as flags)
//            and a fresh output tensor is allocated by every call, as in real use;
//   raw      cblas_sgemm with the matching transpose flags into a buffer allocated once
//            (a batched product is a loop of cblas_sgemm calls, one per matrix).
// Each side is warmed up, then timed call by call, interleaved, so that both see the same
// machine state; the table shows the median. GFLOP/s counts 2*M*N*K per GEMM. "ratio" is
// cppgrad's median time over raw's: 1.00 is parity, above 1 cppgrad is slower.
//
//   bench_matmul           # full run, about 10 s
//   bench_matmul --quick   # a few repetitions per row, for a smoke test
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "cppgrad.h"

using namespace cppgrad;

namespace {

// C[batch] = op(A[batch]) * op(B[batch]); op transposes when the flag says so.
struct Case {
  std::string name;
  int64_t batch;  // 0: plain 2-D product; otherwise a batch of independent products
  int64_t m, n, k;
  bool trans_a, trans_b;
  bool fold = false;  // a is 3-D (batch x M/batch x K) times a 2-D b: one GEMM with M rows

  int64_t gemms() const { return batch == 0 || fold ? 1 : batch; }
};

std::vector<Case> cases() {
  std::vector<Case> list;
  for (int64_t s : {64, 128, 256, 512, 1024}) list.push_back({"square " + std::to_string(s), 0, s, s, s, false, false});
  // A small Transformer: 1024 tokens, embed 128, feed-forward 512, attention heads of dim 32.
  list.push_back({"qkv proj (1024x128)(128x384)", 0, 1024, 384, 128, false, false});
  list.push_back({"ffn down (1024x512)(512x128)", 0, 1024, 128, 512, false, false});
  list.push_back({"heads 64x (64x32)(32x64)", 64, 64, 64, 32, false, false});
  // Transposed views: the forward of Linear (x W^T) and the gradient of its weight (dY^T x).
  list.push_back({"A B^T 512", 0, 512, 512, 512, false, true});
  list.push_back({"A^T B 512", 0, 512, 512, 512, true, false});
  list.push_back({"linear x W^T (1024x128)(384x128)^T", 0, 1024, 384, 128, false, true});
  list.push_back({"grad W dY^T x (1024x384)^T(1024x128)", 0, 384, 128, 1024, true, false});
  list.push_back({"linear 3-D (8x128x128)(384x128)^T", 8, 1024, 384, 128, false, true, true});
  return list;
}

// The operands of one case, as cppgrad tensors (views where the case transposes) over the
// same memory that the raw calls read.
struct Operands {
  Tensor a_stored, b_stored;  // contiguous storage
  Tensor a, b;                // what cppgrad multiplies: possibly transposed views of the above
  std::vector<float> c_raw;   // raw BLAS's output, allocated once
};

Operands make_operands(const Case& c) {
  NoGradGuard no_grad;
  Operands o;
  const int64_t m = c.fold ? c.m / c.batch : c.m;
  auto stored = [](bool trans, int64_t rows, int64_t cols) { return trans ? Shape{cols, rows} : Shape{rows, cols}; };
  Shape sa = stored(c.trans_a, m, c.k), sb = stored(c.trans_b, c.k, c.n);
  if (c.batch > 0) sa.insert(sa.begin(), c.batch);
  if (c.batch > 0 && !c.fold) sb.insert(sb.begin(), c.batch);
  o.a_stored = randn(sa);
  o.b_stored = randn(sb);
  o.a = c.trans_a ? o.a_stored.mT() : o.a_stored;
  o.b = c.trans_b ? o.b_stored.mT() : o.b_stored;
  o.c_raw.assign(static_cast<size_t>(c.gemms() * c.m * c.n), 0.0f);
  return o;
}

void raw_sgemm(const Case& c, Operands& o) {
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
bool same_result(const Case& c, Operands& o) {
  NoGradGuard no_grad;
  std::vector<float> mine = o.a.matmul(o.b).to_vector<float>();
  raw_sgemm(c, o);
  double worst = 0;
  for (size_t i = 0; i < mine.size(); ++i) worst = std::max(worst, std::abs(double(mine[i]) - double(o.c_raw[i])));
  return mine.size() == o.c_raw.size() && worst <= 1e-3 * std::sqrt(double(c.k));
}

double seconds(const std::function<void()>& f) {
  auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

struct Row {
  double cppgrad_s, raw_s;
  int reps;
};

// Warms both sides up, picks a repetition count that fills `budget_s`, then times them in turn.
Row measure(const Case& c, Operands& o, double budget_s, int min_reps) {
  NoGradGuard no_grad;
  auto run_cppgrad = [&] { Tensor out = o.a.matmul(o.b); };
  auto run_raw = [&] { raw_sgemm(c, o); };
  double pair = 0;
  for (int i = 0; i < 3; ++i) pair = seconds(run_cppgrad) + seconds(run_raw);
  const int reps = std::clamp(static_cast<int>(budget_s / pair), min_reps, 100000);
  std::vector<double> t_cppgrad, t_raw;
  for (int i = 0; i < reps; ++i) {
    t_cppgrad.push_back(seconds(run_cppgrad));
    t_raw.push_back(seconds(run_raw));
  }
  return {median(t_cppgrad), median(t_raw), reps};
}

std::string dims(const Case& c) {
  std::string s = std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k);
  if (c.gemms() > 1) s = std::to_string(c.batch) + " * " + s;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else {
      std::printf("usage: %s [--quick]\n  times Tensor::matmul against cblas_sgemm at 1 and 2 threads\n", argv[0]);
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  const double budget_s = quick ? 0.02 : 0.3;  // per row, both sides together
  const int min_reps = quick ? 3 : 7;

  // Other processes steal cores from the 2-thread rows first; the load average tells how idle the machine was.
  double load = 0;
  getloadavg(&load, 1);
  std::printf("%s; load average %.2f at start\n\n", openblas_get_config(), load);
  std::printf("%-38s %3s %-16s %6s %11s %11s %9s %9s %7s\n", "case", "thr", "M x N x K", "reps",
              "cppgrad ms", "raw ms", "cppgrad", "raw", "ratio");
  std::printf("%-38s %3s %-16s %6s %11s %11s %9s %9s %7s\n", "", "", "", "", "(median)", "(median)", "GFLOP/s",
              "GFLOP/s", "time");
  bool all_match = true;
  for (const Case& c : cases()) {
    Operands o = make_operands(c);
    if (!same_result(c, o)) {
      std::printf("%-38s  RESULTS DIFFER between cppgrad and raw BLAS\n", c.name.c_str());
      all_match = false;
      continue;
    }
    const double flop = 2.0 * double(c.m) * double(c.n) * double(c.k) * double(c.gemms());
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Row r = measure(c, o, budget_s, min_reps);
      std::printf("%-38s %3d %-16s %6d %11.3f %11.3f %9.1f %9.1f %7.2f\n", c.name.c_str(), threads, dims(c).c_str(),
                  r.reps, r.cppgrad_s * 1e3, r.raw_s * 1e3, flop / r.cppgrad_s * 1e-9, flop / r.raw_s * 1e-9,
                  r.cppgrad_s / r.raw_s);
      std::fflush(stdout);
    }
  }
  return all_match ? 0 : 1;
}
