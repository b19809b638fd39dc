#include "runtime/profile.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include <omp.h>

#include <fmt/format.h>

namespace cppgrad::profile {

namespace {

using Clock = std::chrono::steady_clock;

struct Registry {
  std::mutex mutex;
  std::vector<Entry> entries;  // a few dozen kinds: a linear search is fine
  Clock::time_point since = Clock::now();
};

Registry& registry() {
  static Registry r;
  return r;
}

std::atomic<bool>& flag() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("CPPGRAD_PROFILE");
    return env != nullptr && env[0] != '\0' && env[0] != '0';
  }()};
  return on;
}

thread_local Scope* t_current = nullptr;

}  // namespace

bool enabled() { return flag().load(std::memory_order_relaxed); }
void set_enabled(bool on) { flag().store(on); }

void reset() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.entries.clear();
  r.since = Clock::now();
}

double seconds_since_reset() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return std::chrono::duration<double>(Clock::now() - r.since).count();
}

std::vector<Entry> entries() {
  Registry& r = registry();
  std::vector<Entry> out;
  {
    std::lock_guard lock(r.mutex);
    out = r.entries;
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.seconds > b.seconds; });
  return out;
}

void Scope::open() {
  // Only the thread running the step is timed (in a parallel region, thread 0 is that thread):
  // a worker's scope overlaps the caller's time, and counting it too would make the shares
  // add up to more than the wall time.
  if (omp_in_parallel() && omp_get_thread_num() != 0) return;
  open_ = true;
  parent_ = t_current;
  t_current = this;
  start_ = Clock::now();
}

void Scope::close() {
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  t_current = parent_;
  if (parent_) parent_->children_ += elapsed;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = std::find_if(r.entries.begin(), r.entries.end(), [&](const Entry& e) { return e.name == name_; });
  if (it == r.entries.end()) it = r.entries.insert(r.entries.end(), Entry{name_, 0, 0});
  it->calls += 1;
  it->seconds += elapsed - children_;
}

std::string report() {
  const double wall = seconds_since_reset();
  std::vector<Entry> list = entries();
  double inside = 0, blas = 0;
  for (const Entry& e : list) {
    inside += e.seconds;
    if (e.name.rfind("blas", 0) == 0) blas += e.seconds;
  }
  auto share = [&](double s) { return wall > 0 ? 100.0 * s / wall : 0.0; };
  std::string out = fmt::format("{:<28} {:>8} {:>10} {:>7}\n", "kernel", "calls", "ms", "share");
  for (const Entry& e : list)
    out += fmt::format("{:<28} {:>8} {:>10.3f} {:>6.1f}%\n", e.name, e.calls, 1e3 * e.seconds, share(e.seconds));
  out += fmt::format("{:<28} {:>8} {:>10.3f} {:>6.1f}%\n", "outside kernels", "", 1e3 * (wall - inside),
                     share(wall - inside));
  out += fmt::format("{:<28} {:>8} {:>10.3f} {:>6.1f}%   (BLAS: {:.1f}% of the time)\n", "total", "", 1e3 * wall, 100.0,
                     share(blas));
  return out;
}

}  // namespace cppgrad::profile
