// The trace (runtime/profile.h): the JSON parses as Chrome's trace-event format, the spans of each
// thread nest, the backward functions and the workers' shares are there with their names, and
// the time a trace gives each kernel is the time the per-kernel report gives it.
#include <algorithm>
#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include <doctest/doctest.h>

#include "cppgrad.h"
#include "runtime/profile.h"

using namespace cppgrad;
using json = nlohmann::json;

namespace {

// Two threads that really run (no back-off on a busy machine), loops parallel from small sizes.
struct TwoThreads {
  int saved_threads = get_num_threads();
  int64_t saved_grain = parallel_grain();
  bool saved_adapt = threads_adapt_to_load();
  TwoThreads() {
    set_num_threads(2);
    set_parallel_grain(1024);
    set_threads_adapt_to_load(false);
  }
  ~TwoThreads() {
    set_num_threads(saved_threads);
    set_parallel_grain(saved_grain);
    set_threads_adapt_to_load(saved_adapt);
  }
};

// One training step of a small two-layer network: linear, layer_norm, relu, softmax, and backward.
void training_step() {
  Generator gen(11);
  Tensor x = randn({64, 96}, kFloat32, gen);
  Tensor w1 = (randn({128, 96}, kFloat32, gen) * 0.1).requires_grad_();
  Tensor w2 = (randn({32, 128}, kFloat32, gen) * 0.1).requires_grad_();
  Tensor h = nn::functional::layer_norm(nn::functional::linear(x, w1), {128}).relu();
  Tensor loss = (nn::functional::linear(h, w2).softmax(-1) * 3.0).sum();
  loss.backward();
  CHECK(w1.grad().defined());
}

// A span as integers of nanoseconds (ts and dur are written in µs with three decimals).
struct Span {
  std::string name, category;
  int64_t start, end;
  const json* event;
};

int64_t ns(const json& microseconds) { return std::llround(microseconds.get<double>() * 1000.0); }

std::map<int, std::vector<Span>> spans_by_thread(const json& trace) {
  std::map<int, std::vector<Span>> lanes;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    REQUIRE(e.contains("ts"));
    REQUIRE(e.contains("dur"));
    REQUIRE(e["dur"].get<double>() >= 0);
    CHECK(e["pid"] == 1);
    const int64_t start = ns(e["ts"]);
    lanes[e["tid"].get<int>()].push_back({e["name"], e["cat"], start, start + ns(e["dur"]), &e});
  }
  for (auto& [tid, spans] : lanes)  // outer spans first where two start together
    std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
  return lanes;
}

bool is_kernel(const Span& s) { return s.category.rfind("kernel", 0) == 0; }

}  // namespace

TEST_CASE("trace: the JSON parses, each thread's spans nest, and each kernel's time is the report's") {
  TwoThreads two;
  profile::start_trace();
  CHECK(profile::tracing());
  CHECK(profile::enabled());
  training_step();
  const std::vector<profile::Entry> report = profile::entries();  // the report of the same run
  const json trace = json::parse(profile::trace_json());          // stops the trace
  CHECK_FALSE(profile::tracing());

  REQUIRE(trace["traceEvents"].is_array());
  CHECK(trace["otherData"]["dropped_events"] == 0);
  std::map<int, std::string> thread_names;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[e["tid"].get<int>()] = e["args"]["name"];
  const auto lanes = spans_by_thread(trace);

  int main_tid = -1;
  bool worker_shares = false;
  for (const auto& [tid, spans] : lanes) {
    CAPTURE(tid);
    REQUIRE(thread_names.count(tid) == 1);  // every lane is named
    if (thread_names[tid] == "main") main_tid = tid;
    if (thread_names[tid].rfind("cppgrad worker", 0) == 0)
      for (const Span& s : spans) worker_shares = worker_shares || s.category == "worker";
    // Well nested: each span ends before the one enclosing it ends, or starts after it ended.
    std::vector<const Span*> open;
    for (const Span& s : spans) {
      while (!open.empty() && s.start >= open.back()->end) open.pop_back();
      if (!open.empty()) {
        CAPTURE(s.name);
        CAPTURE(open.back()->name);
        CHECK(s.end <= open.back()->end);
      }
      open.push_back(&s);
    }
  }
  REQUIRE(main_tid >= 0);
  CHECK(worker_shares);  // the parallel loops' other thread has its own lane

  // Each kernel's exclusive time from the trace: its span less the kernel spans directly inside it.
  std::map<std::string, int64_t> self_ns, calls;
  bool backward_function = false, backward_kernel = false, described = false;
  std::vector<const Span*> open;
  for (const Span& s : lanes.at(main_tid)) {
    while (!open.empty() && s.start >= open.back()->end) open.pop_back();
    backward_function = backward_function || (s.category == "backward" && s.name == "linear backward");
    if (is_kernel(s)) {
      backward_kernel = backward_kernel || s.category == "kernel,backward";
      if (s.name == "linear") described = described || (*s.event)["args"]["inputs"] == "[64,96] float32, [128,96] float32, none";
      self_ns[s.name] += s.end - s.start;
      calls[s.name] += 1;
      for (auto it = open.rbegin(); it != open.rend(); ++it)
        if (is_kernel(**it)) {
          self_ns[(*it)->name] -= s.end - s.start;
          break;
        }
    }
    open.push_back(&s);
  }
  CHECK(backward_function);
  CHECK(backward_kernel);
  CHECK(described);
  REQUIRE(!report.empty());
  for (const profile::Entry& e : report) {
    CAPTURE(e.name);
    REQUIRE(calls.count(e.name) == 1);
    CHECK(calls[e.name] == e.calls);
    // Both come from the same clock readings; the trace rounds each span to whole nanoseconds.
    // 1% or 2 µs: a few percent is what the issue asks; the difference is rounding only.
    const double trace_seconds = 1e-9 * static_cast<double>(self_ns[e.name]);
    CHECK(std::abs(trace_seconds - e.seconds) <= std::max(0.01 * e.seconds, 2e-6));
  }
  CHECK(calls.size() == report.size());

  bool allocator_counter = false;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "C" && e["name"] == "allocator bytes")
      allocator_counter = allocator_counter || (e["args"]["in use"].get<int64_t>() > 0 && e["tid"] == main_tid);
  CHECK(allocator_counter);
}

