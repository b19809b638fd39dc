// The caching allocator: freed blocks are reused, zeros() zero-fills a reused block, and every
// kernel writes all of an output that empty() left unset.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "helpers.h"
#include "runtime/allocation_limit.h"
#include "runtime/allocator.h"

using namespace cppgrad;
using namespace cppgrad::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Fills the cache with blocks of junk (0x7f bytes: about 3.4e38 as float32, 1.4e306 as float64)
// of every size up to 64 KiB, so the outputs of the next kernel start out dirty.
void poison_cache() {
  std::vector<Tensor> junk;
  for (int64_t bytes = 64; bytes <= 65536; bytes += bytes < 4096 ? 64 : 4096) {
    Tensor t = empty({bytes / 4});  // float32: `bytes` bytes
    std::memset(t.raw_data(), 0x7f, static_cast<size_t>(t.storage()->nbytes));
    junk.push_back(t);
  }
}  // each junk tensor is freed here, and its block cached

}  // namespace

TEST_CASE("allocator: a freed block is cached and reused") {
  empty_cache();
  const AllocatorStats before = allocator_stats();
  CHECK(before.cached_bytes == 0);
  void* first = nullptr;
  {
    Tensor t = empty({1000}, kFloat64);  // 8000 bytes: rounded up to two pages
    first = t.raw_data();
    CHECK(allocator_stats().in_use_bytes == before.in_use_bytes + 8192);
    CHECK(allocator_stats().peak_bytes >= before.in_use_bytes + 8192);
  }
  CHECK(allocator_stats().in_use_bytes == before.in_use_bytes);
  CHECK(allocator_stats().cached_bytes == 8192);
  Tensor again = empty({2040}, kFloat32);  // 8160 bytes: the same bucket
  CHECK(again.raw_data() == first);
  CHECK(allocator_stats().cached_bytes == 0);
  empty_cache();
  CHECK(allocator_stats().cached_bytes == 0);
}

TEST_CASE("allocator: zeros on a reused block is zero") {
  void* block = nullptr;
  {
    Tensor t = full({300}, 7.0);
    block = t.raw_data();
  }
  Tensor z = zeros({300});
  CHECK(z.raw_data() == block);
  CHECK(mismatch(z.sum(), {}, {0}) == "");
  CHECK(mismatch_with(z.abs().max(), scalar_tensor(0)) == "");
}

