#include "runtime/profile.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include <omp.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/files.h"

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

// ---- the trace's storage ----------------------------------------------------------------------
// Each thread appends to its own buffer (its mutex is only ever contended by trace_json());
// the buffers outlive their threads, so a worker's spans are written after it has gone.
struct TraceEvent {
  char phase;            // 'X' a complete span, 'C' a counter sample
  const char* category;  // a static string
  std::string name;
  int64_t start_ns;      // since start_trace()
  int64_t duration_ns;   // -1 while the span is open
  std::string args;      // 'X': the description (shapes, dtypes); 'C': the JSON object of values
};

struct ThreadTrace {
  std::mutex mutex;
  int id = 0;
  std::string name;
  uint32_t generation = 0;  // which start_trace() its events belong to
  std::vector<TraceEvent> events;
};

struct TraceState {
  std::mutex mutex;  // guards threads, main, was_enabled
  std::atomic<bool> on{false};
  std::atomic<uint32_t> generation{0};
  std::atomic<int64_t> recorded{0}, dropped{0}, limit{1'000'000};
  Clock::time_point start = Clock::now();
  std::thread::id main;  // the thread that started the trace
  bool was_enabled = false;
  std::vector<std::shared_ptr<ThreadTrace>> threads;
  AllocatorStats last_allocator{};  // the last counters written (a new sample only when they change)
  int64_t last_hits = -1;
};

TraceState& trace_state() {
  static TraceState* s = new TraceState();  // never destroyed: threads may end after main
  return *s;
}

thread_local std::shared_ptr<ThreadTrace> t_trace;
thread_local int t_backward_depth = 0;  // backward functions of the engine open on this thread

ThreadTrace& this_thread_trace() {
  if (!t_trace) {
    TraceState& s = trace_state();
    auto t = std::make_shared<ThreadTrace>();
    std::lock_guard lock(s.mutex);
    t->id = static_cast<int>(s.threads.size()) + 1;
    if (std::this_thread::get_id() == s.main)
      t->name = "main";
    else if (omp_in_parallel())
      t->name = fmt::format("cppgrad worker {}", omp_get_thread_num());
    else
      t->name = fmt::format("thread {}", t->id);
    s.threads.push_back(t);
    t_trace = std::move(t);
  }
  return *t_trace;
}

int64_t trace_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - trace_state().start).count();
}

// A handle to an event: the generation in the high half, so that an event of an earlier trace
// is never mistaken for one of this.
int64_t handle(uint32_t generation, size_t index) { return (int64_t{generation} << 32) | static_cast<int64_t>(index); }

// Appends an open span to this thread's buffer; -1 when the limit is reached.
int64_t open_event(const char* category, std::string name, Clock::time_point start) {
  TraceState& s = trace_state();
  if (s.recorded.fetch_add(1, std::memory_order_relaxed) >= s.limit.load(std::memory_order_relaxed)) {
    s.dropped.fetch_add(1, std::memory_order_relaxed);
    return -1;
  }
  ThreadTrace& t = this_thread_trace();
  const uint32_t generation = s.generation.load();
  std::lock_guard lock(t.mutex);
  if (t.generation != generation) {  // the first event of a new trace on this thread
    t.events.clear();
    t.generation = generation;
  }
  t.events.push_back({'X', category, std::move(name), trace_ns(start), -1, {}});
  return handle(generation, t.events.size() - 1);
}

// The event `event` of this thread's buffer, or nullptr when it belongs to an earlier trace.
template <class F>
void with_event(int64_t event, F&& f) {
  ThreadTrace& t = this_thread_trace();
  std::lock_guard lock(t.mutex);
  const auto index = static_cast<size_t>(event & 0xffffffff);
  if (t.generation != static_cast<uint32_t>(event >> 32) || index >= t.events.size()) return;
  f(t.events[index]);
}

void close_event(int64_t event, Clock::time_point end) {
  const int64_t end_ns = trace_ns(end);
  with_event(event, [&](TraceEvent& e) { e.duration_ns = std::max<int64_t>(0, end_ns - e.start_ns); });
}

// A sample of the allocator's counters, when they changed since the last (the main thread's,
// after each outermost kernel).
void sample_allocator(Clock::time_point now) {
  TraceState& s = trace_state();
  const AllocatorStats a = allocator_stats();
  if (a.in_use_bytes == s.last_allocator.in_use_bytes && a.cached_bytes == s.last_allocator.cached_bytes &&
      a.cache_hits == s.last_hits)
    return;
  const bool hits_changed = a.cache_hits != s.last_hits;
  s.last_allocator = a;
  s.last_hits = a.cache_hits;
  ThreadTrace& t = this_thread_trace();
  std::lock_guard lock(t.mutex);
  if (t.generation != s.generation.load()) return;  // no event of this trace yet: none to follow
  t.events.push_back({'C', "allocator", "allocator bytes", trace_ns(now), 0,
                      fmt::format(R"({{"in use":{},"cached":{}}})", a.in_use_bytes, a.cached_bytes)});
  if (hits_changed)
    t.events.push_back({'C', "allocator", "allocator cache", trace_ns(now), 0,
                        fmt::format(R"({{"hits":{},"misses":{}}})", a.cache_hits, a.cache_misses)});
}

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

const char* current_scope_name() { return t_current ? t_current->name() : nullptr; }

