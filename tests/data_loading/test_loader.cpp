// DataLoader: batches and epochs, shuffling from a seed, drop_last, the same batches at any
// thread count, and a position that resumes mid-epoch exactly (through a safetensors file too).
#include <algorithm>
#include <filesystem>
#include <memory>
#include <numeric>
#include <set>

#include "helpers.h"

using namespace data_test;

namespace {

// Every batch's example ids, for `epochs` epochs, by range-for.
std::vector<std::vector<int64_t>> run_epochs(DataLoader& loader, int epochs) {
  std::vector<std::vector<int64_t>> batches;
  for (int e = 0; e < epochs; ++e)
    for (const Batch& b : loader) batches.push_back(ids_of(b));
  return batches;
}

}  // namespace

TEST_CASE("DataLoader: sequential batches, the last one short, or dropped with drop_last") {
  DataLoader loader(numbered_dataset(10), DataLoaderOptions(4));
  CHECK(loader.size() == 3);
  auto batches = run_epochs(loader, 1);
  CHECK(batches == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}});
  CHECK(loader.epoch() == 1);
  CHECK(loader.batch_index() == 0);
  DataLoader dropping(numbered_dataset(10), DataLoaderOptions(4).drop_last(true));
  CHECK(dropping.size() == 2);
  CHECK(run_epochs(dropping, 2) == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {0, 1, 2, 3}, {4, 5, 6, 7}});
  Batch first = DataLoader(numbered_dataset(3), DataLoaderOptions(2)).next();
  CHECK(first["x"].shape() == Shape{2, 2});
}

TEST_CASE("DataLoader: a batch_size past the dataset, up to INT64_MAX, is one short batch") {
  DataLoader loader(numbered_dataset(3), DataLoaderOptions(INT64_MAX));
  CHECK(loader.size() == 1);
  CHECK(run_epochs(loader, 2) == std::vector<std::vector<int64_t>>{{0, 1, 2}, {0, 1, 2}});
  CHECK(DataLoader(numbered_dataset(3), DataLoaderOptions(INT64_MAX).drop_last(true)).size() == 0);
}

TEST_CASE("DataLoader: with shuffle every epoch is a permutation, each a different one") {
  for (bool drop_last : {false, true}) {
    DataLoader loader(numbered_dataset(23), DataLoaderOptions(5).shuffle(true).seed(3).drop_last(drop_last));
    std::set<std::vector<int64_t>> orders;
    for (int epoch = 0; epoch < 6; ++epoch) {
      std::vector<int64_t> seen;
      for (const Batch& b : loader) {
        auto ids = ids_of(b);
        seen.insert(seen.end(), ids.begin(), ids.end());
      }
      CHECK(static_cast<int64_t>(seen.size()) == (drop_last ? 20 : 23));
      orders.insert(seen);
      std::sort(seen.begin(), seen.end());
      CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());  // no index twice
      if (!drop_last) {
        std::vector<int64_t> all(23);
        std::iota(all.begin(), all.end(), int64_t{0});
        CHECK(seen == all);
      }
    }
    CHECK(orders.size() == 6);
  }
}

TEST_CASE("DataLoader: the same seed gives the same batches on 1 and 2 threads, another seed others") {
  const int before = get_num_threads();
  auto batches_at = [](int threads, uint64_t seed) {
    set_num_threads(threads);
    DataLoader loader(numbered_dataset(40), DataLoaderOptions(6).shuffle(true).seed(seed));
    return run_epochs(loader, 3);
  };
  const auto one = batches_at(1, 9), two = batches_at(2, 9);
  set_num_threads(before);
  CHECK(one == two);
  CHECK(batches_at(2, 10) != one);
  set_num_threads(before);
  // Without a seed the loader draws one from default_generator(): manual_seed fixes it.
  manual_seed(5);
  DataLoader a(numbered_dataset(40), DataLoaderOptions(6).shuffle(true));
  manual_seed(5);
  DataLoader b(numbered_dataset(40), DataLoaderOptions(6).shuffle(true));
  CHECK(run_epochs(a, 2) == run_epochs(b, 2));
}

TEST_CASE("DataLoader: next() rolls into the next epoch, a for that begins mid-epoch begins the next one") {
  DataLoader loader(numbered_dataset(6), DataLoaderOptions(4));
  CHECK(ids_of(loader.next()) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(ids_of(loader.next()) == std::vector<int64_t>{4, 5});
  CHECK(loader.epoch() == 1);
  CHECK(ids_of(loader.next()) == std::vector<int64_t>{0, 1, 2, 3});
  // As PyTorch's iter(loader): the rest of epoch 1 ({4, 5}) is left, the for is epoch 2 whole.
  CHECK(run_epochs(loader, 1) == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5}});
  CHECK(loader.epoch() == 3);
}

