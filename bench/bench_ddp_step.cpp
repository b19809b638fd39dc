// bench_ddp_step: examples/seq2seq's copy-task training step (global batch 32), data-parallel,
// against the same step without communication and with one all-reduce after backward.
//
//   build/release/bench/bench_ddp_step --threads 2                    # 1 process × 2 threads
//   scripts/mpirun 2 build/release/bench/bench_ddp_step --threads 1   # 2 processes × 1 thread
//
// Each rank trains on its share of every global batch, as the example does. In a world of N > 1
// it times, side by side (the runs take turns, a few steps each, so that a change of load
// falls on all of them alike):
//   compute only         forward, loss, backward, Adam on the rank's share; no communication
//                        (the ranks' weights drift apart, which changes nothing in the time);
//   + all-reduce after   the same, then every gradient copied into one buffer, all-reduced
//                        (blocking), copied back: communication that overlaps nothing;
//   DDP, bucket B MB     DistributedDataParallel with bucket_cap_mb B: buckets all-reduced
//                        during backward, as soon as each is full (and its layout rebuilt in
//                        the order gradients became ready, after the first step).
// Printed per run: the median step time of the slowest rank (and the fastest such step, which
// a busy machine disturbs least), what the median adds to compute only, the
// share of the all-reduce's cost (the second run's addition) that DDP hid, and the median wait
// at the end of backward for the all-reduces (each step the longest wait of any rank); for DDP,
// its buckets, how many started before backward's last gradient, and how many had completed
// before backward's end (the fewest of any rank). Then the blocking all-reduce of all the
// gradients at once, alone.
//
// --link-gbit G [--half-duplex] (on an emulated link: scripts/netns --rate, --probe for the
// endpoints' bandwidth): the cost model's step beside the measured one (docs/scaling.md). The
// all-reduce of the gradients takes T (bench/cost_model.h, with alpha measured here); one
// all-reduce after backward makes a step of compute only + T; with DDP's buckets the step lies
// between compute only + max(0, T - backward) (all of backward hides communication) and
// compute only + T (none does).
#include <mpi.h>

#include <cblas.h>
#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "copy_task_row.h"
#include "cppgrad.h"
#include "distributed/distributed.h"
#include "cost_model.h"
#include "harness.h"
#include "measured_link.h"
#include "rank_args.h"

using namespace cppgrad;
namespace dist = cppgrad::distributed;
namespace F = cppgrad::nn::functional;

namespace {

// Every rank's `value` reduced with `op` (every rank calls it, in the same order).
double across_ranks(double value, MPI_Op op) {
  if (dist::is_initialized()) MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
  return value;
}
double slowest(double seconds) { return across_ranks(seconds, MPI_MAX); }

enum class Kind { kComputeOnly, kAllReduceAfter, kDdp };

// One way of running the step, with its own model, optimizer and figures.
class Run {
 public:
  Run(Kind kind, double bucket_mb) : kind_(kind), bucket_mb_(bucket_mb) {
    manual_seed(0);
    model_ = std::make_shared<seq2seq::Seq2SeqModel>(bench::copy_task_model(config_));
    model_->train();
    if (kind_ == Kind::kDdp)
      ddp_ = std::make_unique<dist::DistributedDataParallel>(
          model_, dist::DistributedDataParallelOptions().bucket_cap_mb(bucket_mb_));
    adam_ = std::make_unique<optim::Adam>(model_->parameters(), bench::adam_options());
    int64_t count = 0;
    for (const Tensor& p : model_->parameters()) count += p.numel();
    flat_ = zeros({count});
    Generator data(1);
    for (int i = 0; i < 8; ++i) {
      seq2seq::Batch g = seq2seq::make_batch(seq2seq::Task::Copy, config_.batch, config_.length, config_.vocab, data);
      const dist::Range r = dist::shard_range(config_.batch, dist::rank(), dist::world_size());
      auto mine = [&](const Tensor& t) { return t.narrow(0, r.begin, r.end - r.begin); };
      batches_.push_back({mine(g.src), mine(g.tgt_in), mine(g.tgt_out), mine(g.src_pad), mine(g.tgt_pad)});
    }
  }

  std::string name() const {
    if (kind_ == Kind::kComputeOnly) return "compute only";
    if (kind_ == Kind::kAllReduceAfter) return "+ all-reduce after";
    return fmt::format("DDP, bucket {} MB", bucket_mb_);
  }
  const dist::DistributedDataParallel* ddp() const { return ddp_.get(); }
  int64_t parameter_count() const { return flat_.numel(); }

