#include "data/loader.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <stop_token>
#include <thread>

#include <omp.h>

namespace cppgrad::data {

namespace {

// ceil(samples / batch), or with drop_last floor: a batch larger than the epoch is one short batch.
// Not (samples + batch - 1) / batch, which overflows for a batch near INT64_MAX.
int64_t batches_in_epoch(int64_t samples, int64_t batch, bool drop_last) {
  return samples / batch + (!drop_last && samples % batch != 0 ? 1 : 0);
}

// Where a loader stands: `batch` batches of epoch `epoch` were handed out, and the epoch's order
// was drawn from a generator in state `epoch_start`.
struct Position {
  int64_t epoch = 0;
  int64_t batch = 0;
  Generator::State epoch_start{};
};

// What the loader needs to make a batch, shared by the calling thread and the background one.
struct Source {
  std::shared_ptr<const Dataset> dataset;
  std::shared_ptr<const Sampler> sampler;
  Collate collate;
  int64_t batch_size = 1;
  int64_t batches_per_epoch = 0;
};

// One batch, with the position it was made at; or the exception that making it threw.
struct Prepared {
  Batch batch;
  int64_t epoch = 0, index = 0;
  Generator::State epoch_start{}, next_epoch_start{};
  std::exception_ptr error;
};

// Makes the batches one after the other from a position, crossing into the next epoch at the
// end of each. Only the thread that owns it calls next().
class Producer {
 public:
  Producer(Source source, const Position& start) : source_(std::move(source)), position_(start) {}

  // Never throws: an exception becomes the `error` of what it returns.
  Prepared next() {
    Prepared out;
    out.epoch = position_.epoch;
    out.index = position_.batch;
    out.epoch_start = position_.epoch_start;
    try {
      if (!indices_) draw_epoch();
      out.next_epoch_start = next_epoch_start_;
      const auto begin = static_cast<size_t>(position_.batch * source_.batch_size);
      const size_t end = std::min(begin + static_cast<size_t>(source_.batch_size), indices_->size());
      const int64_t n = source_.dataset->size();
      std::vector<Example> examples;
      examples.reserve(end - begin);
      for (size_t i = begin; i < end; ++i) {
        const int64_t index = (*indices_)[i];
        CPPGRAD_CHECK(index >= 0 && index < n, "the sampler gave index {} for a dataset of {} examples", index, n);
        examples.push_back(source_.dataset->get(index));
      }
      out.batch = source_.collate(examples);
    } catch (...) {
      out.error = std::current_exception();
      return out;
    }
    if (++position_.batch == source_.batches_per_epoch) {
      ++position_.epoch;
      position_.batch = 0;
      position_.epoch_start = next_epoch_start_;
      indices_.reset();
    }
    return out;
  }

 private:
  void draw_epoch() {
    Generator gen;
    gen.set_state(position_.epoch_start);
    indices_ = source_.sampler->indices(position_.epoch, gen);
    next_epoch_start_ = gen.state();
    CPPGRAD_CHECK(static_cast<int64_t>(indices_->size()) == source_.sampler->size(),
                  "the sampler gave {} indices for epoch {}, but its size() is {}", indices_->size(), position_.epoch,
                  source_.sampler->size());
  }

  Source source_;
  Position position_;
  std::optional<std::vector<int64_t>> indices_;  // of position_.epoch, once drawn
  Generator::State next_epoch_start_{};
};

// A background thread running a Producer into a queue of at most `capacity` batches.
class Prefetcher {
 public:
  Prefetcher(Producer producer, size_t capacity)
      : capacity_(capacity), thread_([this, producer = std::move(producer)](std::stop_token stop) mutable {
          run(stop, producer);
        }) {}
  // ~jthread asks the thread to stop and joins it: a thread waiting for room wakes at once; one
  // inside the dataset finishes its batch first.
  ~Prefetcher() = default;