TEST_CASE("DataLoader: a second for after a break is a new epoch with a new shuffle, prefetching or not") {
  for (int64_t prefetch : {0, 2}) {
    CAPTURE(prefetch);
    auto options = DataLoaderOptions(3).shuffle(true).seed(7).prefetch(prefetch);
    DataLoader straight(numbered_dataset(12), options);
    const auto epochs = run_epochs(straight, 3);  // 4 batches per epoch
    DataLoader loader(numbered_dataset(12), options);
    std::vector<std::vector<int64_t>> first;
    for (const Batch& b : loader) {
      first.push_back(ids_of(b));
      if (first.size() == 2) break;
    }
    CHECK(first == std::vector<std::vector<int64_t>>(epochs.begin(), epochs.begin() + 2));
    CHECK(loader.epoch() == 0);
    // The second for is epoch 1 whole, the very order an uninterrupted run gives its epoch 1.
    const auto second = run_epochs(loader, 1);
    CHECK(second == std::vector<std::vector<int64_t>>(epochs.begin() + 4, epochs.begin() + 8));
    CHECK(second != std::vector<std::vector<int64_t>>(epochs.begin(), epochs.begin() + 4));
    CHECK(loader.epoch() == 2);
    CHECK(run_epochs(loader, 1) == std::vector<std::vector<int64_t>>(epochs.begin() + 8, epochs.end()));
  }
}

TEST_CASE("DataLoader: the first for after load_state_dict continues the loaded epoch, the next is whole") {
  for (int64_t prefetch : {0, 2}) {
    CAPTURE(prefetch);
    auto options = DataLoaderOptions(3).shuffle(true).seed(5).prefetch(prefetch);
    DataLoader straight(numbered_dataset(12), options);
    const auto epochs = run_epochs(straight, 3);
    // A run checkpoints inside its second epoch's loop, after batch 1 of it, and stops.
    DataLoader run(numbered_dataset(12), options);
    run_epochs(run, 1);
    NamedTensors checkpoint;
    for (const Batch& b : run) {
      (void)b;
      if (run.batch_index() == 2) {
        checkpoint = run.state_dict();
        break;
      }
    }
    DataLoader resumed(numbered_dataset(12), DataLoaderOptions(3).shuffle(true).seed(99).prefetch(prefetch));
    resumed.load_state_dict(checkpoint);
    CHECK(run_epochs(resumed, 1) == std::vector<std::vector<int64_t>>(epochs.begin() + 6, epochs.begin() + 8));
    CHECK(run_epochs(resumed, 1) == std::vector<std::vector<int64_t>>(epochs.begin() + 8, epochs.end()));
    // A batch taken with next() after the load is part of the resumed epoch; a for after it
    // begins the next epoch, as after any batch taken.
    DataLoader peeked(numbered_dataset(12), options);
    peeked.load_state_dict(checkpoint);
    CHECK(ids_of(peeked.next()) == epochs[6]);
    CHECK(run_epochs(peeked, 1) == std::vector<std::vector<int64_t>>(epochs.begin() + 8, epochs.end()));
  }
}

TEST_CASE("DataLoader: resuming from state_dict after any batch continues exactly, prefetching or not") {
  for (int64_t prefetch : {0, 2}) {
    CAPTURE(prefetch);
    auto options = DataLoaderOptions(4).shuffle(true).seed(21).prefetch(prefetch);
    DataLoader straight(numbered_dataset(18), options);
    std::vector<std::vector<int64_t>> expected;
    std::vector<NamedTensors> states;  // the state after each batch
    for (int i = 0; i < 15; ++i) {  // 5 batches per epoch: three epochs
      expected.push_back(ids_of(straight.next()));
      states.push_back(straight.state_dict());
    }
    for (size_t stop = 0; stop + 1 < expected.size(); ++stop) {
      DataLoader resumed(numbered_dataset(18), DataLoaderOptions(4).shuffle(true).seed(999).prefetch(prefetch));
      resumed.load_state_dict(states[stop]);
      CHECK(resumed.epoch() == static_cast<int64_t>((stop + 1) / 5));
      CHECK(resumed.batch_index() == static_cast<int64_t>((stop + 1) % 5));
      for (size_t i = stop + 1; i < expected.size(); ++i) CHECK(ids_of(resumed.next()) == expected[i]);
    }
  }
}

TEST_CASE("DataLoader: the state goes into a safetensors checkpoint and back") {
  DataLoader loader(numbered_dataset(30), DataLoaderOptions(4).shuffle(true).seed(2));
  for (int i = 0; i < 11; ++i) loader.next();  // into the second epoch
  const auto path = std::filesystem::temp_directory_path() / "cppgrad_test_loader_state.safetensors";
  nn::save_safetensors(path.string(), loader.state_dict());
  DataLoader resumed(numbered_dataset(30), DataLoaderOptions(4).shuffle(true).seed(2));
  resumed.load_state_dict(nn::load_safetensors(path.string()).tensors);
  std::filesystem::remove(path);
  for (int i = 0; i < 12; ++i) CHECK(ids_of(resumed.next()) == ids_of(loader.next()));
}