  // One step; `record` keeps its figures.
  void step(bool record) {
    const seq2seq::Batch& b = batches_[next_++ % batches_.size()];
    const double tokens = static_cast<double>(config_.batch * config_.positions());
    double wait = 0, backward = 0;
    dist::barrier();
    const double s = bench::seconds([&] {
      Tensor logits = model_->forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);
      Tensor loss = F::cross_entropy(logits.reshape({-1, config_.vocab}), b.tgt_out.reshape({-1}),
                                     F::CrossEntropyOptions().ignore_index(seq2seq::PAD).reduction(F::Reduction::Sum));
      adam_->zero_grad();
      backward = bench::seconds([&] { (loss * (dist::world_size() / tokens)).backward(); });
      if (kind_ == Kind::kAllReduceAfter) wait = bench::seconds([&] { all_reduce_gradients(); });
      adam_->step();
    });
    if (ddp_) wait = ddp_->last_wait_seconds();
    // Every rank takes part in these, recording or not, so that their collectives meet.
    const double step_s = slowest(s), wait_s = slowest(wait), backward_s = slowest(backward);
    const double overlapped = across_ranks(ddp_ ? ddp_->last_overlapped_buckets() : 0, MPI_MIN);
    const double completed = across_ranks(ddp_ ? ddp_->last_completed_buckets() : 0, MPI_MIN);
    if (!record) return;
    step_s_.push_back(step_s);
    wait_s_.push_back(wait_s);
    backward_s_.push_back(backward_s);
    overlapped_.push_back(overlapped);
    completed_.push_back(completed);
  }

  double step_ms() const { return bench::median(step_s_) * 1e3; }
  double best_step_ms() const { return *std::min_element(step_s_.begin(), step_s_.end()) * 1e3; }
  double wait_ms() const { return bench::median(wait_s_) * 1e3; }
  double backward_ms() const { return bench::median(backward_s_) * 1e3; }
  double overlapped() const { return bench::median(overlapped_); }
  double completed() const { return bench::median(completed_); }

 private:
  // What DDP with one bucket does, by hand, after backward: one buffer, one blocking all-reduce.
  void all_reduce_gradients() {
    NoGradGuard no_grad;
    int64_t at = 0;
    for (const Tensor& p : model_->parameters()) {
      flat_.narrow(0, at, p.numel()).copy_(p.grad().reshape({-1}));
      at += p.numel();
    }
    dist::all_reduce(flat_, dist::ReduceOp::Average);
    at = 0;
    for (const Tensor& p : model_->parameters()) {
      p.grad().copy_(flat_.narrow(0, at, p.numel()).view(p.shape()));
      at += p.numel();
    }
  }

  const bench::CopyTaskConfig config_;
  Kind kind_;
  double bucket_mb_;
  std::shared_ptr<seq2seq::Seq2SeqModel> model_;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
  std::unique_ptr<optim::Adam> adam_;
  Tensor flat_;
  std::vector<seq2seq::Batch> batches_;
  size_t next_ = 0;
  std::vector<double> step_s_, wait_s_, backward_s_, overlapped_, completed_;
};

}  // namespace

// The cost model's step times beside the measured ones (see the top of the file).
void print_model(const std::vector<std::unique_ptr<Run>>& runs, double model_ms, double alone_ms, double link_gbit,
                 bool half_duplex, double alpha, double host_gbit) {
  const double compute = runs[0]->step_ms();
  const double backward = runs[0]->backward_ms();
  fmt::print("model: {} Gbit/s {}, alpha {:.1f} us (measured), endpoints {}: the all-reduce {:.2f} ms "
             "(measured alone: {:.2f} ms, {:.2f} of it); compute only's backward {:.2f} ms\n",
             link_gbit, half_duplex ? "half duplex" : "full duplex", alpha * 1e6,
             host_gbit > 0 ? fmt::format("{:.2f} Gbit/s each way (scripts/netns --probe)", host_gbit) : "unlimited",
             model_ms, alone_ms, alone_ms / model_ms, backward);
  fmt::print("{:<22} {:>12} {:>12} {:>14}   (DDP: from all of backward hiding the all-reduce to none of it)\n", "run",
             "step ms", "model ms", "step / model");
  for (size_t r = 1; r < runs.size(); ++r) {
    const double step = runs[r]->step_ms();
    if (!runs[r]->ddp()) {
      fmt::print("{:<22} {:>12.2f} {:>12.2f} {:>14.2f}\n", runs[r]->name(), step, compute + model_ms,
                 step / (compute + model_ms));
    } else {  // between all of backward hiding communication and none of it
      const double best = compute + std::max(0.0, model_ms - backward), worst = compute + model_ms;
      fmt::print("{:<22} {:>12.2f} {:>5.2f}-{:<6.2f} {:>6.2f}-{:<7.2f}\n", runs[r]->name(), step, best, worst,
                 step / worst, step / best);
    }
  }
}

