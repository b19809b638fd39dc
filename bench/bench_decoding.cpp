// Generation speed: tokens per second when a decoder-only Transformer (char_lm's shape: causal
// encoder layers) extends a one-token prompt by N tokens, with the keys and values of past
// positions cached (forward_step) and by recomputing the whole prefix for each new token.
//
//   build/release/bench/bench_decoding [--threads N] [--layers L]
//
// A step with the cache projects one new position and attends over L cached ones: O(L) work;
// recomputing runs the whole prefix again: O(L²) for attention, O(L) per layer for the rest.
#include <fmt/core.h>

#include <cstdlib>
#include <cstring>

#include "cppgrad.h"
#include "harness.h"

using namespace cppgrad;

int main(int argc, char** argv) {
  int threads = 0;
  int64_t layers = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--layers")) layers = std::atoll(argv[i + 1]);
  }
  if (threads > 0) set_num_threads(threads);
  const int64_t E = 128, H = 4, FF = 512;
  manual_seed(0);
  nn::TransformerEncoder model(nn::TransformerLayerOptions(E, H).dim_feedforward(FF), layers);
  model.eval();
  NoGradGuard no_grad;
  fmt::print("decoder-only Transformer: {} layers, d_model {}, {} heads, feed-forward {}, batch 1, float32, {} threads\n",
             layers, E, H, FF, get_num_threads());
  fmt::print("{:>8} {:>16} {:>16} {:>9} {:>14}\n", "tokens", "cached tok/s", "recompute tok/s", "speed-up",
             "max |diff|");
  for (int64_t n : {64, 256, 1024}) {
    Generator gen(1);
    Tensor inputs = randn({1, n, E}, kFloat32, gen);  // stands for the embedded tokens
    Tensor last_cached, last_full;
    const double cached_s = bench::seconds([&] {
      std::vector<nn::KVCache> cache;
      for (int64_t t = 0; t < n; ++t) last_cached = model.forward_step(inputs.narrow(1, t, 1), cache);
    });
    const double full_s = bench::seconds([&] {
      for (int64_t t = 0; t < n; ++t) last_full = model.forward(inputs.narrow(1, 0, t + 1), {}, {}, true).narrow(1, t, 1);
    });
    const double diff = (last_cached - last_full).abs().max().item<double>();
    fmt::print("{:>8} {:>16.0f} {:>16.0f} {:>8.1f}x {:>14.2e}\n", n, n / cached_s, n / full_s, full_s / cached_s, diff);
    std::fflush(stdout);
  }
  return 0;
}
