#include "tensor/keyed_dropout.h"

#include <algorithm>

#include "runtime/error.h"
#include "tensor/kernels.h"
#include "tensor/kernels/counter_rng.h"

namespace cppgrad {

namespace {
thread_local KeyedDropout* innermost = nullptr;

// A key that depends on `key` and `value` and looks independent of every other pair: the
// value, spread by the golden-ratio step, added and mixed (mix64 is a bijection).
uint64_t absorb(uint64_t key, int64_t value) {
  return kernels::mix64(key + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(value) + 1));
}
}  // namespace

KeyedDropout::KeyedDropout(uint64_t seed, int64_t step, std::vector<int64_t> examples)
    : seed_(seed), step_(step), examples_(std::move(examples)), outer_(innermost) {
  CPPGRAD_CHECK(!examples_.empty(), "KeyedDropout: no examples: a scope holds the global positions of its batch's rows");
  CPPGRAD_CHECK(step_ >= 0, "KeyedDropout: step {} is negative", step_);
  std::vector<int64_t> sorted = examples_;
  std::sort(sorted.begin(), sorted.end());
  CPPGRAD_CHECK(sorted.front() >= 0, "KeyedDropout: example position {} is negative", sorted.front());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  CPPGRAD_CHECK(twice == sorted.end(), "KeyedDropout: example position {} is given twice", *twice);
  innermost = this;
}

KeyedDropout::~KeyedDropout() { innermost = outer_; }

KeyedDropout* KeyedDropout::current() { return innermost; }

std::optional<std::vector<uint64_t>> example_keys(const char* op, const Shape& shape, Generator& gen) {
  KeyedDropout* scope = innermost;
  if (scope == nullptr || &gen != &default_generator()) return std::nullopt;
  kernels::example_layout(op, shape, static_cast<int64_t>(scope->examples_.size()));  // refuses what does not fit
  const uint64_t call = absorb(absorb(kernels::mix64(scope->seed_), scope->step_), scope->calls_++);
  std::vector<uint64_t> keys;
  keys.reserve(scope->examples_.size());
  for (int64_t g : scope->examples_) keys.push_back(absorb(call, g));  // (seed, step, call, example)
  return keys;
}

}  // namespace cppgrad
