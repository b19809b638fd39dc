// Fused against materialised attention, with libtorch beside them: forward + backward of
// scaled_dot_product_attention at batch 1, 8 heads, head dim 64, float32, causal and not.
//
//   build/release/bench/bench_attention [--lens 256,1024,4096,8192] [--threads 1,2] [--rounds 3]
//                                       [--budget S] [--no-torch]
//     The table. Every cell (path, T, causal, thread count) runs in a fresh process of its own,
//     so that its peak memory is its own; the three paths of a row take turns, the order turning
//     each round, and the round with the median time is shown. The libtorch column runs
//     bench_attention_torch (built where CMake finds libtorch): libtorch 1.13 has no fused
//     kernel, so it is the materialising computation matmul → softmax → matmul with autograd.
//   build/release/bench/bench_attention --one fused|materialize T causal [--threads N] [--budget S]
//     One cell in this process, printed as a tab-separated line (attention_row.h).
//
// Memory is the process's peak resident size above what it held before the row's tensors were
// made (so q, k, v, their gradients and the caching allocator's spare blocks count); time is the
// median step.
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "attention_row.h"
#include "cppgrad.h"
#include "harness.h"
#include "runtime/allocator.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace {

// ---- one cell, in this process -----------------------------------------------------------------

int run_one(const bench::AttentionRow& row) {
  F::AttentionBackend backend;
  if (row.side == "fused") backend = F::AttentionBackend::Fused;
  else if (row.side == "materialize") backend = F::AttentionBackend::Materialize;
  else {
    std::fprintf(stderr, "bench_attention: --one takes fused or materialize, not %s\n", row.side.c_str());
    return 2;
  }
  set_num_threads(row.threads);
  F::set_attention_backend(backend);
  const double rss_before = bench::memory_mb("VmRSS");
  const int64_t B = bench::kAttentionBatch, H = bench::kAttentionHeads, d = bench::kAttentionHeadDim, T = row.T;
  Generator gen(0);
  Tensor q = randn({B, H, T, d}, kFloat32, gen).requires_grad_(), k = randn({B, H, T, d}, kFloat32, gen).requires_grad_();
  Tensor v = randn({B, H, T, d}, kFloat32, gen).requires_grad_();
  Tensor G = randn({B, H, T, d}, kFloat32, gen);  // dLoss/dOutput
  auto step = [&] {
    q.zero_grad(), k.zero_grad(), v.zero_grad();
    F::scaled_dot_product_attention(q, k, v, {}, 0.0, row.causal).output.backward(G);
  };
  reset_peak_allocated();
  const int64_t held = allocator_stats().in_use_bytes;
  const bench::Timing t = bench::measure(step, bench::attention_budget(row));
  bench::print_attention_line(row, t, rss_before, (allocator_stats().peak_bytes - held) / 1e6);
  return 0;
}

// ---- the table: every cell in a process of its own ---------------------------------------------

struct Cell {
  double median_ms = NAN, row_mb = NAN;
};

std::vector<long> parse_list(const char* text) {
  std::vector<long> values;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) values.push_back(std::atol(item.c_str()));
  return values;
}

std::string directory_of_this_program() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return ".";
  std::string p(path, static_cast<size_t>(n));
  return p.substr(0, p.find_last_of('/'));
}

// Runs one cell's program and reads its line; a cell that fails (out of memory) stays NAN.
Cell run_cell(const std::string& program, const std::string& side, long T, bool causal, int threads, double budget) {
  const std::string command = fmt::format("'{}' --one {} {} {} --threads {} --budget {}", program, side, T,
                                          causal ? 1 : 0, threads, budget);
  Cell cell;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return cell;
  char line[512];
  while (std::fgets(line, sizeof line, pipe)) {
    char name[32];
    long t;
    int c, thr, reps;
    double median, min, row_mb, alloc_mb;
    if (std::sscanf(line, "%31s %ld %d %d %lf %lf %d %lf %lf", name, &t, &c, &thr, &median, &min, &reps, &row_mb,
                    &alloc_mb) == 9)
      cell = {median, row_mb};
  }
  if (pclose(pipe) != 0) cell = {};
  return cell;
}

