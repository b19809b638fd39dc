// Does layer_norm's fused kernel pay? layer_norm forward+backward (input, weight and bias
// gradients) on (rows, width) float32: its fast form (one pass over each row each way,
// autograd/fast/layer_norm.cpp) against its reference (the formula as tensor ops,
// autograd/ops_nn.cpp, in reference mode), timed in turn run by run, with the ratio and the
// allocator's peak of live bytes.
//
//   build/release/bench/bench_layernorm [--threads N] [--fast-only]
//
// --fast-only times the fast form alone (no reference run between, whose memory traffic would
// otherwise sit in the caches the fast form reads).
#include <fmt/core.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cppgrad.h"
#include "harness.h"

using namespace cppgrad;

int main(int argc, char** argv) {
  int threads = 0;
  bool fast_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--fast-only")) fast_only = true;
  }
  if (threads > 0) set_num_threads(threads);
  const double load = bench::load_average();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  fmt::print("layer_norm fwd+bwd, float32, {} threads; OPENBLAS_CORETYPE={}; load average {:.2f} at start\n",
             get_num_threads(), coretype ? coretype : "(unset)", load);
  fmt::print("{:>6} {:>6} | {:>12} {:>12} {:>8} | {:>10} {:>10}\n", "rows", "width", "fast ms", "reference ms",
             "ref/fast", "fast MB", "ref MB");
  // gpt-M's activations (8 × 256 tokens of 256), and a larger model's
  for (auto [rows, width] : {std::pair<int64_t, int64_t>{2048, 256}, {16384, 1024}}) {
    Generator gen(0);
    Tensor x = randn({rows, width}, kFloat32, gen).requires_grad_();
    Tensor w = (1.0 + 0.1 * randn({width}, kFloat32, gen)).detach().requires_grad_();
    Tensor b = (0.1 * randn({width}, kFloat32, gen)).detach().requires_grad_();
    Tensor G = randn({rows, width}, kFloat32, gen);
    auto step = [&](bool reference) {
      ReferenceModeGuard mode(reference);
      x.zero_grad(), w.zero_grad(), b.zero_grad();
      layer_norm(x, 1, w, b, 1e-5).backward(G);
    };
    auto peak = [&](bool reference) {
      reset_peak_allocated();
      const int64_t held = allocator_stats().in_use_bytes;
      step(reference);
      return static_cast<double>(allocator_stats().peak_bytes - held) / 1e6;
    };
    const double fast_mb = peak(false), ref_mb = peak(true);
    if (fast_only) {
      const bench::Timing tf = bench::measure([&] { step(false); }, {.budget_s = 2.0});
      fmt::print("{:>6} {:>6} | {:>12.3f} {:>12} {:>8} | {:>10.1f} {:>10}\n", rows, width, tf.median_s * 1e3, "-", "-",
                 fast_mb, "-");
      continue;
    }
    const auto [tf, tr] = bench::measure_interleaved([&] { step(false); }, [&] { step(true); }, {.budget_s = 2.0});
    fmt::print("{:>6} {:>6} | {:>12.3f} {:>12.3f} {:>8.2f} | {:>10.1f} {:>10.1f}\n", rows, width, tf.median_s * 1e3,
               tr.median_s * 1e3, tr.median_s / tf.median_s, fast_mb, ref_mb);
  }
  return 0;
}
