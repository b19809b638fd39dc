// Training steps at the sizes people train (issue 26, item 1): a GPT in cppgrad, against the same
// model in PyTorch (bench_gpt_torch.py, the twin: same shapes, same parameter count, printed).
//
//   gpt-M      6 pre-norm layers, d_model 384, 6 heads, feed-forward 1536, exact GELU, T 256,
//              batch 8, vocabulary 256, dropout 0.1, tied embeddings, AdamW
//   gpt2-124M  GPT-2 small's shapes: 12 layers, d_model 768, 12 heads, feed-forward 3072,
//              1024 positions, vocabulary 50,257, T 64, batch 4, no dropout, tied, AdamW
//
// Each block is nn::TransformerEncoderLayer with norm_first, GELU and a causal mask (PyTorch's
// nn.TransformerEncoderLayer in the twin); learned positions; a final LayerNorm; the logits are
// the hidden states times the token embedding's transpose.
//
//   build/release/bench/bench_gpt --model gpt-M --threads 1 [--steps 5] [--profile] [--dtype bf16]
//
// --flush-denormal runs it with set_flush_denormal(true) (runtime/float_mode.h): gpt2-124M's
// untrained logits (its N(0, 1) embedding tied to the output) give a softmax whose gradient is
// full of subnormal floats, which Intel CPUs multiply slowly.
//
// --dtype bf16 runs the step under autocast (tensor/autocast.h), on the kernel the row names:
// oneDNN's bfloat16 products on CPUs with AVX512_BF16 or AMX, else float32 products (nothing
// multiplies faster there); the rest in float32.
//
// One model per process, so that the peak memory printed (VmHWM) is that model's. Prints the
// median step (forward, cross-entropy, backward, AdamW; its median CPU time last), tokens per second, the share of the
// step in matrix products (profile::report()'s BLAS rows, from one profiled step after the
// timed ones) and the parameter count.
#include <fmt/core.h>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "cppgrad.h"
#include "harness.h"
#include "tensor/autocast_cache.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace {

struct GptShape {
  const char* name;
  int64_t layers, d_model, heads, ff, positions, vocab, T, batch;
  double dropout;
};
constexpr GptShape kShapes[] = {{"gpt-M", 6, 384, 6, 1536, 256, 256, 256, 8, 0.1},
                                {"gpt2-124M", 12, 768, 12, 3072, 1024, 50257, 64, 4, 0.0}};

class Gpt : public nn::Module {
 public:
  explicit Gpt(const GptShape& s) : shape(s) {
    tok = register_module("tok", std::make_shared<nn::Embedding>(s.vocab, s.d_model));
    pos = register_module("pos", std::make_shared<nn::Embedding>(s.positions, s.d_model));
    drop = register_module("drop", std::make_shared<nn::Dropout>(s.dropout));
    blocks = register_module("blocks", std::make_shared<nn::ModuleList<nn::TransformerEncoderLayer>>());
    for (int64_t i = 0; i < s.layers; ++i)
      blocks->push_back(std::make_shared<nn::TransformerEncoderLayer>(nn::TransformerLayerOptions(s.d_model, s.heads)
                                                                          .dim_feedforward(s.ff)
                                                                          .dropout(s.dropout)
                                                                          .activation(nn::Activation::GELU)
                                                                          .norm_first(true)));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(Shape{s.d_model}));
  }
  // tokens (B, T) -> logits (B, T, vocab)
  Tensor forward(const Tensor& tokens) {
    const int64_t T = tokens.shape()[1];
    Tensor h = drop->forward(tok->forward(tokens) + pos->forward(arange(T)));  // (B, T, d)
    for (const auto& block : *blocks) h = block->forward(h, {}, {}, true);  // causal
    return matmul(norm->forward(h), tok->weight.t());  // tied: (B, T, d) @ (d, vocab)
  }
  const GptShape shape;
  std::shared_ptr<nn::Embedding> tok, pos;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleList<nn::TransformerEncoderLayer>> blocks;
  std::shared_ptr<nn::LayerNorm> norm;
};

}  // namespace

