// What sharing key/value heads buys: scaled_dot_product_attention forward+backward with h = 8
// query heads of d 64 (batch 1, causal, float32) over g = 8 key/value heads (multi-head) and
// g = 2 (grouped, h/4), on the fused and the materialising path: the two g timed in turn, run
// by run (so a neighbour's load slows both alike), their ratio, and the allocator's peak of live
// bytes; a causal sliding window on the fused path (the tiles outside it are skipped); then
// cached decoding with nn::Decoder (d_model 512, 8 heads, 2 layers) with g = 8 and g = 2:
// tokens per second and the KV cache's bytes.
//
//   build/release/bench/bench_gqa [--threads N] [--lens 1024,4096]
//
// The fused path reads key/value head i / (h / g) for query head i without repeating it, so a
// grouped call does the same products as a multi-head one (its time should be no worse) while
// its keys, values and their gradients are g/h the size.
#include <fmt/core.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cppgrad.h"
#include "harness.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace {

struct Problem {
  Tensor q, k, v, G;
  F::AttentionOptions options;
  void step() {
    q.zero_grad(), k.zero_grad(), v.zero_grad();
    F::scaled_dot_product_attention(q, k, v, options).output.backward(G);
  }
};

Problem make(int64_t H, int64_t g, int64_t T, int64_t d, std::optional<int64_t> window = std::nullopt) {
  Generator gen(0);
  Problem p;
  p.q = randn({1, H, T, d}, kFloat32, gen).requires_grad_();
  p.k = randn({1, g, T, d}, kFloat32, gen).requires_grad_();
  p.v = randn({1, g, T, d}, kFloat32, gen).requires_grad_();
  p.G = randn({1, H, T, d}, kFloat32, gen);
  p.options = F::AttentionOptions().is_causal(true).enable_gqa(g != H).window(window);
  return p;
}

// The allocator's peak of live bytes over one step, in MB.
double peak_mb(Problem& p) {
  reset_peak_allocated();
  const int64_t held = allocator_stats().in_use_bytes;
  p.step();
  return static_cast<double>(allocator_stats().peak_bytes - held) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  std::vector<int64_t> lens{1024, 4096};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--lens")) {
      lens.clear();
      for (const char* s = argv[i + 1]; *s;) {
        char* end = nullptr;
        lens.push_back(std::strtol(s, &end, 10));
        s = *end == ',' ? end + 1 : end;
      }
    }
  }
  if (threads > 0) set_num_threads(threads);
  const int64_t H = 8, d = 64;
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  fmt::print("scaled_dot_product_attention fwd+bwd: batch 1, {} query heads of d {}, causal, float32, {} threads; "
             "OPENBLAS_CORETYPE={}; load average {:.2f} at start\n",
             H, d, get_num_threads(), coretype ? coretype : "(unset)", bench::load_average());
  fmt::print("{:>6} {:>12} | {:>12} {:>12} {:>8} | {:>10} {:>10}\n", "T", "path", "g=8 med ms", "g=2 med ms",
             "g2 / g8", "g=8 MB", "g=2 MB");
  for (int64_t T : lens) {
    for (auto [name, backend] : {std::pair{"fused", F::AttentionBackend::Fused},
                                 std::pair{"materialize", F::AttentionBackend::Materialize}}) {
      F::set_attention_backend(backend);
      Problem multi = make(H, H, T, d), grouped = make(H, H / 4, T, d);
      const double multi_mb = peak_mb(multi), grouped_mb = peak_mb(grouped);
      const auto [tm, tg] = bench::measure_interleaved([&] { multi.step(); }, [&] { grouped.step(); },
                                                       {.budget_s = T > 2048 ? 6.0 : 2.0, .warm_up = 1, .min_reps = 3});
      fmt::print("{:>6} {:>12} | {:>12.1f} {:>12.1f} {:>8.2f} | {:>10.1f} {:>10.1f}\n", T, name, tm.median_s * 1e3,
                 tg.median_s * 1e3, tg.median_s / tm.median_s, multi_mb, grouped_mb);
      std::fflush(stdout);
    }
  }
  // A causal window of 256 keys on the fused path, g = 2: the tiles outside the band are skipped,
  // so the time grows as T·window rather than T²/2.
  F::set_attention_backend(F::AttentionBackend::Fused);
  fmt::print("\nfused, g = {}, causal window 256 against causal alone:\n", H / 4);
  fmt::print("{:>6} | {:>14} {:>14} {:>8} | {:>10}\n", "T", "causal med ms", "window med ms", "ratio", "window MB");
  for (int64_t T : lens) {
    Problem causal = make(H, H / 4, T, d), windowed = make(H, H / 4, T, d, 256);
    const double window_mb = peak_mb(windowed);
    const auto [tc, tw] = bench::measure_interleaved([&] { causal.step(); }, [&] { windowed.step(); },
                                                     {.budget_s = T > 2048 ? 4.0 : 1.5, .warm_up = 1, .min_reps = 3});
    fmt::print("{:>6} | {:>14.1f} {:>14.1f} {:>8.2f} | {:>10.1f}\n", T, tc.median_s * 1e3, tw.median_s * 1e3,
               tw.median_s / tc.median_s, window_mb);
    std::fflush(stdout);
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
