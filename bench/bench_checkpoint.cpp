// Activation checkpointing: peak memory and step time of a Transformer encoder's training step
// (forward + backward) against depth, with and without checkpointing each layer.
//
//   build/release/bench/bench_checkpoint [--budget S] [--threads N]
//
// Memory is the caching allocator's peak of bytes held by live tensors during one step, above
// what the model and its input hold: exact, and independent of the machine's load. Time is the
// median step, the two variants timed in turn (bench::measure_interleaved).
#include <fmt/core.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "cppgrad.h"
#include "harness.h"
#include "runtime/allocator.h"

using namespace cppgrad;

int main(int argc, char** argv) {
  double budget = 3.0;
  int threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--budget")) budget = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
  }
  if (threads > 0) set_num_threads(threads);
  const int64_t B = 4, T = 128, E = 128, H = 4, FF = 512;
  fmt::print("Transformer encoder, d_model {}, {} heads, feed-forward {}, batch {} x {} tokens, dropout 0.1, "
             "float32, {} threads\n",
             E, H, FF, B, T, get_num_threads());
  fmt::print("{:>6} {:>14} {:>14} {:>9} {:>12} {:>12} {:>9}\n", "layers", "peak MB plain", "peak MB ckpt", "ratio",
             "ms plain", "ms ckpt", "ratio");
  for (int64_t depth : {6, 12, 24}) {
    manual_seed(0);
    nn::TransformerEncoder encoder(nn::TransformerLayerOptions(E, H).dim_feedforward(FF).dropout(0.1), depth);
    Tensor x = randn({B, T, E});
    auto step = [&](bool checkpointed) {
      encoder.set_checkpoint_layers(checkpointed);
      encoder.zero_grad();
      encoder.forward(x).square().mean().backward();
    };
    auto peak = [&](bool checkpointed) {
      step(checkpointed);  // gradients allocated once, as in training
      reset_peak_allocated();
      const int64_t before = allocator_stats().in_use_bytes;
      step(checkpointed);
      return (allocator_stats().peak_bytes - before) / 1e6;
    };
    const double mem_plain = peak(false), mem_ckpt = peak(true);
    auto [plain, ckpt] = bench::measure_interleaved([&] { step(false); }, [&] { step(true); },
                                                     {.budget_s = budget, .warm_up = 1, .min_reps = 3});
    fmt::print("{:>6} {:>14.1f} {:>14.1f} {:>8.1f}x {:>12.1f} {:>12.1f} {:>8.2f}x\n", depth, mem_plain, mem_ckpt,
               mem_plain / mem_ckpt, plain.median_s * 1e3, ckpt.median_s * 1e3, ckpt.median_s / plain.median_s);
    std::fflush(stdout);
  }
  return 0;
}
