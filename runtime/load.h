// How busy the machine is: one signal of load for every part of cppgrad that shares the cores,
// the thread count of the parallel loops (runtime/parallel.h) and the collectives' wait
// (distributed/collectives.cpp).
//
// The signal is what other programs ask of the cores: the tasks of other processes that are
// runnable (running or waiting for a core), counted machine-wide every 10 ms at most and
// averaged over the last 100 ms; the cores they leave are this process's. It is not how long
// a thread of ours waited: on a virtual machine one late wake-up of a few milliseconds is
// normal and says nothing about load, and a count of tasks cannot be fooled by it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string_view>

namespace cppgrad::load {

// One look at the machine.
struct Reading {
  int cores = 1;               // online
  int runnable_elsewhere = 0;  // other processes' tasks running or waiting for a core, this instant
};

// What the readings of the window say.
struct Load {
  int cores = 1;
  double runnable_elsewhere = 0;  // the mean over the window
  int free_cores = 1;             // cores - runnable_elsewhere, rounded, at least 0
};

// The decision apart from clocks and /proc: readings go in with their time (ns), the mean of
// those of the last kWindow comes out. Tests feed it recorded readings.
class Window {
 public:
  static constexpr int64_t kSpacing = 10'000'000;  // 10 ms between readings at most
  static constexpr int64_t kWindow = 100'000'000;  // 100 ms of readings averaged

  void add(int64_t now, Reading reading);
  std::optional<Load> load() const;  // nothing before the first reading

 private:
  struct Sample {
    int64_t time;
    int runnable_elsewhere;
  };
  std::deque<Sample> samples_;  // the window's, oldest first
  int cores_ = 1;
};

// The machine's load now: the process-wide window, given a reading from /proc when the last try
// is kSpacing old (thread-safe).
// Nothing where /proc cannot be read (not Linux): callers then keep to their default.
std::optional<Load> machine_load();

// One reading from /proc: the fourth field of /proc/loadavg counts the tasks runnable now
// machine-wide, this process's own (its threads in state R in /proc/self/task/*/stat) are taken off.
std::optional<Reading> read_proc();
// The count read_proc takes off: this process's threads running or runnable now (the calling one
// among them), or nothing where they cannot be listed.
std::optional<int> runnable_threads_here();
// Its parsers, apart for tests with recorded text.
std::optional<int> runnable_in_loadavg(std::string_view loadavg);  // "0.73 1.50 2.26 3/456 12345" -> 3
bool runnable_in_stat(std::string_view stat);                      // "12 (name) R 1 ..." -> true

// For tests: readings and the clock (ns) from these instead of /proc and steady_clock, with an
// empty window; reset_source() returns to /proc, also with an empty window.
void set_source(std::function<std::optional<Reading>()> read, std::function<int64_t()> now);
void reset_source();

}  // namespace cppgrad::load
