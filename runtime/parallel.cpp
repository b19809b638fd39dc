#include "runtime/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string_view>

#include <cblas.h>
#include <omp.h>

#include "runtime/error.h"
#include "runtime/load.h"

namespace cppgrad {

namespace {

std::atomic<int> g_threads{0};  // set by set_num_threads; 0: OpenMP's default
std::atomic<int64_t> g_parallel_grain{262144};

bool deterministic_from_env() {
  const char* v = std::getenv("CPPGRAD_DETERMINISTIC");
  return v == nullptr || std::string_view(v) != "0";
}
std::atomic<bool> g_deterministic{deterministic_from_env()};

// OpenMP's and OpenBLAS's counts. In deterministic mode BLAS stays on one thread (our threads
// split the products, tensor/kernels/gemm.h), and so does OpenMP's default count, since OpenBLAS's
// OpenMP build takes it as its own at every call (0.3.21); our regions name their thread count
// (tensor/iterate.h), from get_num_threads().
void apply_threads(int n) {
  const int blas = g_deterministic.load() ? 1 : n;
  openblas_set_num_threads(blas);
  omp_set_num_threads(blas);
}
// From the start, not only from the first set_num_threads, with OpenMP's default count kept as
// the count set.
struct BlasOnOneThread {
  BlasOnOneThread() {
    if (g_deterministic.load()) {
      g_threads.store(omp_get_max_threads());
      apply_threads(g_threads.load());
    }
  }
} g_blas_on_one_thread;

bool user_chose_waiting() {
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_DYNAMIC"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

struct LoadState {
  std::mutex mutex;
  int running = 0;      // the count last applied to OpenMP and OpenBLAS (0: none yet)
  bool forced = false;  // force_backed_off(true)
};
LoadState& load_state() {
  static LoadState state;
  return state;
}
std::atomic<bool> g_adapt{!user_chose_waiting()};

// CPPGRAD_DEBUG_BACKOFF=1 prints each change of the count to stderr, with the seconds since the
// first and the load that decided it, so that a user can see why a stretch of steps ran slow.
const bool g_log_backoff = [] {
  const char* v = std::getenv("CPPGRAD_DEBUG_BACKOFF");
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}();
void log_change(int threads, const std::optional<load::Load>& load) {
  static const auto start = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (load)
    fmt::print(stderr, "[cppgrad back-off {:9.3f} s] {:.1f} tasks of other programs runnable over the last 100 ms "
               "on {} cores: {} thread{}\n", seconds, load->runnable_elsewhere, load->cores, threads,
               threads == 1 ? "" : "s");
  else
    fmt::print(stderr, "[cppgrad back-off {:9.3f} s] {} thread{}\n", seconds, threads, threads == 1 ? "" : "s");
}

// Applies `n` (under the state's lock) unless it is applied already.
void run_on(LoadState& state, int n) {
  if (n == state.running) return;
  if (g_threads.load() == 0) g_threads.store(get_num_threads());  // kept while OpenMP's count says 1
  apply_threads(n);
  state.running = n;
}

}  // namespace

void set_num_threads(int n) {
  CPPGRAD_CHECK(n >= 1, "set_num_threads: expected a positive thread count, got {}", n);
  LoadState& state = load_state();
  std::lock_guard lock(state.mutex);
  g_threads.store(n);
  state.running = state.forced ? 1 : n;
  apply_threads(state.running);
}

int get_num_threads() {
  const int n = g_threads.load();
  return n > 0 ? n : omp_get_max_threads();
}

int64_t parallel_grain() { return g_parallel_grain.load(std::memory_order_relaxed); }
void set_parallel_grain(int64_t work) {
  CPPGRAD_CHECK(work >= 1, "set_parallel_grain: expected a positive amount of work, got {}", work);
  g_parallel_grain.store(work);
}

bool threads_adapt_to_load() { return g_adapt.load(); }
void set_threads_adapt_to_load(bool on) {
  LoadState& state = load_state();
  std::lock_guard lock(state.mutex);
  g_adapt.store(on);
  if (!on && !state.forced) run_on(state, get_num_threads());
}

bool deterministic_threads() { return g_deterministic.load(std::memory_order_relaxed); }
void set_deterministic_threads(bool on) {
  LoadState& state = load_state();
  std::lock_guard lock(state.mutex);
  g_deterministic.store(on);
  apply_threads(state.running > 0 ? state.running : get_num_threads());
}

void force_backed_off(bool on) {
  LoadState& state = load_state();
  std::lock_guard lock(state.mutex);
  if (g_threads.load() == 0) g_threads.store(get_num_threads());  // kept while OpenMP's count says 1
  state.forced = on;
  state.running = on ? 1 : get_num_threads();
  apply_threads(state.running);
}

int region_threads() {
  if (omp_in_parallel()) return 1;
  const int wanted = get_num_threads();
  if (wanted <= 1) return 1;
  LoadState& state = load_state();
  std::lock_guard lock(state.mutex);
  if (state.forced) return 1;
  int n = wanted;
  std::optional<load::Load> load;
  if (threads_adapt_to_load() && (load = load::machine_load())) n = std::clamp(load->free_cores, 1, wanted);
  if (n != state.running) {
    if (g_log_backoff && (state.running != 0 || n != wanted)) log_change(n, load);
    run_on(state, n);
  }
  return n;
}

}  // namespace cppgrad
