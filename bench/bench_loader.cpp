// bench_loader: does prefetching hide data preparation? A training step (an MLP's forward,
// backward and Adam update on one thread) fed by a dataset whose examples take, together, about
// as long to prepare as the step takes to train. Without prefetch each step waits for its batch
// (about twice the step's time); with prefetch the batch is made on the other core meanwhile.
//
//   build/release/bench/bench_loader              # 3 rounds of 40 steps each way
//   build/release/bench/bench_loader --rounds 5 --steps 60 --ratio 1.0
//
// The two ways take turns, round by round, so a neighbour's burst of load slows both alike;
// the figures are medians over the rounds of the time per step. Needs 2 free cores to show the
// overlap: on a busy machine the preparing thread waits for a core too.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "harness.h"
#include "cppgrad.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace {

constexpr int64_t kBatch = 64, kInputs = 512, kHidden = 1024, kClasses = 10;

// Busy work standing for decoding or augmenting an example: `iterations` rounds of a small
// floating-point recurrence the compiler cannot drop.
double busy(int64_t iterations, double seed) {
  double x = seed;
  for (int64_t i = 0; i < iterations; ++i) x = std::fma(x, 1.0000001, 1e-7) - std::floor(x);
  return x;
}

// Examples whose preparation costs `iterations` of busy work each.
class SlowDataset : public data::Dataset {
 public:
  SlowDataset(int64_t size, int64_t iterations) : size_(size), iterations_(iterations) {}
  int64_t size() const override { return size_; }
  data::Example get(int64_t index) const override {
    const double v = busy(iterations_, static_cast<double>(index) * 1e-3);
    Generator gen(static_cast<uint64_t>(index));  // its own: never the training loop's generator
    Tensor x = randn({kInputs}, kFloat32, gen) + v * 1e-9;
    return {{"x", x}, {"y", tensor(std::vector<int64_t>{index % kClasses}, {})}};
  }

 private:
  int64_t size_, iterations_;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  int64_t steps = 40;
  double ratio = 1.0;  // preparation time of a batch / the step's time
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_loader: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--rounds") rounds = std::atoi(value());
    else if (arg == "--steps") steps = std::atoll(value());
    else if (arg == "--ratio") ratio = std::atof(value());
    else {
      std::fprintf(stderr, "bench_loader: unknown option %s (--rounds N, --steps N, --ratio R)\n", arg.c_str());
      return 2;
    }
  }
  if (rounds < 1 || steps < 1 || !(ratio >= 0)) {
    std::fprintf(stderr, "bench_loader: --rounds and --steps must be >= 1, --ratio >= 0\n");
    return 2;
  }
  set_num_threads(1);  // the step on one core, leaving the other to the loader's thread
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(kInputs, kHidden), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(kHidden, kClasses)});
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3));
  auto train_step = [&](const data::Batch& b) {
    Tensor loss = F::cross_entropy(model->forward(b["x"]), b["y"]);
    opt.zero_grad();
    loss.backward();
    opt.step();
  };

  // The step's time on a fixed batch, then the busy work's speed: enough iterations per example
  // that a batch takes `ratio` times the step.
  const data::Batch fixed = data::stack_collate([] {
    std::vector<data::Example> e;
    for (int64_t i = 0; i < kBatch; ++i) e.push_back(SlowDataset(kBatch, 0).get(i));
    return e;
  }());
  const double step_s = bench::measure([&] { train_step(fixed); }, {.budget_s = 1.0}).median_s;
  const int64_t probe = 1'000'000;
  volatile double sink = 0;  // keeps the probe's result, so the compiler cannot drop the call
  const double per_iteration = bench::measure([&] { sink = sink + busy(probe, 0.5); }, {.budget_s = 0.5}).median_s / probe;
  auto iterations = static_cast<int64_t>(ratio * step_s / kBatch / per_iteration);
  auto prepare_time = [&] {
    SlowDataset probe_set(1, iterations);
    return bench::measure([&] { probe_set.get(0); }, {.budget_s = 0.3}).median_s * kBatch;
  };
  // Once more, measured on whole examples (the tensors' making included).
  iterations = static_cast<int64_t>(static_cast<double>(iterations) * ratio * step_s / prepare_time());
  const double prepare_s = prepare_time();
  auto dataset = std::make_shared<SlowDataset>(kBatch * steps * 4, iterations);
  std::printf("step (MLP %ld-%ld-%ld, batch %ld, Adam, 1 thread): %.2f ms; preparing a batch: %.2f ms (%ld "
              "iterations per example)\n",
              static_cast<long>(kInputs), static_cast<long>(kHidden), static_cast<long>(kClasses),
              static_cast<long>(kBatch), step_s * 1e3, prepare_s * 1e3, static_cast<long>(iterations));
  std::fflush(stdout);

  auto run = [&](int64_t prefetch) {
    data::DataLoader loader(dataset, data::DataLoaderOptions(kBatch).shuffle(true).seed(1).prefetch(prefetch));
    train_step(loader.next());  // the first batch is never overlapped: not timed
    const double start = now_s();
    for (int64_t s = 0; s < steps; ++s) train_step(loader.next());
    return (now_s() - start) / static_cast<double>(steps);
  };
  std::vector<double> sync, ahead;
  for (int r = 0; r < rounds; ++r) {
    if (r % 2 == 0) {
      sync.push_back(run(0));
      ahead.push_back(run(2));
    } else {
      ahead.push_back(run(2));
      sync.push_back(run(0));
    }
  }
  const double s = bench::median(sync), a = bench::median(ahead);
  std::fflush(stdout);
  std::printf("time per step, median of %d rounds of %ld steps:\n", rounds, static_cast<long>(steps));
  std::printf("  without prefetch   %8.2f ms\n", s * 1e3);
  std::printf("  prefetch(2)        %8.2f ms   (%.2fx faster; the step alone: %.2f ms)\n", a * 1e3, s / a,
              step_s * 1e3);
  return 0;
}
