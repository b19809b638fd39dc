// bench_allreduce: cppgrad's all_reduce against every algorithm of Open MPI's MPI_Allreduce,
// between the ranks of this machine (or of an emulated network: scripts/netns).
//
//   scripts/mpirun 2 build/release/bench/bench_allreduce              # quiet
//   scripts/mpirun 2 build/release/bench/bench_allreduce --busy 2     # 2 spinning threads per rank
//   scripts/netns --rate 1gbit --delay 100 2 build/release/bench/bench_allreduce --link-gbit 1 --half-duplex
//   build/release/bench/bench_allreduce --project 29.3                # the projections to 8, 64 machines
//   scripts/mpirun 2 build/release/bench/bench_allreduce --segments --min-mb 1 --max-mb 64
//
// --link-gbit G adds the cost model's prediction (bench/cost_model.h) for a link of G Gbit/s
// whose latency alpha is measured here first (half the median round trip of a 4-byte message
// between ranks 0 and 1), and measured / predicted for cppgrad's all_reduce. --half-duplex: the
// link is one queue for both directions (scripts/netns --hosts 1 shapes the loopback so).
// --host-gbit H: the endpoints' own bandwidth each way (default: $NETNS_HOST_GBIT, which
// scripts/netns --probe sets from `--exchange-only` run on the loopback before it is shaped);
// the model then takes, each round, the slower of link and endpoints, and prints the link-only
// prediction beside it. Every run prints this path's exchange rate (8 MB each way at once
// between ranks 0 and 1, MPI_Sendrecv); --exchange-only prints that alone.
// --segments: columns of the ring's segment size (tuning::set_ring_pipeline, an internal choice:
// distributed/internal/collectives_tuning.h) instead of the ways of waiting, `--in-flight K`
// segments on the way; --min-mb / --max-mb bound the sizes.
// --project T_C prints, without MPI, the model's all-reduce time and the efficiency
// t_c / (t_c + T) of a step of T_C ms for the copy-step model's gradients (930,320 float32)
// and a 100M-parameter model's, on 2, 8 and 64 machines, beside the binomial tree's time.
//
// For each size from 4 KB to 16 MB (default; float32, sum), side by side in one run: cppgrad's
// all_reduce with each way of waiting (adaptive, the default; spin; polite: poll then sleep)
// and MPI_Allreduce with Open MPI's own choice and with each of its algorithms forced (the
// `tuned` component's 1 basic linear, 2 non-overlapping (reduce + broadcast), 3 recursive
// doubling, 4 ring, 5 segmented ring, 6 Rabenseifner; forced through MPI_T on a duplicate of
// MPI_COMM_WORLD each). A figure is the time of one call as the slowest rank sees it: a barrier,
// `reps` back-to-back calls, their mean; the median over the rounds, every variant measured once
// per round in turn so that a change of load touches them all alike (in an order shuffled each
// round, so that no variant always follows the same one: the first calls after another
// algorithm's find colder caches). Last columns: the best
// MPI_Allreduce (the algorithm with the least median), cppgrad's adaptive all_reduce over it
// (the ratio of the medians), and `paired`: the median over the rounds of each round's ratio of
// the two, which a slow moment of the machine moves less (both were measured within it; the
// ratio of medians compares moments apart, and the least of seven medians leans low).
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fmt/core.h>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cppgrad.h"
#include "distributed/distributed.h"
#include "distributed/internal/collectives_tuning.h"
#include "cost_model.h"
#include "harness.h"
#include "measured_link.h"

using namespace cppgrad;
namespace dist = cppgrad::distributed;
namespace tuning = cppgrad::distributed::tuning;  // the collectives' internal choices, compared here