TEST_CASE("trace: a program's own spans, the event limit, and the profiler's state restored") {
  const bool was_enabled = profile::enabled();
  profile::start_trace();
  {
    profile::Span step("step", "train step");
    training_step();
  }
  json trace = json::parse(profile::trace_json());
  CHECK(profile::enabled() == was_enabled);  // stopping restores what start_trace found
  bool step = false;
  for (const json& e : trace["traceEvents"]) step = step || (e["ph"] == "X" && e["name"] == "train step");
  CHECK(step);

  const int64_t saved_limit = profile::trace_event_limit();
  profile::set_trace_event_limit(5);
  profile::start_trace();
  training_step();
  trace = json::parse(profile::trace_json());
  profile::set_trace_event_limit(saved_limit);
  int64_t spans = 0;
  for (const json& e : trace["traceEvents"]) spans += e["ph"] == "X" ? 1 : 0;
  CHECK(spans <= 5);
  CHECK(trace["otherData"]["dropped_events"].get<int64_t>() > 0);
  CHECK_THROWS_AS(profile::set_trace_event_limit(-1), Error);

  // Not tracing, nothing is recorded: a trace started later holds only its own events.
  training_step();
  profile::start_trace();
  trace = json::parse(profile::trace_json());
  for (const json& e : trace["traceEvents"]) CHECK(e["ph"] == "M");
  CHECK_THROWS_WITH_AS(profile::write_trace("/nonexistent-dir/t.json"),
                       doctest::Contains("profile::write_trace: /nonexistent-dir/t.json: cannot create"), Error);
}

TEST_CASE("trace: each optimizer step is a span of its own, named after the optimizer, as PyTorch's profiler's") {
  Generator gen(5);
  Tensor w = (randn({8, 4}, kFloat32, gen) * 0.1).requires_grad_();
  optim::AdamW adam({w}, optim::AdamWOptions(1e-3));
  optim::SGD sgd({w}, optim::SGDOptions(1e-2));
  profile::start_trace();
  for (int step = 0; step < 3; ++step) {
    adam.zero_grad();
    (w * w).sum().backward();
    adam.step();
  }
  sgd.step();
  const json trace = json::parse(profile::trace_json());
  std::vector<std::string> steps;
  for (const auto& [tid, spans] : spans_by_thread(trace))
    for (const Span& s : spans)
      if (s.category == "optimizer") steps.push_back(s.name);
  CHECK(steps == std::vector<std::string>{"AdamW.step", "AdamW.step", "AdamW.step", "SGD.step"});
  // AdamW's update kernel runs inside its span
  for (const auto& [tid, spans] : spans_by_thread(trace))
    for (const Span& s : spans)
      if (s.name == "AdamW.step") {
        const bool holds_update = std::any_of(spans.begin(), spans.end(), [&](const Span& k) {
          return is_kernel(k) && k.name == "adam update" && k.start >= s.start && k.end <= s.end;
        });
        CHECK(holds_update);
      }
}
