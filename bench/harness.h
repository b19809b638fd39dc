// The timing and memory harness shared by the benchmarks: bench_matmul, suite (cppgrad) and
// suite_torch (libtorch). It knows nothing of either library, so both twins time the same way.
//
//   bench::Timing t = bench::measure(step, {.budget_s = 2.0});  // warm-up, then repeated runs
//   t.median_s, t.min_s                                         // per run of step
//   bench::memory_mb("VmHWM")                                   // this process's peak RSS so far
//   bench::BusyLoad load(1);                                    // one busy process until `load` dies
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace bench {

// ---- the machine -----------------------------------------------------------------------------

// The CPU's model and the flags of the vector units a figure depends on ("+avx512f -amx_bf16"),
// printed beside every benchmark: machines differ from day to day.
inline std::string cpu_description() {
  std::ifstream info("/proc/cpuinfo");
  std::string line, model = "?", flags;
  while (std::getline(info, line)) {
    if (line.rfind("model name", 0) == 0 && model == "?") model = line.substr(line.find(':') + 2);
    if (line.rfind("flags", 0) == 0 && flags.empty()) flags = line + " ";
  }
  std::string out = model + "; flags:";
  for (const char* f : {"avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_bf16"})
    out += std::string(" ") + (flags.find(std::string(" ") + f + " ") != std::string::npos ? "+" : "-") + f;
  return out;
}

// The 1-minute load average (NAN where /proc is missing).
inline double load_average() {
  double one = NAN;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &one) != 1) one = NAN;
    std::fclose(f);
  }
  return one;
}

// ---- timing ----------------------------------------------------------------------------------

inline double seconds(const std::function<void()>& f) {
  auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

struct Timing {
  double median_s = NAN, min_s = NAN;  // per run
  int reps = 0;
};

inline Timing summarise(const std::vector<double>& runs) {
  Timing t;
  t.median_s = median(runs);
  t.min_s = runs.empty() ? NAN : *std::min_element(runs.begin(), runs.end());
  t.reps = static_cast<int>(runs.size());
  return t;
}

struct Budget {
  double budget_s = 1.0;  // time the timed runs should fill, about
  int warm_up = 3;        // untimed runs first: caches, the allocator's pools, lazy initialisation
  int min_reps = 7;
  int max_reps = 100000;
};

// The repetitions that fill the budget, given one run's duration measured during warm-up.
inline int repetitions(double run_s, const Budget& b) {
  const double wanted = run_s > 0 ? b.budget_s / run_s : b.max_reps;
  return static_cast<int>(std::clamp(wanted, double(b.min_reps), double(b.max_reps)));
}

// Runs `step` warm_up times untimed, then times it run by run until the budget is filled.
inline Timing measure(const std::function<void()>& step, const Budget& b) {
  double last = 0;
  for (int i = 0; i < std::max(b.warm_up, 1); ++i) last = seconds(step);
  const int reps = repetitions(last, b);
  std::vector<double> runs;
  runs.reserve(reps);
  for (int i = 0; i < reps; ++i) runs.push_back(seconds(step));
  return summarise(runs);
}

// Two ways of doing the same work, timed in turn, run by run, so that both see the same
// machine state: a neighbour's burst of load slows both alike.
inline std::pair<Timing, Timing> measure_interleaved(const std::function<void()>& first,
                                                     const std::function<void()>& second, const Budget& b) {
  double pair = 0;
  for (int i = 0; i < std::max(b.warm_up, 1); ++i) pair = seconds(first) + seconds(second);
  const int reps = repetitions(pair, b);
  std::vector<double> a, c;
  a.reserve(reps);
  c.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    a.push_back(seconds(first));
    c.push_back(seconds(second));
  }
  return {summarise(a), summarise(c)};
}

// ---- memory ----------------------------------------------------------------------------------

// A field of /proc/self/status in MB: "VmHWM" is the peak resident set size since the process
// started, "VmRSS" the current one. NAN where /proc is missing.
inline double memory_mb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::strtod(line.c_str() + field.size() + 1, nullptr) / 1024.0;
  }
  return NAN;
}

// ---- a busy machine ---------------------------------------------------------------------------

// N processes that spin on a core each, as another user's job would, from construction until
// destruction (--load N). Each is bounded three ways: the destructor kills it, the kernel kills
// it when this process dies however it dies (PR_SET_PDEATHSIG), and an alarm ends it after
// `limit_s` whatever happens. Start it before any library spins up threads: a child of fork()
// only runs the loop below.
class BusyLoad {
 public:
  explicit BusyLoad(int processes, unsigned limit_s = 900) {
    const pid_t parent = getpid();
    for (int i = 0; i < processes; ++i) {
      const pid_t pid = fork();
      if (pid < 0) {
        std::perror("BusyLoad: fork");
        break;
      }
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(0);  // the parent died before prctl took effect
        alarm(limit_s);                     // SIGALRM's default action ends the process
        volatile unsigned long spin = 0;
        for (;;) spin = spin + 1;
      }
      children_.push_back(pid);
    }
  }
  ~BusyLoad() {
    for (pid_t pid : children_) kill(pid, SIGKILL);
    for (pid_t pid : children_) waitpid(pid, nullptr, 0);
  }
  BusyLoad(const BusyLoad&) = delete;
  BusyLoad& operator=(const BusyLoad&) = delete;
  int processes() const { return static_cast<int>(children_.size()); }

 private:
  std::vector<pid_t> children_;
};

// ---- results ---------------------------------------------------------------------------------

// One row's figures. gemm_flops and tokens are per run of the step; the row's own memory is
// the peak since start minus the resident size just before the row was set up.
struct Result {
  std::string row;
  int threads = 1;
  Timing time;
  double tokens = 0;      // 0: not a token-processing row
  double gemm_flops = 0;  // floating-point operations of the step's matrix products
  double peak_mb = NAN, row_mb = NAN;
  Timing reference;       // matmul rows only: raw cblas_sgemm, timed interleaved
};

// Machine-readable: one tab-separated line per row, read by scripts/bench.
inline void print_tsv_header() {
  std::printf("row\tthreads\tmedian_ms\tmin_ms\treps\ttokens_per_s\tgflops\tpeak_mb\trow_mb\tref_median_ms\n");
}

inline void print_tsv(const Result& r) {
  const double s = r.time.median_s;
  std::printf("%s\t%d\t%.4f\t%.4f\t%d\t%.0f\t%.2f\t%.1f\t%.1f\t%.4f\n", r.row.c_str(), r.threads, s * 1e3,
              r.time.min_s * 1e3, r.time.reps, r.tokens > 0 ? r.tokens / s : NAN, r.gemm_flops / s * 1e-9, r.peak_mb,
              r.row_mb, r.reference.median_s * 1e3);
  std::fflush(stdout);
}

// For a person: aligned columns.
inline void print_header() {
  std::printf("%-24s %3s %10s %10s %6s %11s %8s %8s %8s %10s\n", "row", "thr", "median ms", "min ms", "reps",
              "tokens/s", "GFLOP/s", "peak MB", "row MB", "cblas ms");
}

inline void print_row(const Result& r) {
  const double s = r.time.median_s;
  std::printf("%-24s %3d %10.3f %10.3f %6d %11.0f %8.1f %8.1f %8.1f %10.3f\n", r.row.c_str(), r.threads, s * 1e3,
              r.time.min_s * 1e3, r.time.reps, r.tokens > 0 ? r.tokens / s : NAN, r.gemm_flops / s * 1e-9, r.peak_mb,
              r.row_mb, r.reference.median_s * 1e3);
  std::fflush(stdout);
}

}  // namespace bench