// Of one cell's rounds, the one with the median time (the lower of the middle two).
Cell median_round(std::vector<Cell> rounds) {
  std::sort(rounds.begin(), rounds.end(), [](const Cell& a, const Cell& b) {
    return std::isnan(b.median_ms) || a.median_ms < b.median_ms;
  });
  return rounds[(rounds.size() - 1) / 2];
}

std::string figure(double x, const char* format) { return std::isnan(x) ? "-" : fmt::format(fmt::runtime(format), x); }

std::string load_average() { return figure(bench::load_average(), "{:.2f}"); }

int run_table(int argc, char** argv) {
  std::vector<long> lens{256, 1024, 4096, 8192}, thread_counts{1};
  int rounds = 3;
  double budget = 2.0;
  bool torch = true;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--lens") && has_value) lens = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && has_value) thread_counts = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--rounds") && has_value) rounds = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--budget") && has_value) budget = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-torch")) torch = false;
    else {
      std::fprintf(stderr, "bench_attention: unknown option %s (see the top of bench/bench_attention.cpp)\n", argv[i]);
      return 2;
    }
  }
  const std::string dir = directory_of_this_program(), self = dir + "/bench_attention",
                    torch_program = dir + "/bench_attention_torch";
  if (torch && access(torch_program.c_str(), X_OK) != 0) {
    std::printf("# no %s (libtorch not found at configure time): no libtorch column\n", torch_program.c_str());
    torch = false;
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("# attention forward+backward, batch %ld, %ld heads, head dim %ld, float32; OPENBLAS_CORETYPE=%s; "
              "load average %s at start; %d round(s) a cell\n",
              bench::kAttentionBatch, bench::kAttentionHeads, bench::kAttentionHeadDim, coretype ? coretype : "(unset)",
              load_average().c_str(), rounds);
  std::printf("%6s %6s %3s | %10s %10s %10s | %9s %9s %9s | %8s %8s\n", "", "", "", "median ms", "", "", "peak MB",
              "", "", "material.", "");
  std::printf("%6s %6s %3s | %10s %10s %10s | %9s %9s %9s | %8s %8s\n", "T", "causal", "thr", "fused", "material.",
              "libtorch", "fused", "material.", "libtorch", "/ fused", "ms ratio");
  std::vector<std::string> sides{"fused", "materialize"};
  if (torch) sides.push_back("torch");
  for (long threads : thread_counts) {
    for (long T : lens) {
      for (bool causal : {false, true}) {
        std::map<std::string, std::vector<Cell>> cells;
        for (int round = 0; round < rounds; ++round) {
          std::vector<std::string> order = sides;
          std::rotate(order.begin(), order.begin() + round % order.size(), order.end());
          for (const std::string& side : order)
            cells[side].push_back(run_cell(side == "torch" ? torch_program : self, side, T, causal,
                                           static_cast<int>(threads), budget / rounds));
        }
        const Cell fused = median_round(cells["fused"]), full = median_round(cells["materialize"]);
        const Cell lt = torch ? median_round(cells["torch"]) : Cell{};
        std::printf("%6ld %6s %3ld | %10s %10s %10s | %9s %9s %9s | %7s %8s\n", T, causal ? "yes" : "no", threads,
                    figure(fused.median_ms, "{:.1f}").c_str(), figure(full.median_ms, "{:.1f}").c_str(),
                    figure(lt.median_ms, "{:.1f}").c_str(), figure(fused.row_mb, "{:.0f}").c_str(),
                    figure(full.row_mb, "{:.0f}").c_str(), figure(lt.row_mb, "{:.0f}").c_str(),
                    figure(full.row_mb / fused.row_mb, "{:.0f}x").c_str(),
                    figure(full.median_ms / fused.median_ms, "{:.2f}x").c_str());
        std::fflush(stdout);
      }
    }
  }
  std::printf("# load average %s at the end; ms ratio = materialised time / fused time (above 1: fused is faster)\n",
              load_average().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && !std::strcmp(argv[1], "--one")) {
    bench::AttentionRow row;
    if (!bench::parse_attention_row(argc, argv, row)) return 2;
    return run_one(row);
  }
  return run_table(argc, argv);
}