int main(int argc, char** argv) {
  std::string model = "gpt-M";
  int threads = 1, steps = 5;
  bool show_profile = false, flush = false;
  std::string dtype = "fp32";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--model" && i + 1 < argc) model = argv[++i];
    else if (arg == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (arg == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (arg == "--profile") show_profile = true;
    else if (arg == "--dtype" && i + 1 < argc) dtype = argv[++i];
    else if (arg == "--flush-denormal") flush = true;
    else {
      fmt::print("usage: {} [--model gpt-M|gpt2-124M] [--threads N] [--steps N] [--profile] [--dtype fp32|bf16] [--flush-denormal]\n",
                 argv[0]);
      return arg == "--help" ? 0 : 2;
    }
  }
  const GptShape* shape = nullptr;
  for (const GptShape& s : kShapes)
    if (model == s.name) shape = &s;
  if (shape == nullptr || threads < 1 || steps < 1 || (dtype != "fp32" && dtype != "bf16")) {
    fmt::print(stderr, "bench_gpt: unknown model '{}' (gpt-M, gpt2-124M), dtype '{}' (fp32, bf16) or bad counts\n", model,
               dtype);
    return 2;
  }
  set_num_threads(threads);
  set_flush_denormal(flush);
  manual_seed(0);
  Gpt gpt(*shape);
  gpt.train();
  optim::AdamW opt(gpt.parameters(), optim::AdamWOptions(3e-4).weight_decay(0.1));
  Generator data(1);
  auto step = [&] {
    Tensor tokens = randint(0, shape->vocab, {shape->batch, shape->T + 1}, data);
    Tensor loss;
    {
      autocast::Guard products(kBFloat16, dtype == "bf16");
      Tensor logits = gpt.forward(tokens.narrow(1, 0, shape->T));
      loss = F::cross_entropy(logits.reshape({-1, shape->vocab}), tokens.narrow(1, 1, shape->T).reshape({-1}));
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  // The process's CPU time per step too: beside other processes' builds a step's wall time
  // grows with the load, its CPU time much less (at 1 thread the process is this thread).
  std::vector<double> cpu_ms;
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  };
  auto timed_step = [&] {
    const double start = cpu_now();
    step();
    cpu_ms.push_back(cpu_now() - start);
  };
  const bench::Timing t = bench::measure(timed_step, {.budget_s = 0, .warm_up = 1, .min_reps = steps, .max_reps = steps});
  std::vector<double> timed(cpu_ms.begin() + 1, cpu_ms.end());  // the warm-up step left out
  std::sort(timed.begin(), timed.end());
  const double cpu_median_ms = timed.empty() ? NAN : timed[(timed.size() - 1) / 2];
  profile::set_enabled(true);
  profile::reset();
  autocast::reset_cast_stats();
  step();
  const autocast::CastStats cast = autocast::cast_stats();
  double gemm = 0;
  for (const profile::Entry& e : profile::entries())
    if (e.name.rfind("blas gemm", 0) == 0 || e.name.rfind("bf16 gemm", 0) == 0) gemm += e.seconds;
  const double share = gemm / profile::seconds_since_reset();
  const std::string report = profile::report();
  profile::set_enabled(false);
  double load = 0;
  getloadavg(&load, 1);
  const std::string kind =
      dtype == "bf16" ? fmt::format("cppgrad bf16 autocast ({})", autocast::kernel_name(autocast::kernel())) : "cppgrad fp32";
  fmt::print("{}\t{}\t{} threads\t{}\t{:.1f} ms\t{:.0f} tokens/s\t{:.0f}% in matrix products\t{:.0f} MB peak\t"
             "{} parameters\tload {:.2f}\t{}{}\tCPU {:.1f} ms a step\n",
             shape->name, kind, threads, openblas_get_corename(), t.median_s * 1e3,
             static_cast<double>(shape->batch * shape->T) / t.median_s, share * 100, bench::memory_mb("VmHWM"),
             gpt.parameter_count(), load, deterministic_threads() ? "deterministic" : "BLAS threads",
             flush ? "\tsubnormals flushed" : "", cpu_median_ms);
  if (show_profile) {
    fmt::print("{}", report);
    if (dtype == "bf16")  // the cast cache (tensor/autocast_cache.h), in the profiled step
      fmt::print("autocast: {} products, {} operands rounded ({:.1f} MB), {} taken from the cast cache\n",
                 cast.products, cast.rounded, cast.bytes_rounded / 1e6, cast.hits);
  }
}
