// bench_matmul: cppgrad's Tensor::matmul against a direct cblas_sgemm on the same data.
//
// Every row times one matrix product both ways, float32, under NoGradGuard (matmul_cblas.h
// says how). Each side is warmed up, then timed call by call, interleaved, so that both see
// the same machine state; the table shows the median. GFLOP/s counts 2*M*N*K per GEMM. "ratio"
// is cppgrad's median time over raw's: 1.00 is parity, above 1 cppgrad is slower.
//
//   bench_matmul                  # full run, about 10 s
//   bench_matmul --quick          # a few repetitions per row, for a smoke test
//   bench_matmul --blas-threads   # cppgrad with set_deterministic_threads(false)
//
// "raw" is cblas_sgemm on OpenBLAS's own threads (as many as the row's), the way OpenBLAS
// splits a product. cppgrad by default (deterministic_threads(), runtime/parallel.h) runs BLAS
// on one thread and splits the product into blocks itself: the ratio is what that costs.
//
// The suite (suite.cpp) runs the same cases as its mm-* rows, next to libtorch.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <omp.h>

#include "harness.h"
#include "matmul_cblas.h"

using namespace cppgrad;

int main(int argc, char** argv) {
  bool quick = false, blas_threads = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--blas-threads") {
      blas_threads = true;
    } else {
      std::printf("usage: %s [--quick] [--blas-threads]\n  times Tensor::matmul against cblas_sgemm at 1 and 2 threads\n",
                  argv[0]);
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  bench::Budget budget;  // per row, both sides together
  budget.budget_s = quick ? 0.02 : 0.3;
  budget.min_reps = quick ? 3 : 7;

  // Other processes steal cores from the 2-thread rows first; the load average tells how idle the machine was.
  double load = 0;
  getloadavg(&load, 1);
  set_deterministic_threads(!blas_threads);
  std::printf("%s; load average %.2f at start\ncppgrad: %s\n\n", openblas_get_config(), load,
              blas_threads ? "BLAS on its own threads (set_deterministic_threads(false))"
                           : "deterministic: BLAS on one thread, the product split into blocks by cppgrad's threads");
  std::printf("%-38s %3s %-16s %6s %11s %11s %9s %9s %7s\n", "case", "thr", "M x N x K", "reps",
              "cppgrad ms", "raw ms", "cppgrad", "raw", "ratio");
  std::printf("%-38s %3s %-16s %6s %11s %11s %9s %9s %7s\n", "", "", "", "", "(median)", "(median)", "GFLOP/s",
              "GFLOP/s", "time");
  NoGradGuard no_grad;
  bool all_match = true;
  for (const bench::MatmulCase& c : bench::matmul_cases()) {
    bench::MatmulOperands o = bench::make_operands(c);
    if (!bench::same_result(c, o)) {
      std::printf("%-38s  RESULTS DIFFER between cppgrad and raw BLAS\n", c.name.c_str());
      all_match = false;
      continue;
    }
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      // raw on OpenBLAS's threads, however cppgrad has set OpenBLAS's count
      auto raw_on_blas_threads = [&] {
        const int before = openblas_get_num_threads();
        openblas_set_num_threads(threads);
        bench::raw_sgemm(c, o);
        openblas_set_num_threads(before);
        omp_set_num_threads(threads);  // OpenBLAS's OpenMP build sets OpenMP's count too
      };
      auto [mine, raw] = bench::measure_interleaved([&] { bench::cppgrad_matmul(o); }, raw_on_blas_threads, budget);
      std::printf("%-38s %3d %-16s %6d %11.3f %11.3f %9.1f %9.1f %7.2f\n", c.name.c_str(), threads, c.dims().c_str(),
                  mine.reps, mine.median_s * 1e3, raw.median_s * 1e3, c.flops() / mine.median_s * 1e-9,
                  c.flops() / raw.median_s * 1e-9, mine.median_s / raw.median_s);
      std::fflush(stdout);
    }
  }
  return all_match ? 0 : 1;
}
