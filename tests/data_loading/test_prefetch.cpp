// The prefetching loader: the same batches as the synchronous one, its thread gone whenever the
// loop ends (early, by an exception, by a failing dataset), errors delivered as cppgrad::Error,
// and data preparation on one OpenMP thread.
#include <omp.h>

#include "helpers.h"

using namespace data_test;

TEST_CASE("prefetch: the same batches as the synchronous loader, at any queue depth") {
  DataLoader sync(numbered_dataset(37), DataLoaderOptions(5).shuffle(true).seed(8));
  std::vector<Batch> expected;
  for (int i = 0; i < 24; ++i) expected.push_back(sync.next());  // three epochs and a bit
  for (int64_t depth : {1, 2, 5}) {
    DataLoader ahead(numbered_dataset(37), DataLoaderOptions(5).shuffle(true).seed(8).prefetch(depth));
    for (const Batch& b : expected) CHECK(same_batch(ahead.next(), b));
  }
}

TEST_CASE("prefetch: leaving a loop after any batch, or destroying a loader, leaves no thread behind") {
  const int threads_before = thread_count();
  REQUIRE(threads_before > 0);
  // Many short loops: break after batch k, with the producer ahead, blocked on a full queue or
  // in the middle of a batch.
  for (int round = 0; round < 200; ++round) {
    DataLoader loader(numbered_dataset(20), DataLoaderOptions(3).shuffle(true).seed(round).prefetch(1 + round % 3));
    int taken = 0;
    for (const Batch& b : loader) {
      CHECK(b.size() == 2);
      if (++taken > round % 8) break;
    }
  }
  CHECK(thread_count() == threads_before);
  // An exception thrown by the training loop itself unwinds through the loader.
  for (int round = 0; round < 50; ++round) {
    try {
      DataLoader loader(numbered_dataset(20), DataLoaderOptions(2).prefetch(2));
      for (const Batch& b : loader)
        if (ids_of(b)[0] >= 2 * (round % 5)) throw std::runtime_error("the step failed");
    } catch (const std::runtime_error&) {
    }
  }
  CHECK(thread_count() == threads_before);
}

TEST_CASE("prefetch: an exception in the dataset reaches the loop as cppgrad::Error with its message") {
  const int threads_before = thread_count();
  for (int64_t prefetch : {0, 1, 3}) {
    CAPTURE(prefetch);
    DataLoader loader(std::make_shared<FailingDataset>(10, 5), DataLoaderOptions(2).prefetch(prefetch));
    CHECK(ids_of(loader.next()) == std::vector<int64_t>{0, 1});
    CHECK(ids_of(loader.next()) == std::vector<int64_t>{2, 3});
    CHECK_THROWS_WITH_AS(loader.next(), "DataLoader: preparing batch 2 of epoch 0: example 5 is corrupt", Error);
    // The position has not moved: asked again, it fails again (the dataset is deterministic).
    CHECK(loader.batch_index() == 2);
    CHECK_THROWS_AS(loader.next(), Error);
  }
  // Many loaders failing at every position, including while batches are queued ahead of them.
  for (int64_t bad = 0; bad < 10; ++bad)
    for (int64_t prefetch : {1, 2}) {
      DataLoader loader(std::make_shared<FailingDataset>(10, bad), DataLoaderOptions(1).prefetch(prefetch));
      int64_t got = 0;
      try {
        while (true) {
          loader.next();
          ++got;
        }
      } catch (const Error& e) {
        CHECK(std::string(e.what()).find("is corrupt") != std::string::npos);
      }
      CHECK(got == bad);
    }
  CHECK(thread_count() == threads_before);
}

TEST_CASE("prefetch: a collate that throws, and a non-standard exception, are reported too") {
  auto throwing = [](const std::vector<Example>&) -> Batch { throw Error("collate: lengths differ"); };
  DataLoader loader(numbered_dataset(4), DataLoaderOptions(2).prefetch(2), throwing);
  CHECK_THROWS_WITH_AS(loader.next(), "DataLoader: preparing batch 0 of epoch 0: collate: lengths differ", Error);
  auto odd = [](const std::vector<Example>&) -> Batch { throw 42; };
  DataLoader odd_loader(numbered_dataset(4), DataLoaderOptions(2).prefetch(1), odd);
  CHECK_THROWS_WITH_AS(odd_loader.next(),
                       "DataLoader: preparing batch 0 of epoch 0: an exception that is not a std::exception", Error);
}

TEST_CASE("prefetch: the background thread prepares data with one OpenMP thread, leaving the caller's setting") {
  struct ThreadsSeen : Dataset {
    int64_t size() const override { return 4; }
    Example get(int64_t) const override {
      return {{"threads", tensor(std::vector<int64_t>{omp_get_max_threads()}, {})}};
    }
  };
  const int before = get_num_threads();
  set_num_threads(2);
  DataLoader loader(std::make_shared<ThreadsSeen>(), DataLoaderOptions(2).prefetch(2));
  CHECK(loader.next()["threads"].to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(get_num_threads() == 2);
  DataLoader inline_loader(std::make_shared<ThreadsSeen>(), DataLoaderOptions(2));
  // Inline, the dataset sees the caller's own OpenMP setting (1 in deterministic mode, where
  // cppgrad's regions name their count and OpenMP's default stays 1: runtime/parallel.cpp).
  const int64_t callers = omp_get_max_threads();
  CHECK(inline_loader.next()["threads"].to_vector<int64_t>() == std::vector<int64_t>{callers, callers});
  set_num_threads(before);
}