int main(int argc, char** argv) {
  dist::ProcessGroup world(argc, argv);
  // The model's options, taken out before the common --threads / --steps.
  double link_gbit = 0;
  bool half_duplex = false;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--half-duplex") {
      half_duplex = true;
    } else if (arg == "--link-gbit") {
      link_gbit = i + 1 < argc ? std::atof(argv[++i]) : 0;
      if (!(link_gbit > 0)) {  // every rank refuses alike, so none waits in a collective
        fmt::print(stderr, "{}: --link-gbit expects a positive rate in Gbit/s\n", argv[0]);
        return 2;
      }
    } else {
      rest.push_back(argv[i]);
    }
  }
  const bench::RankArgs args = bench::parse_rank_args(static_cast<int>(rest.size()), rest.data(), 40);
  const int threads = args.threads, steps = args.steps;
  set_num_threads(threads);
  const bool lead = world.rank() == 0;
  const bench::CopyTaskConfig c;
  const double tokens = static_cast<double>(c.batch * c.positions());
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  if (lead) {
    fmt::print("{}; OpenBLAS kernel {} (OPENBLAS_CORETYPE {})\n", bench::cpu_description(), openblas_get_corename(),
               coretype ? coretype : "unset");
    fmt::print("copy-task step, global batch {} ({} tokens): {} process(es) × {} thread(s), median of {} steps; "
               "load average {:.2f} at the start\n",
               c.batch, c.batch * c.positions(), world.world_size(), threads, steps, bench::load_average());
  }

  std::vector<std::unique_ptr<Run>> runs;
  runs.push_back(std::make_unique<Run>(Kind::kComputeOnly, 0));
  if (world.world_size() > 1) {
    runs.push_back(std::make_unique<Run>(Kind::kAllReduceAfter, 0));
    for (double mb : {1000.0, 4.0, 1.0, 0.25}) runs.push_back(std::make_unique<Run>(Kind::kDdp, mb));
  }
  // Warm-up (DDP rebuilds its buckets after its first step), then turns of 5 steps each.
  for (auto& run : runs)
    for (int i = 0; i < 3; ++i) run->step(false);
  constexpr int kTurn = 5;
  for (int done = 0; done < steps; done += kTurn)
    for (auto& run : runs)
      for (int i = 0; i < kTurn; ++i) run->step(true);

  if (lead) {
    const double compute = runs[0]->step_ms();
    const double unhidden = runs.size() > 1 ? runs[1]->step_ms() - compute : 0;  // what the all-reduce adds
    fmt::print("{:<22} {:>8} {:>8} {:>8} {:>10} {:>8} {:>9} {:>8} {:>10} {:>10}\n", "run", "step ms", "best ms",
               "tokens/s", "+ compute", "hidden", "wait ms", "buckets", "started in", "done in");
    fmt::print("{:<22} {:>8} {:>8} {:>8} {:>10} {:>8} {:>9} {:>8} {:>10} {:>10}\n", "", "", "", "", "only, ms", "", "",
               "", "backward", "backward");
    for (const auto& run : runs) {
      const double added = run->step_ms() - compute;
      const bool ddp = run->ddp() != nullptr;
      fmt::print("{:<22} {:>8.2f} {:>8.2f} {:>8.0f} {:>10.2f} {:>8} {:>9.2f} {:>8} {:>10} {:>10}\n", run->name(),
                 run->step_ms(), run->best_step_ms(), tokens / run->step_ms() * 1e3, added,
                 ddp && unhidden > 0 ? fmt::format("{:.0f}%", 100 * (1 - added / unhidden)) : "",
                 run->wait_ms(), ddp ? std::to_string(run->ddp()->bucket_count()) : "",
                 ddp ? fmt::format("{:.0f}", run->overlapped()) : "", ddp ? fmt::format("{:.0f}", run->completed()) : "");
    }
    for (const auto& run : runs)
      if (run->ddp() && run->ddp()->bucket_count() > 1) {
        fmt::print("{}: tensors per bucket, in the order they start:", run->name());
        for (const auto& bucket : run->ddp()->bucket_parameter_names()) fmt::print(" {}", bucket.size());
        fmt::print("\n");
      }
  }
  if (world.world_size() > 1) {
    // The same bytes as the model's gradients, all-reduced at once, blocking: what overlap can hide.
    Tensor grads = ones({runs[0]->parameter_count()});
    std::vector<double> times;
    for (int i = 0; i < 25; ++i) {
      dist::barrier();
      const double s = bench::seconds([&] { dist::all_reduce(grads, dist::ReduceOp::Average); });
      if (i >= 5) times.push_back(slowest(s));
    }
    if (lead)
      fmt::print("all-reduce of all {} gradients ({:.1f} MB) alone: {:.2f} ms\n", grads.numel(),
                 grads.numel() * 4 / 1048576.0, bench::median(times) * 1e3);
    if (link_gbit > 0) {
      const double alpha = bench::measure_alpha();
      const double host_gbit = bench::probed_host_gbit();
      const bench::Link link{link_gbit * 1e9 / 8, alpha, half_duplex, host_gbit * 1e9 / 8};
      const double bytes = static_cast<double>(grads.numel()) * 4;
      const double model_ms = bench::all_reduce_seconds(bytes, world.world_size(), link) * 1e3;
      if (lead) print_model(runs, model_ms, bench::median(times) * 1e3, link_gbit, half_duplex, alpha, host_gbit);
    }
  }
  if (lead) fmt::print("load average {:.2f} at the end\n", bench::load_average());
  return 0;
}