TEST_CASE("allocator: every kernel writes all of its output") {
  struct Case {
    const char* name;
    std::function<Tensor()> op;
    Shape shape;
    std::vector<double> expected;
  };
  Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
  Tensor idx = tensor(std::vector<int64_t>{1, 0}, {2});
  const std::vector<Case> cases = {
      {"sum over an empty dim", [] { return zeros({0, 3}).sum({0}); }, {3}, {0, 0, 0}},
      {"matmul with k = 0", [] { return zeros({2, 0}).matmul(zeros({0, 2})); }, {2, 2}, {0, 0, 0, 0}},
      {"matmul", [&] { return a.matmul(a.t()); }, {2, 2}, {14, 32, 32, 77}},
      {"batched matmul", [&] { return stack({a, a}).matmul(a.t()); }, {2, 2, 2}, {14, 32, 32, 77, 14, 32, 32, 77}},
      {"eye", [] { return eye(2); }, {2, 2}, {1, 0, 0, 1}},
      {"arange", [] { return arange(3).to(kFloat32); }, {3}, {0, 1, 2}},
      {"ones", [] { return ones({2}); }, {2}, {1, 1}},
      {"sum keepdim", [&] { return a.sum({1}, true); }, {2, 1}, {6, 15}},
      {"mean", [&] { return a.mean({0}); }, {3}, {2.5, 3.5, 4.5}},
      {"var", [&] { return a.var({1}); }, {2}, {1, 1}},
      {"max", [&] { return a.max(1).values; }, {2}, {3, 6}},
      {"argmax", [&] { return a.argmax(0).to(kFloat32); }, {3}, {1, 1, 1}},
      {"softmax of a masked row",
       [] { return tensor({{-kInf, -kInf}, {0, 0}}).softmax(1); }, {2, 2}, {0, 0, 0.5, 0.5}},
      {"log_softmax", [] { return tensor({0, 0}).log_softmax(0); }, {2}, {-std::log(2.0), -std::log(2.0)}},
      {"broadcast add", [&] { return a + tensor({10, 20, 30}); }, {2, 3}, {11, 22, 33, 14, 25, 36}},
      {"compare", [&] { return (a > scalar_tensor(3)).to(kFloat32); }, {2, 3}, {0, 0, 0, 1, 1, 1}},
      {"unary", [&] { return a.neg(); }, {2, 3}, {-1, -2, -3, -4, -5, -6}},
      {"pow", [&] { return a.pow(2); }, {2, 3}, {1, 4, 9, 16, 25, 36}},
      {"where", [&] { return where(a > scalar_tensor(2), a, zeros({})); }, {2, 3}, {0, 0, 3, 4, 5, 6}},
      {"masked_fill", [&] { return a.masked_fill(a < scalar_tensor(3), 0); }, {2, 3}, {0, 0, 3, 4, 5, 6}},
      {"contiguous", [&] { return a.t().contiguous(); }, {3, 2}, {1, 4, 2, 5, 3, 6}},
      {"reshape copy", [&] { return a.t().reshape({6}); }, {6}, {1, 4, 2, 5, 3, 6}},
      {"to float64", [&] { return a.to(kFloat64); }, {2, 3}, {1, 2, 3, 4, 5, 6}},
      {"cat", [&] { return cat({a, a}, 1); }, {2, 6}, {1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}},
      {"index_select", [&] { return a.index_select(1, idx); }, {2, 2}, {2, 1, 5, 4}},
      {"gather", [&] { return a.gather(1, idx.reshape({1, 2})); }, {1, 2}, {2, 1}},
      {"scatter_add", [&] { return scatter_add(zeros({1, 3}), 1, idx.reshape({1, 2}), ones({1, 2})); }, {1, 3},
       {1, 1, 0}},
      {"index_add", [&] { return index_add(zeros({3, 2}), 0, idx, ones({2, 2})); }, {3, 2}, {1, 1, 1, 1, 0, 0}},
      {"slice_scatter", [] { return slice_scatter(ones({2}), {5}, 0, 1, 2); }, {5}, {0, 1, 0, 1, 0}},
      {"nested list", [] { return tensor({{{1, 2}}, {{3, 4}}}); }, {2, 1, 2}, {1, 2, 3, 4}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    poison_cache();
    CHECK(mismatch(c.op(), c.shape, c.expected) == "");
  }
}

// Sets the cache limit for one test and puts the old one back.
struct CacheLimit {
  size_t saved = cache_limit();
  explicit CacheLimit(size_t bytes) { set_cache_limit(bytes); }
  ~CacheLimit() { set_cache_limit(saved); }
};

TEST_CASE("allocator: the cache is capped by default and the cap is settable") {
  CHECK(kDefaultCacheLimit == size_t{1} << 30);
  CHECK(cache_limit() == kDefaultCacheLimit);
  {
    CacheLimit limit(0);  // no caching: a freed block goes straight back
    empty_cache();
    { Tensor t = empty({1000}, kFloat64); }
    CHECK(allocator_stats().cached_bytes == 0);
  }
  CHECK(cache_limit() == kDefaultCacheLimit);
  // Lowering the limit trims what is cached at once.
  empty_cache();
  {
    std::vector<Tensor> blocks;
    for (int i = 0; i < 8; ++i) blocks.push_back(empty({1024 * (i + 1)}));  // 4 KiB .. 32 KiB
  }
  CHECK(allocator_stats().cached_bytes == 4096 * 36);
  {
    CacheLimit limit(40000);
    CHECK(allocator_stats().cached_bytes <= 40000);
  }
  empty_cache();
}

// A step whose working set is larger than 1 GiB (gpt2-124M's) gets its blocks back next step:
// at the default limit the cap grows to the peak in use. The blocks are never written, so their
// pages are never faulted in.
TEST_CASE("allocator: at the default limit a step larger than 1 GiB keeps its blocks cached") {
  CacheLimit limit(kDefaultCacheLimit);
  empty_cache();
  constexpr int64_t kBlock = int64_t{400} << 20;  // bytes; three are 1.2 GiB
  std::vector<void*> addresses;
  {
    std::vector<Tensor> step;
    for (int i = 0; i < 3; ++i) step.push_back(empty({kBlock}, kBool));
    for (const Tensor& t : step) addresses.push_back(t.raw_data());
  }
  CHECK(allocator_stats().cached_bytes == 3 * kBlock);
  const int64_t misses = allocator_stats().cache_misses;
  {
    std::vector<Tensor> next_step;
    for (int i = 0; i < 3; ++i) next_step.push_back(empty({kBlock}, kBool));
    for (const Tensor& t : next_step) CHECK(std::find(addresses.begin(), addresses.end(), t.raw_data()) != addresses.end());
  }
  CHECK(allocator_stats().cache_misses == misses);
  {
    CacheLimit fixed(size_t{512} << 20);  // any other limit is a fixed cap
    CHECK(allocator_stats().cached_bytes <= int64_t{512} << 20);
  }
  empty_cache();
}

// A run whose batch shape changes every step (sequence lengths drawn at random, as a training
// loop over unpadded batches does) asks for ever new sizes; the cache must stay under its limit
// and keep serving the sizes in use, not fill up with old ones.
TEST_CASE("allocator: a run with varying batch shapes does not grow the cache without bound") {
  constexpr size_t kLimit = size_t{4} << 20;  // 4 MiB, so that the test is quick
  CacheLimit limit(kLimit);
  empty_cache();
  Generator gen(21);
  int64_t most_cached = 0;
  int64_t distinct_bytes_asked = 0;  // what a cache without a limit would end up holding
  std::vector<bool> seen(257, false);
  for (int step = 0; step < 300; ++step) {
    const int64_t batch = 1 + randint(0, 256, {1}, gen).item<int64_t>();
    if (!seen[batch]) {
      seen[batch] = true;
      distinct_bytes_asked += 3 * ((batch * 64 * 4 + 4095) / 4096 * 4096);
    }
    // One "step": activations and gradients of a [batch, 64] layer, freed at the end.
    Tensor x = randn({batch, 64}, kFloat32, gen);
    Tensor h = (x * 2.0).tanh();
    Tensor g = h * x;
    CHECK(g.shape() == Shape{batch, 64});
    most_cached = std::max(most_cached, allocator_stats().cached_bytes);
  }
  most_cached = std::max(most_cached, allocator_stats().cached_bytes);
  CHECK(most_cached <= static_cast<int64_t>(kLimit));
  CHECK(distinct_bytes_asked > static_cast<int64_t>(2 * kLimit));  // the unbounded cache would be far larger
  // The sizes in use are still served from the cache: a block freed now comes back next time.
  void* block = nullptr;
  { block = empty({100, 64}).raw_data(); }
  CHECK(empty({100, 64}).raw_data() == block);
  empty_cache();
}

TEST_CASE("allocator: an AllocationLimit refuses what would pass it, names its subject, and nests") {
  Tensor held = zeros({1 << 18}, kFloat32);  // 1 MiB in use before: not counted against the limit
  {
    AllocationLimit limit(size_t{4} << 20, "building the model");  // 4 MiB
    Tensor a = zeros({1 << 19}, kFloat32);                       // 2 MiB: within
    CHECK_THROWS_WITH_AS(zeros({1 << 20}, kFloat32),                 // 4 MiB more: past it
                         doctest::Contains("building the model: needs more than the 4.19 MB allowed for it"), Error);
    {
      AllocationLimit inner(size_t{1} << 20, "the inner part");
      CHECK_THROWS_WITH_AS(zeros({1 << 19}, kFloat32), doctest::Contains("the inner part"), Error);
    }
    Tensor b = zeros({1 << 18}, kFloat32);  // the outer limit holds again: 3 of its 4 MiB
    CHECK_THROWS_AS(zeros({1 << 19}, kFloat32), Error);
  }
  Tensor unlimited = zeros({1 << 21}, kFloat32);  // 8 MiB once the limit has ended
  CHECK(unlimited.numel() == 1 << 21);
}
