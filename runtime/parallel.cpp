#include "runtime/parallel.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include <cblas.h>
#include <omp.h>

#include "runtime/error.h"

namespace cppgrad {

namespace {

std::atomic<int> g_threads{0};  // set by set_num_threads; 0: OpenMP's default
std::atomic<int64_t> g_parallel_grain{262144};

bool deterministic_from_env() {
  const char* v = std::getenv("CPPGRAD_DETERMINISTIC");
  return v == nullptr || std::string_view(v) != "0";
}
std::atomic<bool> g_deterministic{deterministic_from_env()};

// OpenMP's and OpenBLAS's counts (OpenBLAS's OpenMP build reads omp_get_max_threads too, but
// once it is at one thread it stops looking). In deterministic mode BLAS stays on one thread:
// our threads split the products (tensor/kernels/gemm.h).
// OpenBLAS's OpenMP build takes OpenMP's count as its own at every call (0.3.21 resets its count
// to omp_get_max_threads()), so in deterministic mode OpenMP's default count is 1 too: our own
// regions name their thread count (tensor/iterate.h), from get_num_threads().
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
  LoadBackoff backoff;
  bool on_one_thread = false;  // applied to OpenMP and OpenBLAS
  bool forced = false;         // force_backed_off(true)
};
LoadState& load_state() {
  static LoadState state;
  return state;
}
std::atomic<bool> g_adapt{!user_chose_waiting()};

// CPPGRAD_DEBUG_BACKOFF=1 prints each decision of the back-off to stderr, with the seconds since
// the first region, so that a user can see why a stretch of steps ran slow.
const bool g_log_backoff = [] {
  const char* v = std::getenv("CPPGRAD_DEBUG_BACKOFF");
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}();
template <class... Args>
void log_backoff(fmt::format_string<Args...> format, Args&&... args) {
  static const int64_t start = RegionClock::now();
  fmt::print(stderr, "[cppgrad back-off {:9.3f} s] {}\n", double(RegionClock::now() - start) * 1e-9,
             fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace

void set_num_threads(int n) {
  CPPGRAD_CHECK(n >= 1, "set_num_threads: expected a positive thread count, got {}", n);
  LoadState& state = load_state();
  std::lock_guard lock(state.mutex);
  g_threads.store(n);
  state.backoff = LoadBackoff();
  state.on_one_thread = state.forced;
  apply_threads(state.forced ? 1 : n);
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
  if (!on && state.on_one_thread && !state.forced) {
    state.on_one_thread = false;
    apply_threads(get_num_threads());
  }
  state.backoff = LoadBackoff();
}

bool deterministic_threads() { return g_deterministic.load(std::memory_order_relaxed); }
void set_deterministic_threads(bool on) {
  LoadState& state = load_state();
  std::lock_guard lock(state.mutex);
  g_deterministic.store(on);
  apply_threads(state.on_one_thread ? 1 : get_num_threads());
}

void force_backed_off(bool on) {
  LoadState& state = load_state();
  std::lock_guard lock(state.mutex);
  if (g_threads.load() == 0) g_threads.store(get_num_threads());  // kept while OpenMP's count says 1
  state.forced = on;
  apply_threads(on ? 1 : get_num_threads());
  state.on_one_thread = on;
  state.backoff = LoadBackoff();
}

bool LoadBackoff::backed_off(int64_t now) {
  if (retry_at_ < 0) return false;
  if (now < retry_at_) return true;
  retry_at_ = -1;
  tried_at_ = now;
  return false;
}

bool LoadBackoff::report(int64_t work, int64_t wait, int64_t now) {
  if (!started_) {  // the first region creates the threads: its wait says nothing of the machine
    started_ = true;
    return false;
  }
  if (wait <= work || wait < kStallFloor) return false;
  const bool try_failed = tried_at_ >= 0 && now - tried_at_ < kProbation;
  wait_ = try_failed ? std::min(kGrowth * wait_, kLongestWait) : kFirstWait;
  retry_at_ = now + wait_;
  return true;
}

int region_threads() {
  if (omp_in_parallel()) return 1;
  const int wanted = get_num_threads();
  if (wanted <= 1) return 1;
  LoadState& state = load_state();
  if (!threads_adapt_to_load()) {
    std::lock_guard lock(state.mutex);
    return state.forced ? 1 : wanted;
  }
  std::lock_guard lock(state.mutex);
  if (state.forced) return 1;
  const bool one = state.backoff.backed_off(RegionClock::now());
  if (one != state.on_one_thread) {
    if (g_log_backoff && !one) log_backoff("trying {} threads again", wanted);
    if (g_threads.load() == 0) g_threads.store(wanted);  // keep the default while OpenMP's says 1
    apply_threads(one ? 1 : wanted);
    state.on_one_thread = one;
  }
  return one ? 1 : wanted;
}

void report_parallel_region(int64_t work_ns, int64_t wait_ns) {
  if (!threads_adapt_to_load()) return;
  LoadState& state = load_state();
  std::lock_guard lock(state.mutex);
  if (state.on_one_thread || state.forced) return;
  if (state.backoff.report(work_ns, wait_ns, RegionClock::now())) {
    if (g_log_backoff) {
      log_backoff("a region stalled (the calling thread worked {:.2f} ms, then waited {:.2f} ms for the others): "
                  "1 thread for {:.1f} s", double(work_ns) * 1e-6, double(wait_ns) * 1e-6,
                  double(state.backoff.current_wait()) * 1e-9);
    }
    if (g_threads.load() == 0) g_threads.store(omp_get_max_threads());  // get_num_threads() stays
    apply_threads(1);
    state.on_one_thread = true;
  }
}

void RegionClock::report_region() const { report_parallel_region(end_ - begin_, now() - end_); }

}  // namespace cppgrad
