#include "data/sampler.h"

#include "runtime/allocator.h"
#include "tensor/tensor.h"

namespace cppgrad::data {

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  CPPGRAD_CHECK(n >= 0, "SequentialSampler: expected a dataset size >= 0, got {}", n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t, Generator&) const {
  return arange(static_cast<double>(n_), kInt64).to_vector<int64_t>();
}

RandomSampler::RandomSampler(int64_t n, bool replacement, int64_t num_samples)
    : n_(n), num_samples_(num_samples < 0 ? n : num_samples), replacement_(replacement) {
  CPPGRAD_CHECK(n >= 0, "RandomSampler: expected a dataset size >= 0, got {}", n);
  CPPGRAD_CHECK(num_samples >= -1, "RandomSampler: num_samples must be >= 0 (or -1 for the dataset size), got {}",
                num_samples);
  CPPGRAD_CHECK(replacement || num_samples_ == n_,
                "RandomSampler: without replacement an epoch is a permutation of all {} indices; num_samples {} "
                "needs replacement=true", n_, num_samples_);
  CPPGRAD_CHECK(n_ > 0 || num_samples_ == 0, "RandomSampler: cannot draw {} samples from an empty dataset",
                num_samples_);
  // An epoch's indices are drawn at once: refused here rather than by the allocation they need.
  const double index_bytes = static_cast<double>(num_samples_) * sizeof(int64_t);
  CPPGRAD_CHECK(index_bytes <= machine_memory_bytes(), "RandomSampler: num_samples {} needs {:.3g} GB of indices an "
                "epoch, more than this machine's {:.3g} GB of memory", num_samples_, index_bytes / 1e9,
                machine_memory_bytes() / 1e9);
}

std::vector<int64_t> RandomSampler::indices(int64_t, Generator& gen) const {
  if (!replacement_) return randperm(n_, gen).to_vector<int64_t>();
  std::vector<int64_t> drawn(static_cast<size_t>(num_samples_));
  for (auto& index : drawn) index = gen.randint(0, n_);
  return drawn;
}

DistributedSampler::DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : n_(n), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed) {
  CPPGRAD_CHECK(n >= 0, "DistributedSampler: expected a dataset size >= 0, got {}", n);
  CPPGRAD_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got {}", num_replicas);
  CPPGRAD_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank {} out of range [0, {})", rank,
                num_replicas);
  // drop_last: the largest multiple of R that fits; otherwise the smallest that holds all.
  num_samples_ = drop_last ? n / num_replicas : (n + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch, Generator&) const {
  Generator gen(seed_ + static_cast<uint64_t>(epoch));
  std::vector<int64_t> order = (shuffle_ ? randperm(n_, gen) : arange(static_cast<double>(n_), kInt64)).to_vector<int64_t>();
  const auto total = static_cast<size_t>(total_size());
  if (order.size() > total) {
    order.resize(total);  // drop_last: the tail goes
  } else {
    // Pad by repeating the list from its start (several times over when it is shorter than R).
    for (size_t i = 0; order.size() < total; ++i) order.push_back(order[i]);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(num_replicas_)) mine.push_back(order[i]);
  return mine;
}

std::vector<int64_t> DistributedSampler::indices() const {
  Generator unused;
  return indices(epoch_, unused);
}

}  // namespace cppgrad::data