namespace {

// The mean time of `reps` calls after a barrier, the slowest rank's.
double time_calls(const std::function<void()>& call, int reps) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double s = bench::seconds([&] {
    for (int i = 0; i < reps; ++i) call();
  });
  double slowest = s / reps;
  MPI_Allreduce(MPI_IN_PLACE, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

// A duplicate of MPI_COMM_WORLD whose MPI_Allreduce runs the tuned component's `algorithm`
// (0: Open MPI's own choice). The component reads the forced algorithm when a communicator
// is created, so it is written through MPI_T first; that needs the dynamic rules, turned on in
// main before MPI starts.
MPI_Comm communicator_with_algorithm(int algorithm) {
  int index = -1;
  if (MPI_T_cvar_get_index("coll_tuned_allreduce_algorithm", &index) != MPI_SUCCESS)
    throw std::runtime_error("bench_allreduce: this MPI has no coll_tuned_allreduce_algorithm (not Open MPI?)");
  MPI_T_cvar_handle handle;
  int count = 0;
  MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count);
  MPI_T_cvar_write(handle, &algorithm);
  MPI_T_cvar_handle_free(&handle);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return comm;
}

// Tasks running or ready to run this instant (/proc/loadavg's fourth field), this process's included.
long runnable_now() {
  long runnable = -1, tasks = 0;
  double a, b, c;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf %ld/%ld", &a, &b, &c, &runnable, &tasks) != 5) runnable = -1;
    std::fclose(f);
  }
  return runnable;
}

// What ranks 0 and 1 move each way while both send and receive at once (bytes/s): MPI_Sendrecv
// of `bytes` each way, the median of 15 after 2 warm-ups, the slower rank's time. On an
// unshaped path it is the endpoints' own bandwidth H of the cost model.
double measure_exchange(int64_t bytes) {
  if (dist::world_size() < 2) return 0;
  std::vector<char> out(static_cast<size_t>(bytes), 1), in(static_cast<size_t>(bytes));
  const int other = dist::rank() == 0 ? 1 : 0;
  std::vector<double> times;
  for (int i = 0; i < 17; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double s = 0;
    if (dist::rank() < 2)
      s = bench::seconds([&] {
        MPI_Sendrecv(out.data(), static_cast<int>(bytes), MPI_BYTE, other, 9, in.data(), static_cast<int>(bytes),
                     MPI_BYTE, other, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      });
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i >= 2) times.push_back(s);
  }
  return static_cast<double>(bytes) / bench::median(times);
}


// The cost model on paper: all-reduce time and efficiency on 2, 8 and 64 machines, for the
// copy-step model's gradients with `compute_ms` of compute a step, and for a 100M-parameter
// model's with the compute times of docs/scaling.md (6 * parameters * 4096 tokens FLOPs at
// 100 GFLOP/s, 1 TFLOP/s and 100 TFLOP/s: 25 s, 2.5 s, 25 ms).
void print_projection(double compute_ms) {
  struct Model {
    const char* name;
    double bytes;
    std::vector<double> compute_ms;
  };
  struct Wire {
    const char* name;
    bench::Link link;
  };
  const Model models[] = {{"copy-step model, 930,320 float32", 930320.0 * 4, {compute_ms}},
                          {"100M parameters, float32", 400e6, {25000, 2500, 25}}};
  const Wire wires[] = {{"1 Gb/s, alpha 50 us", {1e9 / 8, 50e-6}},
                        {"10 Gb/s, alpha 10 us", {10e9 / 8, 10e-6}},
                        {"100 Gb/s, alpha 2 us", {100e9 / 8, 2e-6}}};
  fmt::print("cost model (bench/cost_model.h): one all-reduce of all the gradients (one bucket); efficiency "
             "t_c / (t_c + T), no overlap\n");
  for (const Model& model : models) {
    fmt::print("{} ({:.1f} MB)\n{:>22} {:>8} {:>18} {:>11} {:>11} {:>11} {:>11} {:>9}", model.name, model.bytes / 1e6,
               "link", "machines", "algorithm", "bandwidth", "latency", "T", "tree T", "tree / T");
    for (double t_c : model.compute_ms) fmt::print(" {:>16}", fmt::format("eff. t_c={:g} ms", t_c));
    fmt::print("\n");
    for (const Wire& wire : wires)
      for (int n : {2, 8, 64}) {
        const double t = bench::all_reduce_seconds(model.bytes, n, wire.link);
        bench::Link no_latency = wire.link;
        no_latency.alpha = 0;
        const double bandwidth = bench::all_reduce_seconds(model.bytes, n, no_latency);
        const double tree = bench::tree_seconds(model.bytes, n, wire.link);
        fmt::print("{:>22} {:>8} {:>18} {:>8.2f} ms {:>8.2f} ms {:>8.2f} ms {:>8.2f} ms {:>8.1f}x", wire.name, n,
                   bench::algorithm_name(tuning::all_reduce_algorithm(static_cast<int64_t>(model.bytes), n)),
                   bandwidth * 1e3, (t - bandwidth) * 1e3, t * 1e3, tree * 1e3, tree / t);
        for (double t_c : model.compute_ms) fmt::print(" {:>15.0f}%", 100 * t_c / (t_c + t * 1e3));
        fmt::print("\n");
      }
  }
}

