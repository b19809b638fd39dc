// bench_bf16_gemm: autocast's kernels against the float32 product, at gpt-M's shapes
// (bench_gpt.cpp: rows B·T = 2048, d_model 384, ff 1536, vocabulary 256; attention's per-head
// products T = 256, d_k = 64; fused attention's tiles of 64 rows, where a call's own cost shows).
// Decides which kernel autocast takes on this CPU (tensor/autocast.h):
//
//   fp32        Tensor::matmul outside autocast: OpenBLAS's sgemm
//   bf16 fp32   autocast on the float32 GEMM: inputs rounded to bfloat16, then sgemm
//   bf16 oneDNN autocast on oneDNN's bfloat16 matmul (float32 sums)
//   autocast    autocast on the kernel it takes here (Auto): oneDNN where the CPU has bfloat16
//               instructions, else the float32 product as it is, which must be no slower than fp32
//
// timed in turn, run by run, on one thread (cppgrad's deterministic mode, as a training step at
// --threads 1). Prints medians, the ratios to fp32, the CPU's flags and the ISA oneDNN sees.
//
//   build/release/bench/bench_bf16_gemm [--quick]
#include <fmt/core.h>

#include <cblas.h>

#include <cstring>
#include <string>

#include "cppgrad.h"
#include "harness.h"

using namespace cppgrad;

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  set_num_threads(1);
  struct Shape {
    const char* what;
    int64_t m, k, n;
  };
  const Shape shapes[] = {{"qkv projection", 2048, 384, 1152}, {"attention out", 2048, 384, 384},
                          {"ff up", 2048, 384, 1536},          {"ff down", 2048, 1536, 384},
                          {"logits (tied)", 2048, 384, 256},   {"scores Q·Kᵀ", 256, 64, 256},
                          {"weights·V", 256, 256, 64},         {"a 64-row tile", 64, 64, 64}};
  fmt::print("{}\nOpenBLAS {} · oneDNN sees {} · autocast's kernel here: {} · load {:.2f}\n",
             bench::cpu_description(), openblas_get_corename(), autocast::onednn_isa_name(),
             autocast::kernel_name(autocast::kernel()), bench::load_average());
  fmt::print("{:<16} {:>16} {:>10} {:>14} {:>8} {:>14} {:>8} {:>12} {:>8}\n", "product", "m×k×n", "fp32 ms",
             "bf16 fp32 ms", "ratio", "bf16 oneDNN ms", "ratio", "autocast ms", "ratio");
  Generator gen(0);
  const bench::Budget budget{.budget_s = quick ? 0.2 : 1.5, .warm_up = 2, .min_reps = quick ? 3 : 7, .max_reps = 1000};
  for (const Shape& s : shapes) {
    Tensor a = randn({s.m, s.k}, kFloat32, gen), b = randn({s.k, s.n}, kFloat32, gen);
    auto fp32 = [&] { a.matmul(b); };
    auto with = [&](autocast::Kernel kernel) {
      return [&a, &b, kernel] {
        autocast::set_kernel(kernel);
        autocast::Guard bf16(kBFloat16);
        a.matmul(b);
      };
    };
    const auto [f, rounded] = bench::measure_interleaved(fp32, with(autocast::Kernel::RoundedFloat32), budget);
    const auto [f2, onednn] = bench::measure_interleaved(fp32, with(autocast::Kernel::OneDnn), budget);
    const auto [f3, taken] = bench::measure_interleaved(fp32, with(autocast::Kernel::Auto), budget);
    // Each ratio is to the fp32 runs timed in turn with it.
    fmt::print("{:<16} {:>16} {:>10.4g} {:>14.4g} {:>7.2f}x {:>14.4g} {:>7.2f}x {:>12.4g} {:>7.2f}x\n", s.what,
               fmt::format("{}×{}×{}", s.m, s.k, s.n), f3.median_s * 1e3, rounded.median_s * 1e3,
               rounded.median_s / f.median_s, onednn.median_s * 1e3, onednn.median_s / f2.median_s,
               taken.median_s * 1e3, taken.median_s / f3.median_s);
  }
  autocast::set_kernel(autocast::Kernel::Auto);
  fmt::print("load at the end {:.2f}\n", bench::load_average());
}