void Scope::open() {
  // Only the thread running the step is timed (in a parallel region, thread 0 is that thread):
  // a worker's scope overlaps the caller's time, and counting it too would make the shares
  // add up to more than the wall time.
  if (omp_in_parallel() && omp_get_thread_num() != 0) return;
  open_ = true;
  parent_ = t_current;
  t_current = this;
  start_ = Clock::now();
  if (tracing()) event_ = open_event(t_backward_depth > 0 ? "kernel,backward" : "kernel", name_, start_);
}

void Scope::describe(std::string args) {
  if (event_ >= 0) with_event(event_, [&](TraceEvent& e) { e.args = std::move(args); });
}

void Scope::close() {
  const Clock::time_point end = Clock::now();
  const double elapsed = std::chrono::duration<double>(end - start_).count();
  if (event_ >= 0) {
    close_event(event_, end);
    if (parent_ == nullptr && std::this_thread::get_id() == trace_state().main) sample_allocator(end);
  }
  t_current = parent_;
  if (parent_) parent_->children_ += elapsed;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = std::find_if(r.entries.begin(), r.entries.end(), [&](const Entry& e) { return e.name == name_; });
  if (it == r.entries.end()) it = r.entries.insert(r.entries.end(), Entry{name_, 0, 0});
  it->calls += 1;
  it->seconds += elapsed - children_;
}

// ---- the trace ---------------------------------------------------------------------------------

void Span::open(const char* category, std::string_view name, const char* suffix) {
  if (name.empty()) return;
  event_ = open_event(category, fmt::format("{}{}", name, suffix), Clock::now());
  backward_ = std::string_view(category) == "backward";
  if (backward_) ++t_backward_depth;
}

void Span::close() {
  close_event(event_, Clock::now());
  if (backward_) --t_backward_depth;
}

void Span::describe(std::string args) {
  if (event_ >= 0) with_event(event_, [&](TraceEvent& e) { e.args = std::move(args); });
}

bool tracing() { return trace_state().on.load(std::memory_order_relaxed); }

void start_trace() {
  TraceState& s = trace_state();
  {
    std::lock_guard lock(s.mutex);
    if (!s.on.load()) s.was_enabled = enabled();
    s.main = std::this_thread::get_id();
    s.start = Clock::now();
    s.recorded = 0;
    s.dropped = 0;
    s.last_allocator = {};
    s.last_hits = -1;
    s.generation.fetch_add(1);
    for (auto& t : s.threads)
      if (t.get() == t_trace.get()) t->name = "main";  // the thread that traces may have been a worker's name
  }
  reset();
  set_enabled(true);
  s.on.store(true);
}

void stop_trace() {
  TraceState& s = trace_state();
  std::lock_guard lock(s.mutex);
  if (!s.on.load()) return;
  s.on.store(false);
  set_enabled(s.was_enabled);
}

void set_trace_event_limit(int64_t events) {
  CPPGRAD_CHECK(events >= 0, "profile::set_trace_event_limit: {} events; give 0 or more", events);
  trace_state().limit = events;
}
int64_t trace_event_limit() { return trace_state().limit.load(); }

namespace {
// `text` as a JSON string, quotes included (nlohmann-json's escapes; bytes that are not UTF-8
// become U+FFFD, so the file stays JSON).
std::string json_string(std::string_view text) {
  return nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}
}  // namespace

std::string trace_json() {
  stop_trace();
  TraceState& s = trace_state();
  std::vector<std::shared_ptr<ThreadTrace>> threads;
  {
    std::lock_guard lock(s.mutex);
    threads = s.threads;
  }
  const uint32_t generation = s.generation.load();
  std::string out = R"({"displayTimeUnit":"ms","traceEvents":[)" "\n";
  out += R"({"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"cppgrad"}})";
  auto us = [](int64_t ns) { return fmt::format("{}.{:03}", ns / 1000, ns % 1000); };
  for (const auto& t : threads) {
    std::lock_guard lock(t->mutex);
    if (t->generation != generation || t->events.empty()) continue;
    out += fmt::format(",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":{},\"args\":{{\"name\":{}}}}}",
                       t->id, json_string(t->name));
    out += fmt::format(",\n{{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":1,\"tid\":{},\"args\":{{\"sort_index\":{}}}}}",
                       t->id, t->name == "main" ? 0 : t->id);
    for (const TraceEvent& e : t->events) {
      if (e.phase == 'C') {
        out += fmt::format(",\n{{\"ph\":\"C\",\"name\":\"{}\",\"pid\":1,\"tid\":{},\"ts\":{},\"args\":{}}}", e.name, t->id,
                           us(e.start_ns), e.args);
        continue;
      }
      if (e.duration_ns < 0) continue;  // still open when the trace stopped
      out += fmt::format(",\n{{\"ph\":\"X\",\"name\":{},\"cat\":\"{}\",\"pid\":1,\"tid\":{},\"ts\":{},\"dur\":{}",
                         json_string(e.name), e.category, t->id, us(e.start_ns), us(e.duration_ns));
      if (!e.args.empty()) out += fmt::format(",\"args\":{{\"inputs\":{}}}", json_string(e.args));
      out += "}";
    }
  }
  out += fmt::format("\n],\"otherData\":{{\"producer\":\"cppgrad profile\",\"dropped_events\":{}}}}}\n", s.dropped.load());
  return out;
}

void write_trace(const std::string& path) {
  const std::string json = trace_json();
  // Whole or not at all: a trace cut short by a full disk is JSON no viewer opens.
  files::write_file_atomically(path, std::string_view(json), "profile::write_trace");
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