TEST_CASE("DataLoader: bad options and states are refused with clear errors") {
  auto ds = numbered_dataset(5);
  CHECK_THROWS_WITH_AS(DataLoader(ds, DataLoaderOptions(0)), "DataLoader: batch_size must be >= 1, got 0", Error);
  CHECK_THROWS_AS(DataLoader(ds, DataLoaderOptions(2).shuffle(true), stack_collate, std::make_shared<SequentialSampler>(5)),
                  Error);
  CHECK_THROWS_AS(DataLoader(nullptr), Error);
  DataLoader empty(ds, DataLoaderOptions(8).drop_last(true));
  CHECK(empty.size() == 0);
  CHECK_THROWS_WITH_AS(empty.next(), "DataLoader: an epoch has no batches (5 examples per epoch, batch_size 8, drop_last)",
                       Error);
  int iterations = 0;
  for (const Batch& b : empty) iterations += static_cast<int>(b.size());
  CHECK(iterations == 0);
  DataLoader loader(ds, DataLoaderOptions(2));
  DataLoader other(ds, DataLoaderOptions(3));
  CHECK_THROWS_WITH_AS(other.load_state_dict(loader.state_dict()),
                       "DataLoader::load_state_dict: the state is of a loader of batch_size 2 over 5 samples per epoch, "
                       "this one has batch_size 3 and 5: it would not resume the same batches",
                       Error);
  NamedTensors missing = loader.state_dict();
  missing.erase(missing.begin());
  CHECK_THROWS_AS(loader.load_state_dict(missing), Error);
  NamedTensors past_end = loader.state_dict();
  past_end[1].second = tensor(std::vector<int64_t>{3}, {});  // "batch" 3 of 3
  CHECK_THROWS_WITH_AS(loader.load_state_dict(past_end),
                       "DataLoader::load_state_dict: batch 3 out of range for 3 batches per epoch", Error);
}

TEST_CASE("DataLoader with a DistributedSampler: the ranks' batches split every epoch between them") {
  std::vector<int64_t> all;
  for (int64_t rank = 0; rank < 3; ++rank) {
    DataLoader loader(numbered_dataset(12), DataLoaderOptions(2), stack_collate,
                      std::make_shared<DistributedSampler>(12, 3, rank, true, 4));
    CHECK(loader.size() == 2);
    for (const Batch& b : loader) {
      auto ids = ids_of(b);
      all.insert(all.end(), ids.begin(), ids.end());
    }
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(12);
  std::iota(expected.begin(), expected.end(), int64_t{0});
  CHECK(all == expected);
}

TEST_CASE("DataLoader with a DistributedSampler: a checkpoint of 2 ranks resumes the same global batches on 1 or 4") {
  constexpr int64_t n = 27, global_batch = 4;  // 6 global batches an epoch at every count
  // The loaders of `world` ranks, each with its share of the global batch.
  auto loaders = [&](int64_t world) {
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int64_t rank = 0; rank < world; ++rank)
      ranks.push_back(std::make_unique<DataLoader>(numbered_dataset(n), DataLoaderOptions(global_batch / world).drop_last(true),
                                                   stack_collate,
                                                   std::make_shared<DistributedSampler>(n, world, rank, true, 9, true)));
    return ranks;
  };
  // The next global batch: rank r's row i is position r + world·i of it.
  auto next_global = [](std::vector<std::unique_ptr<DataLoader>>& ranks) {
    const auto world = static_cast<int64_t>(ranks.size());
    std::vector<int64_t> batch(static_cast<size_t>(global_batch));
    for (int64_t r = 0; r < world; ++r) {
      const std::vector<int64_t> ids = ids_of(ranks[static_cast<size_t>(r)]->next());
      for (size_t i = 0; i < ids.size(); ++i) batch[static_cast<size_t>(r + world * static_cast<int64_t>(i))] = ids[i];
    }
    return batch;
  };
  auto straight = loaders(2);
  for (int i = 0; i < 4; ++i) next_global(straight);
  const NamedTensors checkpoint = straight[0]->state_dict();  // every rank's position is the same
  CHECK(straight[1]->batch_index() == straight[0]->batch_index());
  std::vector<std::vector<int64_t>> expected;  // the rest of the epoch and into the next
  for (int i = 0; i < 5; ++i) expected.push_back(next_global(straight));
  for (const int64_t world : {1, 2, 4}) {
    CAPTURE(world);
    auto resumed = loaders(world);
    for (auto& loader : resumed) loader->load_state_dict(checkpoint);
    for (const auto& batch : expected) CHECK(next_global(resumed) == batch);
  }
  // Another global batch, or another number of batches an epoch, would not continue the run.
  DataLoader wider(numbered_dataset(n), DataLoaderOptions(4).drop_last(true), stack_collate,
                   std::make_shared<DistributedSampler>(n, 4, 0, true, 9, true));
  CHECK_THROWS_WITH_AS(wider.load_state_dict(checkpoint),
                       "DataLoader::load_state_dict: the state is of 2 replicas of batch_size 2 (6 batches an epoch), "
                       "this loader is one of 4 of batch_size 4 (1 batches): the global batches would not be the same",
                       Error);
  // A state without "replicas" is not a loader's state of this format: refused by name.
  NamedTensors without = checkpoint;
  without.pop_back();
  auto same = loaders(2);
  CHECK_THROWS_WITH_AS(same[0]->load_state_dict(without), doctest::Contains("replicas"), Error);
}
