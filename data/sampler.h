// Samplers: which dataset indices an epoch visits, and in which order.
//
// A sampler is a pure function of the epoch number and a generator's state, so that an epoch's
// order can be made again from a checkpoint: the DataLoader (data/loader.h) keeps the state its
// generator had when the epoch began, and hands the sampler a generator set to it.
//
//   SequentialSampler(n)               0, 1, ..., n-1 every epoch
//   RandomSampler(n)                   a fresh permutation of 0..n-1 every epoch (randperm)
//   RandomSampler(n, true, k)          k indices drawn with replacement
//   DistributedSampler(n, R, r)        rank r's disjoint share of each epoch, as PyTorch's
#pragma once

#include <cstdint>
#include <vector>

#include "../tensor/generator.h"

namespace cppgrad::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // How many indices an epoch yields.
  virtual int64_t size() const = 0;
  // The indices of epoch `epoch` (0, 1, ...). A sampler that shuffles draws from `gen`.
  virtual std::vector<int64_t> indices(int64_t epoch, Generator& gen) const = 0;
  // Among how many ranks each epoch's one order is dealt (DistributedSampler's num_replicas; 1
  // for a sampler that yields the whole epoch). A loader's checkpoint records it, so that a run
  // on another number of processes can tell it continues the same global batches.
  virtual int64_t replicas() const { return 1; }
};

class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch, Generator& gen) const override;

 private:
  int64_t n_;
};

// Without replacement: a permutation of 0..n-1 per epoch. With replacement: num_samples
// indices drawn uniformly and independently (gen.randint(0, n) each, in order), as
// torch.utils.data.RandomSampler(replacement=True, num_samples=...).
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t n, bool replacement = false, int64_t num_samples = -1);  // -1: n
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices(int64_t epoch, Generator& gen) const override;

 private:
  int64_t n_, num_samples_;
  bool replacement_;
};

// Each of num_replicas ranks sees a disjoint share of every epoch, with the semantics of
// torch.utils.data.distributed.DistributedSampler:
// - with shuffle, every rank permutes 0..n-1 with a generator seeded seed + epoch, so all ranks
//   agree on the order without talking to each other (the permutation is cppgrad's, not
//   torch.randperm's: same semantics, other numbers);
// - the list is cut to a multiple of num_replicas: with drop_last its tail is dropped
//   (floor(n / R) per rank), otherwise it is padded by repeating its head (ceil(n / R) per rank);
// - rank r takes positions r, r + R, r + 2R, ...
// The loader passes its epoch count, so set_epoch is only for use without a loader: indices()
// with no arguments gives the epoch set last. The loader's generator is not used.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices(int64_t epoch, Generator& gen) const override;
  std::vector<int64_t> indices() const;  // of epoch()

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  int64_t num_replicas() const { return num_replicas_; }
  int64_t replicas() const override { return num_replicas_; }
  int64_t rank() const { return rank_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }  // the padded (or cut) epoch

 private:
  int64_t n_, num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace cppgrad::data
