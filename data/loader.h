// DataLoader: batches of a dataset, shuffled per epoch from a seed, optionally prepared ahead on
// a background thread; its position is a state_dict, so a run resumes mid-epoch exactly.
//
//   auto dataset = std::make_shared<data::TensorDataset>(data::NamedTensors{{"x", x}, {"y", y}});
//   data::DataLoader loader(dataset, data::DataLoaderOptions(32).shuffle(true).seed(0).prefetch(2));
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (const data::Batch& batch : loader) train_step(batch["x"], batch["y"]);   // one epoch
//
//   Batch b = loader.next();   // or one batch at a time, rolling into the next epoch at the end
//
// Each `for` over a loader is an epoch of its own, as each `for` over a PyTorch DataLoader: one
// that begins mid-epoch (after a `break`, or batches taken with next()) leaves the rest of that
// epoch and begins the next, with its own shuffle. The one exception is a resume: the first
// `for` after load_state_dict continues the loaded epoch from the loaded batch.
//
// The position is (epoch, batches taken in it, the generator's state when the epoch began): an
// epoch's order is made again from that state and the batches already taken are skipped. It
// counts the batches handed to the caller, never those prepared ahead, so a checkpoint taken
// with prefetch on resumes exactly too.
//
// Prefetch: with prefetch(k) > 0 a background thread prepares up to k batches ahead into a
// bounded queue, sleeping (never spinning) while it is full. It runs its OpenMP loops on one
// thread, leaving the cores to the training step. An exception in the dataset or the collate
// reaches the caller of next() as cppgrad::Error with its message; the thread is stopped and
// joined whenever the loader is destroyed, reloaded or fails, so leaving a loop early (break, an
// exception) leaves no thread behind. A dataset read from that thread must not draw from
// default_generator(), which the training loop draws from: give it a Generator of its own.
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>

#include "../tensor/options.h"
#include "collate.h"
#include "dataset.h"
#include "sampler.h"

namespace cppgrad::data {

struct DataLoaderOptions {
  explicit DataLoaderOptions(int64_t batch_size = 1) : batch_size_(batch_size) {}
  CPPGRAD_ARG(int64_t, batch_size, 1)
  // A fresh permutation every epoch (without a sampler of one's own).
  CPPGRAD_ARG(bool, shuffle, false)
  // Leave out the last batch of an epoch when it is smaller than batch_size.
  CPPGRAD_ARG(bool, drop_last, false)
  // The loader's generator; unset, its seed is drawn from default_generator() at construction
  // (as PyTorch's loader draws from the global generator), so manual_seed() fixes it too.
  CPPGRAD_ARG(std::optional<uint64_t>, seed, std::nullopt)
  // Batches prepared ahead on a background thread; 0 prepares each on the calling thread.
  CPPGRAD_ARG(int64_t, prefetch, 0)
};

class DataLoader {
 public:
  // sampler: which indices each epoch visits (default: SequentialSampler, or RandomSampler
  // with shuffle, which may not be combined with a sampler of one's own).
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = DataLoaderOptions(),
             Collate collate = stack_collate, std::shared_ptr<const Sampler> sampler = nullptr);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch.
  int64_t size() const;
  // The next batch; after an epoch's last batch the next epoch begins. Throws Error when an
  // epoch has no batches, or with the message of an exception thrown while preparing the batch.
  Batch next();

  // Where the loader stands: the epoch, and how many of its batches were handed out.
  int64_t epoch() const;
  int64_t batch_index() const;

  // The position as tensors ("epoch", "batch", "generator.*" in Generator::state_dict's layout,
  // and the batch and dataset sizes, which load_state_dict checks: another size would not resume
  // the same batches). Load refuses an entry of any other name.
  //
  // The position counts global batches when a DistributedSampler deals each epoch to ranks:
  // "replicas" records among how many, and a loader of another count loads the state when its
  // global batch (batch_size × replicas) and its batches per epoch are the state's, so that a
  // run resumed on another number of processes takes the same global batches on. A state
  // without "replicas" is refused.
  NamedTensors state_dict() const;
  void load_state_dict(const NamedTensors& state);

  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

  // Iterating a loader gives one whole epoch: the next one when the loader stands mid-epoch, except
  // right after load_state_dict, where it gives the rest of the loaded epoch.
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    const Batch& operator*() const { return *current_; }
    const Batch* operator->() const { return &*current_; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader);
    DataLoader* loader_ = nullptr;
    int64_t epoch_ = 0;
    std::optional<Batch> current_;
  };
  Iterator begin();
  std::default_sentinel_t end() { return {}; }

  struct Internals;  // the producer and the background thread, in loader.cpp

 private:
  void stop_background();
  // Leaves the rest of the current epoch: the position becomes the start of the next one.
  void skip_rest_of_epoch();

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  Collate collate_;
  std::shared_ptr<const Sampler> sampler_;
  std::unique_ptr<Internals> internals_;
};

}  // namespace cppgrad::data
