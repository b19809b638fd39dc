// The transcendental unary rows in float32: the vectorised fast form (tensor/kernels/fast/
// unary_floats.cpp) against the scalar reference (reference mode), forward alone and forward +
// backward through autograd, on a tensor of gpt-M's feed-forward activation (batch 8, T 256,
// 1536 features: 3.1M floats). The two forms run in turn, run by run (measure_interleaved), so a
// neighbour's load slows both alike.
//
//   build/release/bench/bench_unary [--threads N] [--quick]
#include <fmt/core.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "cppgrad.h"
#include "harness.h"

using namespace cppgrad;

namespace {
// The CPU's vector units, and so which clone of the cloned loops runs (runtime/simd_clones.h).
std::string cpu_flags() {
  const char* clone = __builtin_cpu_supports("avx512f") ? "x86-64-v4 (AVX-512)"
                      : __builtin_cpu_supports("avx2") ? "x86-64-v3 (AVX2)"
                                                       : "baseline (SSE2)";
  return fmt::format("{}; clone run: {}", bench::cpu_description(), clone);
}
}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--quick")) quick = true;
  }
  if (threads > 0) set_num_threads(threads);
  const double budget = quick ? 0.2 : 2.0;
  fmt::print("# CPU: {}\n# {} threads; float32 (8, 256, 1536); median ms per call, scalar reference / vectorised form\n",
             cpu_flags(), get_num_threads());
  fmt::print("{:<10} {:>13} {:>13} {:>7}   {:>13} {:>13} {:>7}\n", "op", "fwd scalar", "fwd vector", "ratio",
             "fwd+bwd scalar", "fwd+bwd vector", "ratio");
  Generator gen(0);
  const Tensor x0 = randn({8, 256, 1536}, kFloat32, gen) * 2.0;
  const Tensor positive = x0.abs() + 0.01;  // log's domain
  const Tensor G = randn({8, 256, 1536}, kFloat32, gen);
  struct Row {
    const char* name;
    Tensor (*f)(const Tensor&);
  };
  const Row rows[] = {{"gelu", [](const Tensor& t) { return t.gelu(); }},
                      {"gelu_tanh", [](const Tensor& t) { return t.gelu("tanh"); }},
                      {"silu", [](const Tensor& t) { return t.silu(); }},
                      {"sigmoid", [](const Tensor& t) { return t.sigmoid(); }},
                      {"tanh", [](const Tensor& t) { return t.tanh(); }},
                      {"erf", [](const Tensor& t) { return t.erf(); }},
                      {"exp", [](const Tensor& t) { return t.exp(); }},
                      {"log", [](const Tensor& t) { return t.log(); }}};
  for (const Row& row : rows) {
    const Tensor& input = std::strcmp(row.name, "log") == 0 ? positive : x0;
    auto forward = [&] { autograd::NoGradGuard no_grad; (void)row.f(input); };
    auto both = [&] {
      Tensor x = input.detach().requires_grad_();
      row.f(x).backward(G);
    };
    auto scalar = [](auto f) { return [f] { ReferenceModeGuard on; f(); }; };
    const bench::Budget b{.budget_s = budget, .warm_up = 2, .min_reps = 5};
    const auto [fwd_ref, fwd_fast] = bench::measure_interleaved(scalar(forward), forward, b);
    const auto [all_ref, all_fast] = bench::measure_interleaved(scalar(both), both, b);
    fmt::print("{:<10} {:>13.2f} {:>13.2f} {:>6.1f}x   {:>13.2f} {:>13.2f} {:>6.1f}x\n", row.name, fwd_ref.median_s * 1e3,
               fwd_fast.median_s * 1e3, fwd_ref.median_s / fwd_fast.median_s, all_ref.median_s * 1e3,
               all_fast.median_s * 1e3, all_ref.median_s / all_fast.median_s);
    std::fflush(stdout);
  }
}
