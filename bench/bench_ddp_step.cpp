// bench_ddp_step: examples/seq2seq's copy-task training step (global batch 32), data-parallel.
//
//   build/release/bench/bench_ddp_step --threads 2                    # 1 process × 2 threads
//   scripts/mpirun 2 build/release/bench/bench_ddp_step --threads 1   # 2 processes × 1 thread
//
// Each rank trains on its share of every global batch, as the example does. Printed, per bucket
// size (in a world of N > 1): the median step time (forward, loss, backward with the gradients'
// all-reduce, Adam) of the slowest rank, tokens per second of the global batch, the median time
// backward spent at its end waiting for the all-reduces (each step, the longest wait of any
// rank), and its share of the step; then the blocking all-reduce of all the gradients at once,
// alone. One bucket holding everything starts only when backward is over and hides nothing;
// smaller buckets start while backward goes on.
#include <mpi.h>

#include <fmt/core.h>
#include <string>
#include <vector>

#include "copy_task_row.h"
#include "cppgrad.h"
#include "distributed/distributed.h"
#include "harness.h"

using namespace cppgrad;
namespace dist = cppgrad::distributed;
namespace F = cppgrad::nn::functional;

namespace {

// The largest of every rank's `seconds` (every rank calls it, in the same order).
double slowest(double seconds) {
  if (dist::is_initialized()) MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

struct Result {
  double step_s, wait_s;
};

Result run(double bucket_mb, int steps) {
  const bench::CopyTaskConfig c;
  manual_seed(0);
  auto model = std::make_shared<seq2seq::Seq2SeqModel>(bench::copy_task_model(c));
  model->train();
  dist::DistributedDataParallel ddp(model, dist::DistributedDataParallelOptions().bucket_cap_mb(bucket_mb));
  optim::Adam adam(model->parameters(), bench::adam_options());
  Generator data(1);
  std::vector<seq2seq::Batch> batches;
  for (int i = 0; i < 8; ++i) {
    seq2seq::Batch g = seq2seq::make_batch(seq2seq::Task::Copy, c.batch, c.length, c.vocab, data);
    const dist::Range r = dist::shard_range(c.batch, dist::rank(), dist::world_size());
    auto mine = [&](const Tensor& t) { return t.narrow(0, r.begin, r.end - r.begin); };
    batches.push_back({mine(g.src), mine(g.tgt_in), mine(g.tgt_out), mine(g.src_pad), mine(g.tgt_pad)});
  }
  const double tokens = static_cast<double>(c.batch * c.positions());  // (padding counted alike in all runs)
  std::vector<double> step_times, waits;
  for (int i = 0; i < steps + 5; ++i) {
    const seq2seq::Batch& b = batches[i % batches.size()];
    dist::barrier();
    const double s = bench::seconds([&] {
      Tensor logits = model->forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);
      Tensor loss = F::cross_entropy(logits.reshape({-1, c.vocab}), b.tgt_out.reshape({-1}),
                                     F::CrossEntropyOptions().ignore_index(seq2seq::PAD).reduction(F::Reduction::Sum));
      adam.zero_grad();
      (loss * (dist::world_size() / tokens)).backward();
      adam.step();
    });
    if (i < 5) continue;  // warm-up
    step_times.push_back(slowest(s));
    waits.push_back(slowest(ddp.last_wait_seconds()));  // rank 0's alone may be the shortest
  }
  if (dist::rank() == 0 && bucket_mb == 1.0) {
    fmt::print("{} parameters in {} buckets of <= {} MB:", model->parameter_count(), ddp.bucket_count(), bucket_mb);
    for (const auto& bucket : ddp.bucket_parameter_names()) fmt::print(" {}", bucket.size());
    fmt::print(" tensors\n");
  }
  return {bench::median(step_times), bench::median(waits)};
}

}  // namespace

int main(int argc, char** argv) {
  dist::ProcessGroup world(argc, argv);
  int threads = 1, steps = 40;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") threads = std::stoi(argv[i + 1]);
    else if (flag == "--steps") steps = std::stoi(argv[i + 1]);
  }
  set_num_threads(threads);
  const bool lead = world.rank() == 0;
  const bench::CopyTaskConfig c;
  const double tokens = static_cast<double>(c.batch * c.positions());
  if (lead)
    fmt::print("copy-task step, global batch {} ({} tokens): {} process(es) × {} thread(s), median of {} steps\n",
               c.batch, c.batch * c.positions(), world.world_size(), threads, steps);
  const std::vector<double> buckets = world.world_size() > 1 ? std::vector<double>{1000.0, 4.0, 1.0, 0.25}
                                                             : std::vector<double>{25.0};
  if (lead) fmt::print("{:>10} {:>10} {:>10} {:>10} {:>8}\n", "bucket MB", "step ms", "tokens/s", "wait ms", "wait %");
  for (double mb : buckets) {
    Result r = run(mb, steps);
    if (lead)
      fmt::print("{:>10} {:>10.2f} {:>10.0f} {:>10.2f} {:>8.1f}\n", mb, r.step_s * 1e3, tokens / r.step_s,
                 r.wait_s * 1e3, 100 * r.wait_s / r.step_s);
  }
  if (world.world_size() > 1) {
    // The same bytes as the model's gradients, all-reduced at once, blocking: what overlap can hide.
    manual_seed(0);
    seq2seq::ModelConfig m;
    m.vocab = c.vocab;
    m.max_len = c.positions();
    const int64_t count = seq2seq::Seq2SeqModel(m).parameter_count();
    Tensor grads = ones({count});
    std::vector<double> times;
    for (int i = 0; i < 25; ++i) {
      dist::barrier();
      const double s = bench::seconds([&] { dist::all_reduce(grads, dist::ReduceOp::Average); });
      if (i >= 5) times.push_back(slowest(s));
    }
    if (lead)
      fmt::print("all-reduce of all {} gradients ({:.1f} MB) alone: {:.2f} ms\n", count, count * 4 / 1048576.0,
                 bench::median(times) * 1e3);
  }
  return 0;
}
