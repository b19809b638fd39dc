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
//
// The same scopes, and more, as a timeline: a trace in Chrome's trace-event format, which
// ui.perfetto.dev and chrome://tracing open (docs/profiling.md):
//
//   cppgrad::profile::start_trace();       // enables the profiler too
//   ... a few training steps ...
//   cppgrad::profile::write_trace("step.trace.json");   // stops the trace
//
// It holds one span per kernel call (its shapes and dtypes as the span's args; "forward" or
// "backward" by whether the engine was running a backward function), one per backward function
// the engine ran ("mul backward"), one per share of a parallel loop that a worker thread ran, and
// the spans a program marks itself (Span, like PyTorch's record_function). Each thread is a lane,
// named; the allocator's bytes in use and cached, and its cache hits and misses, are counters.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
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
  // Whether a trace records this scope: only then is describe() worth the formatting.
  const char* name() const { return name_; }
  bool traced() const { return event_ >= 0; }
  // The span's args in the trace (shapes and dtypes: "[64,128] float32, [128,96] float32").
  void describe(std::string args);

 private:
  void open();
  void close();
  const char* name_;
  bool open_ = false;
  Scope* parent_ = nullptr;
  std::chrono::steady_clock::time_point start_;
  double children_ = 0;  // seconds spent in scopes opened inside this one
  int64_t event_ = -1;   // its place in this thread's trace, while one is recorded
};

// The name of the innermost Scope open on this thread (nullptr when none, or when disabled): a
// parallel loop hands it to its workers, whose shares are then traced under the kernel's name.
const char* current_scope_name();

// ---- the trace --------------------------------------------------------------------------------
// Starts recording a trace (and enables the profiler, reset, until the trace stops): every
// thread's spans from now on, up to trace_event_limit() events (the later ones are counted as
// dropped, so a long run cannot fill the memory).
void start_trace();
bool tracing();
// Stops recording; the profiler is enabled again only if it was before start_trace().
void stop_trace();
// The trace recorded since start_trace(), as trace-event JSON (stops it first).
std::string trace_json();
// Writes trace_json() to `path`, whole or not at all (files::write_file_atomically); throws
// cppgrad::Error naming the path when it cannot.
void write_trace(const std::string& path);
void set_trace_event_limit(int64_t events);
int64_t trace_event_limit();  // default 1,000,000 (about 100 MB of JSON)

// A span of the trace alone (not a kernel: report() does not see it): a program's own phases,
// as PyTorch's record_function marks them, and the engine's backward functions.
//   { profile::Span step("step", "train step"); ... }
class Span {
 public:
  // The span is named `name` followed by `suffix`; both are read only when a trace is recorded.
  Span(const char* category, std::string_view name, const char* suffix = "") {
    if (enabled() && tracing()) open(category, name, suffix);
  }
  ~Span() {
    if (event_ >= 0) close();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  bool traced() const { return event_ >= 0; }
  void describe(std::string args);

 private:
  void open(const char* category, std::string_view name, const char* suffix);
  void close();
  int64_t event_ = -1;
  bool backward_ = false;
};

}  // namespace cppgrad::profile

#define CPPGRAD_PROFILE_CONCAT2(a, b) a##b
#define CPPGRAD_PROFILE_CONCAT(a, b) CPPGRAD_PROFILE_CONCAT2(a, b)
// Charges the rest of the enclosing block to `name` (a string literal or other static string).
#define CPPGRAD_PROFILE_SCOPE(name) ::cppgrad::profile::Scope CPPGRAD_PROFILE_CONCAT(profile_scope_, __LINE__)(name)
