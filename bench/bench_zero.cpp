// bench_zero: examples/seq2seq's copy-task training step (global batch 32) with AdamW, its
// optimizer state unsharded and sharded (ZeroRedundancyOptimizer, ZeRO-1).
//
//   scripts/mpirun 2 build/release/bench/bench_zero --threads 1
//
// Three ways of training the same model, their steps interleaved (one step of each in turn, so
// that the machine's load falls on all three alike):
//   ddp+adamw        DDP all-reduces the gradients during backward; AdamW over every parameter
//   ddp+zero         DDP as above; each rank updates its 1/N of the parameters, then an all-gather
//   zero(rs)         no DDP: step() reduce-scatters the gradients, updates 1/N, all-gathers
// Printed: the bytes of optimizer state each rank holds (the largest of any rank), and the
// median of the slowest rank's step time and of its optimizer.step() alone.
#include <mpi.h>

#include <fmt/core.h>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "copy_task_row.h"
#include "cppgrad.h"
#include "distributed/distributed.h"
#include "harness.h"
#include "rank_args.h"

using namespace cppgrad;
namespace dist = cppgrad::distributed;
namespace F = cppgrad::nn::functional;

namespace {

// The largest of every rank's `value` (every rank calls it, in the same order).
double largest(double value) {
  if (dist::is_initialized()) MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return value;
}

struct Config {
  std::string name;
  std::shared_ptr<seq2seq::Seq2SeqModel> model;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<optim::Optimizer> opt;
  std::vector<double> step_s, optimizer_s;
};

Config make(const std::string& name, bool ddp, bool zero, bool reduce_scatter) {
  const bench::CopyTaskConfig c;
  manual_seed(0);
  seq2seq::ModelConfig m = bench::copy_task_model(c);
  m.dropout = 0;  // the three draw no masks, so that their weights can be compared at the end
  Config config{name, std::make_shared<seq2seq::Seq2SeqModel>(m), nullptr, nullptr, {}, {}};
  config.model->train();
  if (ddp) config.ddp = std::make_unique<dist::DistributedDataParallel>(config.model);
  const optim::AdamWOptions options = optim::AdamWOptions(1e-4).beta1(0.9).beta2(0.98).eps(1e-9).weight_decay(0.01);  // bench::adam_options()'s
  if (zero)
    config.opt = std::make_unique<dist::ZeroRedundancyOptimizer>(
        config.model->parameters(), dist::ZeroRedundancyOptimizer::of<optim::AdamW>(options),
        dist::ZeroRedundancyOptimizerOptions().reduce_scatter(reduce_scatter));
  else
    config.opt = std::make_unique<optim::AdamW>(config.model->parameters(), options);
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  dist::ProcessGroup world(argc, argv);
  const bench::RankArgs args = bench::parse_rank_args(argc, argv, 30);
  const int threads = args.threads, steps = args.steps;
  set_num_threads(threads);
  const bool lead = world.rank() == 0;
  const bench::CopyTaskConfig c;
  std::vector<Config> configs;
  configs.push_back(make("ddp+adamw", true, false, false));
  configs.push_back(make("ddp+zero", true, true, false));
  configs.push_back(make("zero(rs)", false, true, true));

  Generator data(1);
  std::vector<seq2seq::Batch> batches;
  for (int i = 0; i < 8; ++i) {
    seq2seq::Batch g = seq2seq::make_batch(seq2seq::Task::Copy, c.batch, c.length, c.vocab, data);
    const dist::Range r = dist::shard_range(c.batch, dist::rank(), dist::world_size());
    auto mine = [&](const Tensor& t) { return t.narrow(0, r.begin, r.end - r.begin); };
    batches.push_back({mine(g.src), mine(g.tgt_in), mine(g.tgt_out), mine(g.src_pad), mine(g.tgt_pad)});
  }
  const double tokens = static_cast<double>(c.batch * c.positions());
  for (int i = 0; i < steps + 3; ++i) {
    const seq2seq::Batch& b = batches[i % batches.size()];
    for (Config& config : configs) {
      dist::barrier();
      double optimizer = 0;
      const double s = bench::seconds([&] {
        Tensor logits = config.model->forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);
        Tensor loss = F::cross_entropy(logits.reshape({-1, c.vocab}), b.tgt_out.reshape({-1}),
                                       F::CrossEntropyOptions().ignore_index(seq2seq::PAD).reduction(F::Reduction::Sum));
        config.opt->zero_grad();
        (loss * (dist::world_size() / tokens)).backward();
        optimizer = bench::seconds([&] { config.opt->step(); });
      });
      if (i < 3) continue;  // warm-up
      config.step_s.push_back(largest(s));
      config.optimizer_s.push_back(largest(optimizer));
    }
  }
  // The three trained alike: their weights agree (float32 rounding of the averages aside).
  double apart = 0;
  for (size_t k = 1; k < configs.size(); ++k) {
    auto pa = configs[0].model->parameters(), pb = configs[k].model->parameters();
    for (size_t i = 0; i < pa.size(); ++i)
      apart = std::max(apart, (pa[i] - pb[i]).abs().max().to(kFloat64).item<double>());
  }
  apart = largest(apart);
  if (lead) {
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    fmt::print("copy-task step with AdamW (dropout 0), global batch {}: {} process(es) × {} thread(s), median of {} "
               "steps, interleaved; load average {:.2f}; OPENBLAS_CORETYPE {}\n{}\n", c.batch, world.world_size(),
               threads, steps, bench::load_average(), coretype ? coretype : "unset", bench::cpu_description());
    fmt::print("{} parameters; largest weight difference between the three after training: {:.2e}\n",
               configs[0].model->parameter_count(), apart);
    fmt::print("{:>10} {:>16} {:>10} {:>10} {:>14}\n", "", "state bytes/rank", "of ddp's", "step ms", "optimizer ms");
  }
  const double unsharded = largest(static_cast<double>(dist::ZeroRedundancyOptimizer::state_bytes(*configs[0].opt)));
  for (Config& config : configs) {
    const double bytes = largest(static_cast<double>(dist::ZeroRedundancyOptimizer::state_bytes(*config.opt)));
    if (lead)
      fmt::print("{:>10} {:>16.0f} {:>10.3f} {:>10.2f} {:>14.2f}\n", config.name, bytes, bytes / unsharded,
                 bench::median(config.step_s) * 1e3, bench::median(config.optimizer_s) * 1e3);
  }
  return 0;
}
