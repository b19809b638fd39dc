// bench_stalls: does a training run at the default thread count have stretches of slow steps
// beside other programs? The copy-task step (bench/copy_task_row.h) is trained for --steps steps
// at 1 thread and at the default count, each run a fresh process, the two taking turns for
// --rounds rounds beside each kind of neighbour (so that a change in the machine's other load
// falls on both alike), and each step is timed. Per neighbour it prints the median step at 1
// thread and at the default count, each one's worst stretch (the highest median over any --window
// consecutive steps of one run), the default count's worst against the 1-thread median beside the
// same neighbour (issue 31 asks that it stay under 3x), and the rounds' ratios of the two medians
// (issue 42 asks that the default count never be slower than 1 thread).
//
//   bench_stalls                          # every neighbour, 300 steps each, windows of 20
//   bench_stalls --neighbours busy2,cppgrad2 --steps 200
//   CPPGRAD_DEBUG_BACKOFF=1 bench_stalls --neighbours intermittent   # and why each slow stretch was
//
// Neighbours (each a separate process, started before the timed runs and killed after them):
//   quiet         none;
//   busy1, busy2  one or two processes that spin on a core each;
//   cppgrad2      another cppgrad training, the same step at 2 threads;
//   intermittent  two threads that each work and sleep in turns of 2-40 ms, as a build or an
//                 interactive program does.
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <cblas.h>

#include "copy_task_row.h"
#include "harness.h"
#include "runtime/load.h"

using namespace cppgrad;
using bench::median;

namespace {

// The highest median over `window` consecutive steps.
double worst_window_median(const std::vector<double>& steps, size_t window) {
  double worst = 0;
  for (size_t i = 0; i + window <= steps.size(); ++i)
    worst = std::max(worst, median(std::vector<double>(steps.begin() + i, steps.begin() + i + window)));
  return worst;
}

// Milliseconds per step of `steps` copy-task steps at `threads` (after 5 steps of warm-up), in
// this process (`bench_stalls --run THREADS STEPS` prints them, one per line).
std::vector<double> train(int threads, int steps) {
  set_num_threads(threads);
  manual_seed(0);
  bench::CopyTaskRow work{bench::CopyTaskConfig{}};
  for (int i = 0; i < 5; ++i) work.step();
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto begin = std::chrono::steady_clock::now();
    work.step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count());
  }
  return ms;
}

// What one reading of the load signal costs (runtime/load.h: /proc read at most every 10 ms),
// in microseconds, median of 5 batches of 1,000, and how many threads this process has then (a
// reading reads each one's state): after one parallel loop, which starts the loops' threads
// where the load leaves it a second core.
std::pair<double, int> load_reading_us() {
  Tensor x = ones({1 << 20});
  (void)(x * 2.0);
  std::vector<double> batches;
  for (int b = 0; b < 5; ++b) {
    const auto begin = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000; ++i)
      if (!load::read_proc()) return {NAN, 0};
    batches.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count() / 1000);
  }
  int threads = 0;
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (const dirent* task = readdir(tasks)) threads += task->d_name[0] != '.';
    closedir(tasks);
  }
  return {median(batches), threads};
}

// ---- this program again, as another process -------------------------------------------------

// Runs `bench_stalls ARGS...` and returns what it printed.
std::string run_self(const std::vector<std::string>& args) {
  int out[2];
  if (pipe(out) != 0) throw std::runtime_error("bench_stalls: pipe failed");
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    std::vector<char*> argv{const_cast<char*>("bench_stalls")};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = read(out[0], buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("bench_stalls: a timed run failed");
  return text;
}

std::vector<double> train_in_a_process(int threads, int steps) {
  std::vector<double> ms;
  std::stringstream in(run_self({"--run", std::to_string(threads), std::to_string(steps)}));
  for (double v; in >> v;) ms.push_back(v);
  return ms;
}

// The neighbour's own loop, in the child (run as `bench_stalls --be NAME`).
[[noreturn]] void be_neighbour(const std::string& name) {
  alarm(1800);  // ends it whatever happens to its parent
  if (name == "cppgrad2") {
    set_num_threads(2);
    bench::CopyTaskRow work{bench::CopyTaskConfig{}};
    for (;;) work.step();
  }
  if (name == "intermittent") {
    auto turns = [](unsigned seed) {
      std::mt19937 random(seed);
      std::uniform_int_distribution<int> ms(2, 40);
      for (;;) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms(random));
        volatile unsigned long spin = 0;
        while (std::chrono::steady_clock::now() < until) spin = spin + 1;
        std::this_thread::sleep_for(std::chrono::milliseconds(ms(random)));
      }
    };
    std::thread other(turns, 2);
    turns(1);
  }
  std::fprintf(stderr, "bench_stalls: unknown neighbour '%s'\n", name.c_str());
  std::_Exit(2);
}