  Prepared pop() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !queue_.empty(); });  // the thread always pushes, or an error
    Prepared item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    changed_.notify_all();
    return item;
  }

 private:
  void run(const std::stop_token& stop, Producer& producer) {
    // The training step's loops use the cores; data preparation runs its own on this thread alone.
    // (OpenMP's thread count is per thread: this leaves the caller's setting as it was.)
    omp_set_num_threads(1);
    while (!stop.stop_requested()) {
      Prepared item = producer.next();
      const bool failed = item.error != nullptr;
      {
        std::unique_lock lock(mutex_);
        if (!changed_.wait(lock, stop, [&] { return queue_.size() < capacity_; })) return;  // stop requested
        queue_.push_back(std::move(item));
      }
      changed_.notify_all();
      if (failed) return;  // the caller rethrows it and discards this prefetcher
    }
  }

  std::mutex mutex_;
  std::condition_variable_any changed_;
  std::deque<Prepared> queue_;
  size_t capacity_;
  std::jthread thread_;  // last: destroyed (stopped and joined) before the queue it fills
};

[[noreturn]] void throw_as_error(const Prepared& failed) {
  const std::string where = fmt::format("DataLoader: preparing batch {} of epoch {}", failed.index, failed.epoch);
  try {
    std::rethrow_exception(failed.error);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  } catch (...) {
    throw Error(where + ": an exception that is not a std::exception");
  }
}

Tensor int_scalar(int64_t value) { return tensor(std::vector<int64_t>{value}, {}); }

}  // namespace

struct DataLoader::Internals {
  Source source;
  Position position;
  std::optional<Producer> inline_producer;  // prefetch 0: makes batches on the calling thread
  std::unique_ptr<Prefetcher> prefetcher;   // prefetch k: the background thread, while it runs
  bool just_loaded = false;                 // no batch taken since load_state_dict: a `for` continues
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options, Collate collate,
                       std::shared_ptr<const Sampler> sampler)
    : dataset_(std::move(dataset)), options_(options), collate_(std::move(collate)), sampler_(std::move(sampler)) {
  CPPGRAD_CHECK(dataset_ != nullptr, "DataLoader: the dataset is null");
  CPPGRAD_CHECK(static_cast<bool>(collate_), "DataLoader: the collate function is empty");
  CPPGRAD_CHECK(options_.batch_size() >= 1, "DataLoader: batch_size must be >= 1, got {}", options_.batch_size());
  CPPGRAD_CHECK(options_.prefetch() >= 0, "DataLoader: prefetch must be >= 0, got {}", options_.prefetch());
  CPPGRAD_CHECK(!(sampler_ && options_.shuffle()),
                "DataLoader: shuffle and a sampler of one's own exclude each other (shuffle with RandomSampler)");
  if (!sampler_ && options_.shuffle()) sampler_ = std::make_shared<RandomSampler>(dataset_->size());
  if (!sampler_) sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  internals_ = std::make_unique<Internals>();
  const int64_t per_epoch = sampler_->size(), batch = options_.batch_size();
  internals_->source = {dataset_, sampler_, collate_, batch, batches_in_epoch(per_epoch, batch, options_.drop_last())};
  const uint64_t seed = options_.seed() ? *options_.seed() : default_generator().next_u64();
  internals_->position.epoch_start = Generator(seed).state();
}

DataLoader::~DataLoader() { stop_background(); }

void DataLoader::stop_background() {
  internals_->prefetcher.reset();
  internals_->inline_producer.reset();
}

int64_t DataLoader::size() const { return internals_->source.batches_per_epoch; }
int64_t DataLoader::epoch() const { return internals_->position.epoch; }
int64_t DataLoader::batch_index() const { return internals_->position.batch; }

Batch DataLoader::next() {
  Internals& in = *internals_;
  CPPGRAD_CHECK(size() > 0, "DataLoader: an epoch has no batches ({} examples per epoch, batch_size {}{})",
                sampler_->size(), options_.batch_size(), options_.drop_last() ? ", drop_last" : "");
  in.just_loaded = false;
  Prepared item;
  if (options_.prefetch() > 0) {
    if (!in.prefetcher)
      in.prefetcher = std::make_unique<Prefetcher>(Producer(in.source, in.position),
                                                   static_cast<size_t>(options_.prefetch()));
    item = in.prefetcher->pop();
  } else {
    if (!in.inline_producer) in.inline_producer.emplace(in.source, in.position);
    item = in.inline_producer->next();
  }
  if (item.error) {
    stop_background();  // the next call starts again from the position, which has not moved
    throw_as_error(item);
  }
  Position& p = in.position;
  p.epoch = item.epoch;
  p.batch = item.index + 1;
  p.epoch_start = item.epoch_start;
  if (p.batch == size()) {
    ++p.epoch;
    p.batch = 0;
    p.epoch_start = item.next_epoch_start;
  }
  return std::move(item.batch);
}