std::string size_str(double bytes) {
  if (bytes >= 1 << 20) return fmt::format("{:.0f} MB", bytes / (1 << 20));
  return fmt::format("{:.0f} KB", bytes / 1024);
}

std::string us(double seconds) {
  return seconds >= 1e-3 ? fmt::format("{:.2f} ms", seconds * 1e3) : fmt::format("{:.1f} us", seconds * 1e6);
}

constexpr int64_t kExchangeBytes = 8 << 20;  // what one rank sends in a round of a 16 MB ring

// One column of the table: a name and one call.
struct Variant {
  std::string name;
  std::function<void()> call;
  bool mpi;  // an MPI_Allreduce (a candidate for "best MPI")
};

std::string segment_name(int64_t bytes) {
  if (bytes <= 0) return "whole";
  return bytes >= 1 << 20 ? fmt::format("{}M", bytes >> 20) : fmt::format("{}K", bytes >> 10);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--project") {
      print_projection(std::atof(argv[i + 1]));
      return 0;
    }
  setenv("OMPI_MCA_coll_tuned_use_dynamic_rules", "1", 0);  // lets MPI_T force an algorithm
  dist::ProcessGroup world(argc, argv);
  int busy_threads = 0, rounds = 5;
  double link_gbit = 0, host_gbit = -1;
  std::string host_from = "--host-gbit";
  bool half_duplex = false, segments = false, exchange_only = false;
  int64_t min_bytes = 4 << 10, max_bytes = 16 << 20;
  const tuning::RingPipeline default_pipeline = tuning::get_ring_pipeline();
  int in_flight = default_pipeline.in_flight;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--busy") busy_threads = std::atoi(argv[++i]);
    if (arg == "--rounds") rounds = std::max(1, std::atoi(argv[++i]));
    if (arg == "--min-mb") min_bytes = static_cast<int64_t>(std::atoi(argv[++i])) << 20;
    if (arg == "--max-mb") max_bytes = static_cast<int64_t>(std::atoi(argv[++i])) << 20;
    if (arg == "--link-gbit") link_gbit = std::atof(argv[++i]);
    if (arg == "--in-flight") in_flight = std::max(1, std::atoi(argv[++i]));
    if (arg == "--host-gbit") host_gbit = std::atof(argv[++i]);
  }
  if (host_gbit < 0 && bench::probed_host_gbit() > 0) {  // scripts/netns --probe measured it before shaping
    host_gbit = bench::probed_host_gbit();
    host_from = "scripts/netns --probe: bench_allreduce --exchange-only on the unshaped loopback";
  }
  for (int i = 1; i < argc; ++i) {
    half_duplex = half_duplex || std::string(argv[i]) == "--half-duplex";
    segments = segments || std::string(argv[i]) == "--segments";
    exchange_only = exchange_only || std::string(argv[i]) == "--exchange-only";
  }
  if (exchange_only) {  // the endpoints' bandwidth alone (scripts/netns --probe runs this unshaped)
    const double rate = measure_exchange(kExchangeBytes);
    if (world.rank() == 0)
      fmt::print("exchange: {} MB each way at once between ranks 0 and 1 (MPI_Sendrecv, median of 15): {:.2f} Gbit/s "
                 "each way\n",
                 kExchangeBytes >> 20, rate * 8 / 1e9);
    return 0;
  }
  int provided = 0;
  MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
  const char* names[] = {"MPI auto", "linear", "red+bcast", "rec.doubl", "ring", "seg.ring", "rabenseif"};
  std::vector<MPI_Comm> comms;
  for (int algorithm = 0; algorithm <= 6; ++algorithm) comms.push_back(communicator_with_algorithm(algorithm));

  // The load: threads that spin until the end, as a build on the other cores would.
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int i = 0; i < busy_threads; ++i)
    busy.emplace_back([&stop] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  const bool lead = world.rank() == 0;
  const int n = world.world_size();
  const double alpha = bench::measure_alpha();
  const double exchange = measure_exchange(kExchangeBytes);  // this path, link and endpoints together
  const bench::Link link{link_gbit * 1e9 / 8, alpha, half_duplex, std::max(0.0, host_gbit) * 1e9 / 8};
  const bench::Link link_only{link_gbit * 1e9 / 8, alpha, half_duplex};
  bench::Link in_series = link;
  in_series.in_series = true;

  // The columns. Default: cppgrad's all_reduce with each way of waiting, then every MPI
  // algorithm. --segments: cppgrad's all_reduce (adaptive wait) with the ring's segment size
  // from none (one per chunk) to 1 MiB, `in_flight` on the way, then the MPI algorithms that
  // can be the best from 64 KiB (Open MPI's choice, ring, segmented ring, Rabenseifner).
  Tensor t;
  std::vector<Variant> variants;
  if (segments) {
    for (int64_t segment : {int64_t{0}, int64_t{32} << 10, int64_t{64} << 10, int64_t{128} << 10,
                            int64_t{256} << 10, int64_t{512} << 10, int64_t{1} << 20})
      variants.push_back({segment_name(segment),
                          [&t, segment, in_flight] {
                            tuning::set_ring_pipeline({segment, in_flight});
                            dist::all_reduce(t);
                          },
                          false});
  } else {
    const std::pair<const char*, tuning::WaitPolicy> policies[] = {
        {"adaptive", tuning::WaitPolicy::Adaptive},
        {"spin", tuning::WaitPolicy::Spin},
        {"polite", tuning::WaitPolicy::Polite}};
    for (const auto& policy : policies) {
      const tuning::WaitPolicy wait = policy.second;
      variants.push_back({policy.first,
                          [&t, wait] {
                            tuning::set_wait_policy(wait);
                            dist::all_reduce(t);
                          },
                          false});
    }
  }
  const size_t cppgrad_columns = variants.size();
  for (int algorithm = 0; algorithm <= 6; ++algorithm) {
    if (segments && algorithm != 0 && algorithm < 4) continue;
    MPI_Comm comm = comms[static_cast<size_t>(algorithm)];
    variants.push_back({names[algorithm],
                        [&t, comm] {
                          MPI_Allreduce(MPI_IN_PLACE, t.data<float>(), static_cast<int>(t.numel()), MPI_FLOAT,
                                        MPI_SUM, comm);
                        },
                        true});
  }

  if (lead) {
    fmt::print("all-reduce (float32, sum) between {} ranks; {}\n", n, bench::cpu_description());
    fmt::print("load: 1-minute average {:.2f}, {} tasks runnable now, {} spinning threads per rank (--busy); "
               "btl {}; median of {} rounds\n",
               bench::load_average(), runnable_now(), busy_threads,
               std::getenv("OMPI_MCA_btl") ? std::getenv("OMPI_MCA_btl") : "(default)", rounds);
    fmt::print("ring: {} segments, {} on the way{}; transport: {}\n",
               segments ? "each column's" : segment_name(default_pipeline.segment_bytes),
               segments ? in_flight : default_pipeline.in_flight, segments ? " (--in-flight); adaptive wait" : "",
               dist::transport() == dist::Transport::SharedMemory
                   ? std::string("shared memory")
                   : fmt::format("network (TCP eager limit {} KiB)", dist::network_eager_limit() >> 10));
    fmt::print("exchange: {} MB each way at once between ranks 0 and 1 on this path: {:.2f} Gbit/s each way\n",
               kExchangeBytes >> 20, exchange * 8 / 1e9);
    if (link_gbit > 0) {
      fmt::print("model: {} Gbit/s {}, alpha {:.1f} us (measured: half a 4-byte round trip); all_reduce runs {} "
                 "below 64 KiB, {} from there\n",
                 link_gbit, half_duplex ? "half duplex (one queue for both directions)" : "full duplex",
                 link.alpha * 1e6, bench::algorithm_name(tuning::all_reduce_algorithm(4096, n)),
                 bench::algorithm_name(tuning::all_reduce_algorithm(1 << 20, n)));
      if (host_gbit > 0) {
        fmt::print("model: endpoints H = {:.2f} Gbit/s each way ({}); a round takes the slower of link and "
                   "endpoints ('serial sum': the two times added; 'link only': H left out)\n",
                   host_gbit, host_from);
        // What the link leaves each way while both directions are busy, as in a ring round.
        const double link_each_way = half_duplex ? link_gbit / 2 : link_gbit;
        fmt::print("model: effective bandwidth each way = min(link {:.2f}, endpoints {:.2f}) = {:.2f} Gbit/s; "
                   "the serial sum's: {:.2f} Gbit/s\n",
                   link_each_way, host_gbit, std::min(link_each_way, host_gbit),
                   1 / (1 / link_each_way + 1 / host_gbit));
      }
      else
        fmt::print("model: endpoints not limited (no --host-gbit, no scripts/netns --probe)\n");
    }
    fmt::print("{:>6} |", "size");
    for (size_t v = 0; v < variants.size(); ++v)
      fmt::print(" {:>10}{}", variants[v].name, v + 1 == cppgrad_columns ? " |" : "");
    fmt::print(" | {:>10} {:>9}{}", "best MPI", segments ? "cols/best" : "adapt/best", segments ? "" : " paired");
    if (link_gbit > 0)
      fmt::print(" | {:>10} {:>9} {:>10} {:>9} {:>10}", "model", "adapt/model", "serial sum", "adapt/sum", "link only");
    fmt::print("\n");
  }
  for (int64_t bytes = 4 << 10; bytes <= max_bytes; bytes *= 4) {
    if (bytes < min_bytes) continue;
    const int64_t count = bytes / 4;
    const int reps = static_cast<int>(std::clamp<int64_t>((16 << 20) / bytes, 3, 500));  // ~16 MB a round
    t = ones({count});
    for (auto& variant : variants)  // warm-up: connections, buffers
      for (int i = 0; i < 2; ++i) variant.call();
    std::mt19937 shuffle(12345);  // the same on every rank: all run the variants in one order
    std::vector<std::vector<double>> times(variants.size());
    for (int round = 0; round < rounds; ++round) {
      std::vector<size_t> order(variants.size());
      std::iota(order.begin(), order.end(), size_t{0});
      std::shuffle(order.begin(), order.end(), shuffle);  // no variant always follows the same one
      for (size_t v : order) times[v].push_back(time_calls(variants[v].call, reps));
    }
    tuning::set_wait_policy(tuning::WaitPolicy::Adaptive);
    tuning::reset_ring_pipeline();
    std::vector<double> medians;
    for (auto& samples : times) medians.push_back(bench::median(samples));
    double best_mpi = 1e30;
    size_t best_column = 0;
    for (size_t v = 0; v < variants.size(); ++v)
      if (variants[v].mpi && medians[v] < best_mpi) {
        best_mpi = medians[v];
        best_column = v;
      }
    // The first column against that algorithm round by round (the two measured a moment apart):
    // the median of the rounds' ratios.
    std::vector<double> ratios;
    for (int round = 0; round < rounds; ++round)
      ratios.push_back(times[0][static_cast<size_t>(round)] / times[best_column][static_cast<size_t>(round)]);
    const double paired = bench::median(ratios);
    if (lead) {
      fmt::print("{:>6} |", size_str(static_cast<double>(bytes)));
      for (size_t v = 0; v < medians.size(); ++v)
        fmt::print(" {:>10}{}", us(medians[v]), v + 1 == cppgrad_columns ? " |" : "");
      fmt::print(" | {:>10} ", us(best_mpi));
      if (segments) {  // every segment size over the best MPI
        for (size_t v = 0; v < cppgrad_columns; ++v) fmt::print("{}{:.2f}", v ? " " : "", medians[v] / best_mpi);
      } else {
        fmt::print("{:>9.2f} {:>6.2f}", medians[0] / best_mpi, paired);
      }
      if (link_gbit > 0) {
        const double model = bench::all_reduce_seconds(static_cast<double>(bytes), n, link);
        const double link_model = bench::all_reduce_seconds(static_cast<double>(bytes), n, link_only);
        const double serial = bench::all_reduce_seconds(static_cast<double>(bytes), n, in_series);
        fmt::print(" | {:>10} {:>9.2f} {:>10} {:>9.2f} {:>10}", us(model), medians[0] / model, us(serial),
                   medians[0] / serial, us(link_model));
      }
      fmt::print("\n");
    }
  }
  stop = true;
  for (auto& thread : busy) thread.join();
  for (MPI_Comm& comm : comms) MPI_Comm_free(&comm);
  MPI_T_finalize();
  return 0;
}
