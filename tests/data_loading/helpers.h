// Shared by the data/ tests: small datasets and comparisons of batches.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <fstream>
#include <string>
#include <vector>

#include "cppgrad.h"

namespace data_test {

using namespace cppgrad;
using namespace cppgrad::data;

// n examples: "x" = [i, i + 0.5] (float32), "y" = i (int64, 0-d).
inline std::shared_ptr<TensorDataset> numbered_dataset(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.insert(x.end(), {static_cast<float>(i), static_cast<float>(i) + 0.5f});
    y.push_back(i);
  }
  return std::make_shared<TensorDataset>(NamedTensors{{"x", tensor(x, {n, 2})}, {"y", tensor(y, {n})}});
}

// The indices a batch of numbered_dataset holds.
inline std::vector<int64_t> ids_of(const Batch& batch) { return batch["y"].to_vector<int64_t>(); }

// Equal names, dtypes, shapes and bytes.
inline bool same_batch(const Batch& a, const Batch& b) {
  if (a.names() != b.names()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor &s = a.at(i), &t = b.at(i);
    if (s.dtype() != t.dtype() || s.shape() != t.shape()) return false;
    if (s.to_vector<double>() != t.to_vector<double>()) return false;
  }
  return true;
}

// The threads of this process, from /proc: the test of "no thread left behind".
inline int thread_count() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// A dataset that throws when asked for example `bad` (and counts the examples made).
class FailingDataset : public Dataset {
 public:
  FailingDataset(int64_t n, int64_t bad) : n_(n), bad_(bad) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override {
    if (index == bad_) throw std::runtime_error("example " + std::to_string(index) + " is corrupt");
    return {{"y", tensor(std::vector<int64_t>{index}, {})}};
  }

 private:
  int64_t n_, bad_;
};

}  // namespace data_test
