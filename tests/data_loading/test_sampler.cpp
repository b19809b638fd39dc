// Samplers: permutations, draws with replacement, and the distributed shares of PyTorch's
// DistributedSampler (disjoint, padded by repeating or cut with drop_last, seeded per epoch).
#include <algorithm>
#include <numeric>
#include <set>

#include "helpers.h"

using namespace data_test;

static bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  std::vector<int64_t> range(static_cast<size_t>(n));
  std::iota(range.begin(), range.end(), int64_t{0});
  return v == range;
}

TEST_CASE("RandomSampler: each epoch a permutation, a different one, the same for the same generator state") {
  RandomSampler sampler(50);
  Generator gen(7);
  std::set<std::vector<int64_t>> seen;
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    auto order = sampler.indices(epoch, gen);
    CHECK(is_permutation_of_range(order, 50));
    seen.insert(order);
  }
  CHECK(seen.size() == 5);
  Generator a(3), b(3);
  CHECK(sampler.indices(0, a) == sampler.indices(0, b));
  CHECK(SequentialSampler(4).indices(9, a) == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE("RandomSampler with replacement: num_samples draws of gen.randint(0, n), in order") {
  RandomSampler sampler(10, /*replacement=*/true, 25);
  CHECK(sampler.size() == 25);
  Generator gen(1), same(1);
  const auto drawn = sampler.indices(0, gen);
  REQUIRE(drawn.size() == 25);
  for (int64_t index : drawn) CHECK(index == same.randint(0, 10));
  CHECK_THROWS_AS(RandomSampler(10, false, 5), Error);  // a permutation has all 10
  CHECK_THROWS_AS(RandomSampler(0, true, 5), Error);
  // An epoch's indices beyond the machine's memory: refused when made, not when drawn (once an
  // allocation-size abort under ASan).
  CHECK_THROWS_WITH_AS(RandomSampler(5, true, int64_t{1} << 50),
                       doctest::Contains("RandomSampler: num_samples 1125899906842624 needs"), Error);
}

TEST_CASE("DistributedSampler: disjoint shares covering the epoch, padded by repeating or cut by drop_last") {
  for (int64_t n : {1, 2, 7, 10, 16}) {
    for (int64_t replicas : {1, 2, 3, 4}) {
      for (bool drop_last : {false, true}) {
        for (bool shuffle : {false, true}) {
          CAPTURE(n);
          CAPTURE(replicas);
          CAPTURE(drop_last);
          CAPTURE(shuffle);
          std::vector<int64_t> all;
          const int64_t per_rank = drop_last ? n / replicas : (n + replicas - 1) / replicas;
          for (int64_t rank = 0; rank < replicas; ++rank) {
            DistributedSampler sampler(n, replicas, rank, shuffle, /*seed=*/5, drop_last);
            auto mine = sampler.indices(3, *std::make_unique<Generator>());
            CHECK(static_cast<int64_t>(mine.size()) == per_rank);
            CHECK(sampler.size() == per_rank);
            all.insert(all.end(), mine.begin(), mine.end());
          }
          std::multiset<int64_t> counts(all.begin(), all.end());
          if (drop_last) {
            // Distinct indices: nothing is repeated, the tail is dropped.
            CHECK(std::set<int64_t>(all.begin(), all.end()).size() == all.size());
          } else {
            // Every index, and the padding repeats the list's head: no index more than
            // ceil(total / n) times.
            for (int64_t i = 0; i < n; ++i) CHECK(counts.count(i) >= 1);
            const int64_t most = (per_rank * replicas + n - 1) / n;
            for (int64_t i = 0; i < n; ++i) CHECK(static_cast<int64_t>(counts.count(i)) <= most);
          }
        }
      }
    }
  }
}

TEST_CASE("DistributedSampler: PyTorch's order without shuffle, rank r takes r, r + R, ..., padding from the start") {
  Generator unused;
  // 10 indices over 4 ranks: padded to 12 with 0, 1; rank 1 takes positions 1, 5, 9.
  CHECK(DistributedSampler(10, 4, 1, false).indices(0, unused) == std::vector<int64_t>{1, 5, 9});
  CHECK(DistributedSampler(10, 4, 2, false).indices(0, unused) == std::vector<int64_t>{2, 6, 0});
  CHECK(DistributedSampler(10, 4, 3, false).indices(0, unused) == std::vector<int64_t>{3, 7, 1});
  // drop_last: cut to 8.
  CHECK(DistributedSampler(10, 4, 3, false, 0, true).indices(0, unused) == std::vector<int64_t>{3, 7});
  // 2 indices over 5 ranks: the list repeats itself to 5.
  CHECK(DistributedSampler(2, 5, 4, false).indices(0, unused) == std::vector<int64_t>{0});
  CHECK(DistributedSampler(2, 5, 3, false).indices(0, unused) == std::vector<int64_t>{1});
}

TEST_CASE("DistributedSampler: the order depends on seed and epoch only, so all ranks agree without talking") {
  Generator g1(1), g2(99);  // the loader's generator is not used
  DistributedSampler rank0(20, 2, 0, true, 11), rank1(20, 2, 1, true, 11);
  CHECK(rank0.indices(4, g1) == rank0.indices(4, g2));
  auto a = rank0.indices(4, g1), b = rank1.indices(4, g1);
  std::vector<int64_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  CHECK(is_permutation_of_range(both, 20));
  CHECK(rank0.indices(5, g1) != rank0.indices(4, g1));
  CHECK(DistributedSampler(20, 2, 0, true, 12).indices(4, g1) != a);
  rank0.set_epoch(4);
  CHECK(rank0.indices() == a);
  CHECK_THROWS_WITH_AS(DistributedSampler(10, 2, 2), "DistributedSampler: rank 2 out of range [0, 2)", Error);
  CHECK_THROWS_AS(DistributedSampler(10, 0, 0), Error);
}