// Starts the neighbour `name` (nothing for quiet, busy loops for busyN) and kills it when destroyed.
class Neighbour {
 public:
  explicit Neighbour(const std::string& name) {
    if (name == "quiet") return;
    if (name.rfind("busy", 0) == 0) {
      busy_ = std::make_unique<bench::BusyLoad>(std::stoi(name.substr(4)));
      return;
    }
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(0);
      execl("/proc/self/exe", "bench_stalls", "--be", name.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));  // let it start its own threads
  }
  ~Neighbour() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
  std::unique_ptr<bench::BusyLoad> busy_;
};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string neighbours = "quiet,busy1,busy2,cppgrad2,intermittent";
  int steps = 100, window = 20, rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--be" && has_value) be_neighbour(argv[i + 1]);
    if (arg == "--run" && i + 2 < argc) {
      for (double ms : train(std::atoi(argv[i + 1]), std::atoi(argv[i + 2]))) std::printf("%.4f\n", ms);
      return 0;
    }
    if (arg == "--neighbours" && has_value) neighbours = argv[++i];
    else if (arg == "--rounds" && has_value) rounds = std::atoi(argv[++i]);
    else if (arg == "--steps" && has_value) steps = std::atoi(argv[++i]);
    else if (arg == "--window" && has_value) window = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_stalls [--neighbours quiet,busy1,busy2,cppgrad2,intermittent] [--steps N] "
                           "[--window W] [--rounds R]\n");
      return 2;
    }
  }
  if (steps < window || window < 1 || rounds < 1) {
    std::fprintf(stderr, "bench_stalls: --steps must be at least --window, and --window and --rounds at least 1\n");
    return 2;
  }
  const int default_threads = get_num_threads();
  const char* kernel = std::getenv("OPENBLAS_CORETYPE");
  std::printf("# CPU: %s\n# OpenBLAS kernel %s (OPENBLAS_CORETYPE %s); %s; load average %.2f at the start\n",
              bench::cpu_description().c_str(), openblas_get_corename(), kernel ? kernel : "unset",
              deterministic_threads() ? "deterministic threads" : "BLAS on its own threads", bench::load_average());
  const auto [reading_us, threads] = load_reading_us();
  std::printf("# a reading of the load signal (runtime/load.h): %.1f us in a process of %d threads, at most one "
              "per 10 ms: %.2f%% of a core\n",
              reading_us, threads, reading_us / 100.0);
  std::printf("copy-task step, %d rounds of a %d-step run at 1 thread and one at %d (fresh processes, taking turns, "
              "the first of each round alternating); worst = highest median of %d consecutive steps of a run; "
              "ratio = a round's %d-thread median over its 1-thread median, median of the rounds (min-max)\n\n",
              rounds, steps, default_threads, window, default_threads);
  std::printf("| neighbour | 1 thread, median ms | 1 thread, worst %d-step median | %d threads, median ms | %d threads, "
              "worst %d-step median | worst / 1-thread median | %d threads / 1 thread, by round |\n"
              "|---|---|---|---|---|---|---|\n", window, default_threads, default_threads, window, default_threads);
  for (const std::string& name : split(neighbours)) {
    Neighbour neighbour(name);
    std::vector<double> one, many, ratios;
    double worst_one = 0, worst_many = 0;
    for (int r = 0; r < rounds; ++r) {
      // Alternating which run goes first keeps a drift of the machine's speed within a round
      // from favouring one thread count.
      std::vector<double> a, b;
      if (r % 2 == 0) {
        a = train_in_a_process(1, steps);
        b = train_in_a_process(default_threads, steps);
      } else {
        b = train_in_a_process(default_threads, steps);
        a = train_in_a_process(1, steps);
      }
      ratios.push_back(median(b) / median(a));
      one.insert(one.end(), a.begin(), a.end());
      many.insert(many.end(), b.begin(), b.end());
      worst_one = std::max(worst_one, worst_window_median(a, static_cast<size_t>(window)));
      worst_many = std::max(worst_many, worst_window_median(b, static_cast<size_t>(window)));
    }
    std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f (%.2f-%.2f) |\n", name.c_str(), median(one), worst_one,
                median(many), worst_many, worst_many / median(one), median(ratios),
                *std::min_element(ratios.begin(), ratios.end()), *std::max_element(ratios.begin(), ratios.end()));
    std::fflush(stdout);
  }
  std::printf("\nload average at the end: %.2f\n", bench::load_average());
  return 0;
}
