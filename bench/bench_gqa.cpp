// What sharing key/value heads buys: scaled_dot_product_attention forward+backward with h = 8
// query heads of d 64 (batch 1, causal, float32) over g = 8 key/value heads (multi-head) and
// g = 2 (grouped, h/4), on the fused and the materialising path: time and the allocator's peak
// of live bytes; then cached decoding with nn::Decoder (d_model 512, 8 heads, 2 layers) with
// g = 8 and g = 2: tokens per second and the KV cache's bytes.
//
//   build/release/bench/bench_gqa [--threads N]
//
// The fused path reads key/value head i / (h / g) for query head i without repeating it, so a
// grouped call does the same products as a multi-head one (its time should be no worse) while
// its keys, values and their gradients are g/h the size.
#include <fmt/core.h>

#include <cstdlib>
#include <cstring>

#include "cppgrad.h"
#include "harness.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

int main(int argc, char** argv) {
  int threads = 0;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
  if (threads > 0) set_num_threads(threads);
  const int64_t H = 8, d = 64;
  fmt::print("scaled_dot_product_attention fwd+bwd: batch 1, {} query heads of d {}, causal, float32, {} threads\n", H,
             d, get_num_threads());
  fmt::print("{:>6} {:>12} {:>3} {:>10} {:>10} {:>9}\n", "T", "path", "g", "median ms", "min ms", "peak MB");
  for (int64_t T : {1024, 4096}) {
    for (auto [name, backend] : {std::pair{"fused", F::AttentionBackend::Fused},
                                 std::pair{"materialize", F::AttentionBackend::Materialize}}) {
      for (int64_t g : {H, H / 4}) {
        F::set_attention_backend(backend);
        Generator gen(0);
        Tensor q = randn({1, H, T, d}, kFloat32, gen).requires_grad_();
        Tensor k = randn({1, g, T, d}, kFloat32, gen).requires_grad_(), v = randn({1, g, T, d}, kFloat32, gen).requires_grad_();
        Tensor G = randn({1, H, T, d}, kFloat32, gen);
        auto step = [&] {
          q.zero_grad(), k.zero_grad(), v.zero_grad();
          F::scaled_dot_product_attention(q, k, v, F::AttentionOptions().is_causal(true).enable_gqa(g != H))
              .output.backward(G);
        };
        reset_peak_allocated();
        const int64_t held = allocator_stats().in_use_bytes;
        const bench::Timing t = bench::measure(step, {.budget_s = T > 2048 ? 3.0 : 1.0, .warm_up = 1, .min_reps = 3});
        fmt::print("{:>6} {:>12} {:>3} {:>10.1f} {:>10.1f} {:>9.1f}\n", T, name, g, t.median_s * 1e3, t.min_s * 1e3,
                   static_cast<double>(allocator_stats().peak_bytes - held) / 1e6);
        std::fflush(stdout);
      }
    }
  }
  F::set_attention_backend(F::AttentionBackend::Auto);

  const int64_t E = 512, layers = 2, n = 1024;
  fmt::print("\ncached decoding, nn::Decoder d_model {}, {} heads, {} layers, batch 1, {} tokens from a 1-token prompt\n", E,
             H, layers, n);
  fmt::print("{:>3} {:>12} {:>14} {:>12}\n", "g", "parameters", "KV cache MB", "tokens/s");
  for (int64_t g : {H, H / 4}) {
    manual_seed(0);
    nn::Decoder lm(nn::DecoderOptions(256, E, layers, H).num_kv_heads(g));
    lm.eval();
    NoGradGuard no_grad;
    std::vector<nn::KVCache> caches(layers);
    Generator gen(1);
    Tensor tokens = randint(0, 256, {1, n}, gen);
    const double s = bench::seconds([&] {
      for (int64_t t = 0; t < n; ++t) lm.forward_step(tokens.narrow(1, t, 1), caches);
    });
    double cache_bytes = 0;
    for (const auto& c : caches) cache_bytes += static_cast<double>((c.key.numel() + c.value.numel()) * 4);
    fmt::print("{:>3} {:>12} {:>14.2f} {:>12.0f}\n", g, lm.parameter_count(), cache_bytes / 1e6, n / s);
  }
  return 0;
}
