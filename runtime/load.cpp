#include "runtime/load.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>

namespace cppgrad::load {

void Window::add(int64_t now, Reading reading) {
  cores_ = std::max(1, reading.cores);
  samples_.push_back({now, std::max(0, reading.runnable_elsewhere)});
  while (now - samples_.front().time >= kWindow) samples_.pop_front();
}

std::optional<Load> Window::load() const {
  if (samples_.empty()) return std::nullopt;
  double sum = 0;
  for (const Sample& s : samples_) sum += s.runnable_elsewhere;
  const double elsewhere = sum / static_cast<double>(samples_.size());
  const int free = static_cast<int>(std::lround(std::max(0.0, cores_ - elsewhere)));
  return Load{cores_, elsewhere, free};
}

namespace {

// The whole of a small /proc file (a few hundred bytes), or nothing.
std::optional<std::string> read_small_file(const char* path) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return std::nullopt;
  char buffer[1024];
  const size_t n = std::fread(buffer, 1, sizeof buffer, f);
  std::fclose(f);
  return std::string(buffer, n);
}

int64_t steady_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Signal {
  std::mutex mutex;
  Window window;
  std::function<std::optional<Reading>()> read = read_proc;
  std::function<int64_t()> now = steady_now;
  std::optional<int64_t> tried_at;  // the last reading's time, read or not
};
Signal& signal() {
  static Signal s;
  return s;
}

}  // namespace

std::optional<int> runnable_in_loadavg(std::string_view loadavg) {
  double averages[3];
  int runnable = 0, tasks = 0;
  const std::string text(loadavg);
  if (std::sscanf(text.c_str(), "%lf %lf %lf %d/%d", &averages[0], &averages[1], &averages[2], &runnable, &tasks) != 5)
    return std::nullopt;
  return runnable;
}

bool runnable_in_stat(std::string_view stat) {
  const size_t name_end = stat.rfind(')');  // the name may hold spaces and parentheses itself
  return name_end != std::string_view::npos && name_end + 2 < stat.size() && stat[name_end + 2] == 'R';
}

std::optional<Reading> read_proc() {
  const std::optional<std::string> loadavg = read_small_file("/proc/loadavg");
  if (!loadavg) return std::nullopt;
  const std::optional<int> runnable = runnable_in_loadavg(*loadavg);
  if (!runnable) return std::nullopt;
  int ours = 1;  // the thread reading, running now, even where its own threads cannot be listed
  if (DIR* tasks = opendir("/proc/self/task")) {
    ours = 0;
    while (const dirent* task = readdir(tasks)) {
      if (task->d_name[0] == '.') continue;
      const std::string path = std::string("/proc/self/task/") + task->d_name + "/stat";
      if (const std::optional<std::string> stat = read_small_file(path.c_str()); stat && runnable_in_stat(*stat))
        ++ours;
    }
    closedir(tasks);
  }
  static const int cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  return Reading{cores, std::max(0, *runnable - ours)};
}

std::optional<Load> machine_load() {
  Signal& s = signal();
  std::lock_guard lock(s.mutex);
  const int64_t now = s.now();
  if (!s.tried_at || now - *s.tried_at >= Window::kSpacing) {
    s.tried_at = now;
    if (const std::optional<Reading> reading = s.read()) s.window.add(now, *reading);
  }
  return s.window.load();
}

void set_source(std::function<std::optional<Reading>()> read, std::function<int64_t()> now) {
  Signal& s = signal();
  std::lock_guard lock(s.mutex);
  s.read = std::move(read);
  s.now = std::move(now);
  s.window = Window();
  s.tried_at.reset();
}

void reset_source() { set_source(read_proc, steady_now); }

}  // namespace cppgrad::load
