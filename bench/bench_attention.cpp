// Fused against materialised attention: forward + backward of scaled_dot_product_attention at
// batch 1, 8 heads, head dim 64, float32, for growing sequence lengths, causal and not.
//
//   build/release/bench/bench_attention [--threads N] [--max-len T] [--budget S]
//
// Memory is the caching allocator's peak of bytes held by live tensors during one step above
// what q, k, v hold (exact, load-independent); time is the median step, the two paths timed in
// turn. The materialised path holds the (T × T) scores and weights per head (and their
// gradients); the fused one holds O(T·d) per head.
#include <fmt/core.h>

#include <cstdlib>
#include <cstring>

#include "cppgrad.h"
#include "harness.h"
#include "tensor/allocator.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

int main(int argc, char** argv) {
  int threads = 0;
  int64_t max_len = 4096;
  double budget = 2.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--max-len")) max_len = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--budget")) budget = std::atof(argv[i + 1]);
  }
  if (threads > 0) set_num_threads(threads);
  const int64_t B = 1, H = 8, d = 64;
  fmt::print("attention forward+backward, batch {}, {} heads, head dim {}, float32, {} threads\n", B, H, d,
             get_num_threads());
  fmt::print("{:>6} {:>7} {:>13} {:>13} {:>8} {:>12} {:>12} {:>8}\n", "T", "causal", "fused MB", "material. MB",
             "ratio", "fused ms", "material. ms", "ratio");
  for (int64_t T : {64, 128, 256, 512, 1024, 2048, 4096, 8192}) {
    if (T > max_len) break;
    for (bool causal : {false, true}) {
      Generator gen(0);
      Tensor q = randn({B, H, T, d}, kFloat32, gen).requires_grad_(), k = randn({B, H, T, d}, kFloat32, gen).requires_grad_();
      Tensor v = randn({B, H, T, d}, kFloat32, gen).requires_grad_();
      Tensor G = randn({B, H, T, d}, kFloat32, gen);
      auto step = [&](F::AttentionBackend backend) {
        F::set_attention_backend(backend);
        q.zero_grad(), k.zero_grad(), v.zero_grad();
        (F::scaled_dot_product_attention(q, k, v, {}, 0.0, causal).output * G).sum().backward();
      };
      auto peak_mb = [&](F::AttentionBackend backend) {
        step(backend);
        reset_peak_allocated();
        const int64_t before = allocator_stats().in_use_bytes;
        step(backend);
        return (allocator_stats().peak_bytes - before) / 1e6;
      };
      const double mem_fused = peak_mb(F::AttentionBackend::Fused);
      const double mem_full = peak_mb(F::AttentionBackend::Materialize);
      auto [fused, full] = bench::measure_interleaved([&] { step(F::AttentionBackend::Fused); },
                                                      [&] { step(F::AttentionBackend::Materialize); },
                                                      {.budget_s = budget, .warm_up = 1, .min_reps = 3});
      fmt::print("{:>6} {:>7} {:>13.1f} {:>13.1f} {:>7.1f}x {:>12.2f} {:>12.2f} {:>7.2f}x\n", T, causal ? "yes" : "no",
                 mem_fused, mem_full, mem_full / mem_fused, fused.median_s * 1e3, full.median_s * 1e3,
                 full.median_s / fused.median_s);
      std::fflush(stdout);
    }
  }
  F::set_attention_backend(F::AttentionBackend::Auto);
  return 0;
}