NamedTensors DataLoader::state_dict() const {
  const Position& p = internals_->position;
  Generator epoch_start;  // the generator as it stood when the epoch began
  epoch_start.set_state(p.epoch_start);
  NamedTensors state = {{"epoch", int_scalar(p.epoch)}, {"batch", int_scalar(p.batch)}};
  for (auto& entry : with_prefix("generator.", epoch_start.state_dict())) state.push_back(std::move(entry));
  state.emplace_back("batch_size", int_scalar(options_.batch_size()));
  state.emplace_back("samples_per_epoch", int_scalar(sampler_->size()));
  state.emplace_back("replicas", int_scalar(sampler_->replicas()));
  return state;
}

void DataLoader::load_state_dict(const NamedTensors& state) {
  StateReader in(state, "DataLoader::load_state_dict");
  const int64_t batch_size = in.int64("batch_size", Bounds::at_least(1)), samples = in.int64("samples_per_epoch", Bounds::at_least(0));
  const int64_t replicas = in.int64("replicas", Bounds::at_least(1));
  if (replicas == sampler_->replicas()) {
    CPPGRAD_CHECK(batch_size == options_.batch_size() && samples == sampler_->size(),
                  "DataLoader::load_state_dict: the state is of a loader of batch_size {} over {} samples per epoch, "
                  "this one has batch_size {} and {}: it would not resume the same batches",
                  batch_size, samples, options_.batch_size(), sampler_->size());
  } else {
    // Each epoch's one order dealt among another number of ranks: the same global batches
    // follow when the global batch and the batches an epoch are the same.
    const int64_t batches = batches_in_epoch(samples, batch_size, options_.drop_last());
    // A global batch past the int64 range is no loader's: the products are refused, not wrapped.
    int64_t theirs = 0, ours = 0;
    const bool same_global = !__builtin_mul_overflow(batch_size, replicas, &theirs) &&
                             !__builtin_mul_overflow(options_.batch_size(), sampler_->replicas(), &ours) && theirs == ours;
    CPPGRAD_CHECK(same_global && batches == size(),
                  "DataLoader::load_state_dict: the state is of {} replicas of batch_size {} ({} batches an epoch), "
                  "this loader is one of {} of batch_size {} ({} batches): the global batches would not be the same",
                  replicas, batch_size, batches, sampler_->replicas(), options_.batch_size(), size());
  }
  Position p;
  p.epoch = in.int64("epoch");
  p.batch = in.int64("batch");
  CPPGRAD_CHECK(p.epoch >= 0, "DataLoader::load_state_dict: epoch {} is negative", p.epoch);
  CPPGRAD_CHECK(p.batch >= 0 && (p.batch < size() || p.batch == 0),
                "DataLoader::load_state_dict: batch {} out of range for {} batches per epoch", p.batch, size());
  Generator epoch_start;
  in.load_part("generator.", [&](const NamedTensors& part) { epoch_start.load_state_dict(part); });
  in.finish();
  p.epoch_start = epoch_start.state();
  stop_background();
  internals_->position = p;
  internals_->just_loaded = true;
}

void DataLoader::skip_rest_of_epoch() {
  stop_background();  // batches prepared ahead belong to the epoch being left
  Position& p = internals_->position;
  // The next epoch's order is drawn from the generator as this epoch's draw left it.
  Generator gen;
  gen.set_state(p.epoch_start);
  sampler_->indices(p.epoch, gen);
  p = Position{p.epoch + 1, 0, gen.state()};
}

DataLoader::Iterator DataLoader::begin() {
  if (internals_->position.batch > 0 && !internals_->just_loaded) skip_rest_of_epoch();
  internals_->just_loaded = false;
  return Iterator(this);
}

DataLoader::Iterator::Iterator(DataLoader* loader) : loader_(loader), epoch_(loader->epoch()) {
  if (loader_->size() > 0) current_ = loader_->next();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  current_.reset();
  if (loader_->epoch() == epoch_) current_ = loader_->next();
  return *this;
}

}  // namespace cppgrad::data
