// A per-kernel time profile: where does a training step spend its time?
//
//   cppgrad::profile::set_enabled(true);   // or run with CPPGRAD_PROFILE=1 in the environment
//   ... one training step ...
//   fmt::print("{}", cppgrad::profile::report());
//
// Each kernel entry point opens a Scope named after its kind ("blas gemm", "layer_norm",
// "binary mul", ...). Times are exclusive: a kernel that calls another (linear calls the GEMM)
// is charged only for its own part. Time outside every scope (the graph, allocation and other
// bookkeeping) is reported as "outside kernels". Only the calling thread is timed (OpenMP's
// worker threads are not), so the times add up to the wall time at any thread count. Disabled, a Scope costs one predictable branch.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace cppgrad::profile {

bool enabled();
void set_enabled(bool on);
void reset();  // clears the counts and restarts the wall clock the report measures against

struct Entry {
  std::string name;
  int64_t calls = 0;
  double seconds = 0;  // exclusive
};
std::vector<Entry> entries();  // the kernels seen since reset(), most time first
double seconds_since_reset();
// A table: kernel, calls, ms, share of the wall time since reset(); then the BLAS share.
std::string report();

class Scope {
 public:
  explicit Scope(const char* name) : name_(name) {
    if (enabled()) open();
  }
  ~Scope() {
    if (open_) close();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void open();
  void close();
  const char* name_;
  bool open_ = false;
  Scope* parent_ = nullptr;
  std::chrono::steady_clock::time_point start_;
  double children_ = 0;  // seconds spent in scopes opened inside this one
};

}  // namespace cppgrad::profile

#define CPPGRAD_PROFILE_CONCAT2(a, b) a##b
#define CPPGRAD_PROFILE_CONCAT(a, b) CPPGRAD_PROFILE_CONCAT2(a, b)
// Charges the rest of the enclosing block to `name` (a string literal or other static string).
#define CPPGRAD_PROFILE_SCOPE(name) ::cppgrad::profile::Scope CPPGRAD_PROFILE_CONCAT(profile_scope_, __LINE__)(name)
