// How the thread count gives way on a busy machine (runtime/parallel.h). The decisions are driven
// with made-up times: no test here measures anything.
#include <cblas.h>
#include <omp.h>

#include <cstdlib>

#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;

namespace {

constexpr int64_t kMs = 1'000'000;  // nanoseconds

// Restores the thread count and the adaptation a test changed, however the test ends.
struct ThreadsGuard {
  int saved = get_num_threads();
  bool adapt = threads_adapt_to_load();
  ~ThreadsGuard() {
    set_threads_adapt_to_load(adapt);
    set_num_threads(saved);
  }
};

bool user_chose_waiting() {
  return std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT") || std::getenv("OMP_DYNAMIC");
}

}  // namespace

TEST_CASE("parallel: regions that wait less than they work never back off") {
  LoadBackoff b;
  CHECK_FALSE(b.report(0, 50 * kMs, 0));  // the first region starts the threads: not judged
  int64_t t = 1 * kMs;
  for (int i = 0; i < 1000; ++i, t += kMs) {
    CHECK_FALSE(b.report(2 * kMs, 1 * kMs, t));                                   // waited less than it worked
    CHECK_FALSE(b.report(LoadBackoff::kStallFloor / 4, LoadBackoff::kStallFloor / 2, t));  // a thread's wake-up
    CHECK_FALSE(b.backed_off(t));
  }
}

TEST_CASE("parallel: a stalled region backs off, tries again, and backs off longer while stalls go on") {
  LoadBackoff b;
  b.report(0, 0, 0);
  const int64_t stall = 5 * kMs, work = 1 * kMs;
  int64_t t = 10 * kMs;
  REQUIRE(b.report(work, stall, t));  // the worker came 5 ms late for 1 ms of work
  CHECK(b.backed_off(t + 1));
  CHECK(b.backed_off(t + LoadBackoff::kFirstWait - 1));
  t += LoadBackoff::kFirstWait;
  CHECK_FALSE(b.backed_off(t));  // the try
  // Stalls soon after each try: the wait grows kGrowth times, up to kLongestWait.
  int64_t expected = LoadBackoff::kFirstWait;
  for (int i = 0; i < 8; ++i) {
    REQUIRE(b.report(work, stall, t + kMs));
    expected = std::min(LoadBackoff::kGrowth * expected, LoadBackoff::kLongestWait);
    CHECK(b.current_wait() == expected);
    CHECK(b.backed_off(t + kMs + expected - 1));
    t += kMs + expected;
    CHECK_FALSE(b.backed_off(t));
  }
  CHECK(b.current_wait() == LoadBackoff::kLongestWait);
  // A try that ran clean for longer than the probation: the next stall starts over at the first wait.
  t += LoadBackoff::kProbation + kMs;
  REQUIRE(b.report(work, stall, t));
  CHECK(b.current_wait() == LoadBackoff::kFirstWait);
}

TEST_CASE("parallel: a back-off runs loops and BLAS on one thread, get_num_threads keeps the count set") {
  ThreadsGuard guard;
  set_threads_adapt_to_load(true);
  set_num_threads(2);
  report_parallel_region(0, 0);  // the first region, not judged
  CHECK(region_threads() == 2);
  report_parallel_region(1 * kMs, 20 * kMs);  // a stall
  CHECK(region_threads() == 1);
  CHECK(omp_get_max_threads() == 1);
  CHECK(openblas_get_num_threads() == 1);
  CHECK(get_num_threads() == 2);
  // The result does not depend on it: each element is written by one thread either way.
  SmallParallelGrain threaded;
  Tensor x = arange(0, 100000, 1, kFloat64);
  CHECK((x * 2).sum().item() == 9999900000.0);  // exact in float64
  set_num_threads(2);  // setting the count starts afresh
  CHECK(region_threads() == 2);
  CHECK(openblas_get_num_threads() == (deterministic_threads() ? 1 : 2));  // BLAS on one: ours split the products
  // Switched off: the count stays as set whatever the regions report.
  set_threads_adapt_to_load(false);
  report_parallel_region(0, 0);
  report_parallel_region(1 * kMs, 20 * kMs);
  CHECK(region_threads() == 2);
}

// Run twice by CTest: as is, and with OMP_WAIT_POLICY=active set (the test
// tensor_tests/user_wait_policy_wins, with CPPGRAD_EXPECT_USER_WAIT_POLICY=1).
TEST_CASE("parallel: a user's OMP_WAIT_POLICY, GOMP_SPINCOUNT or OMP_DYNAMIC keeps the thread count") {
  if (std::getenv("CPPGRAD_EXPECT_USER_WAIT_POLICY")) REQUIRE(user_chose_waiting());
  ThreadsGuard guard;
  const bool user_chose = user_chose_waiting();
  CHECK(threads_adapt_to_load() == !user_chose);
  set_num_threads(2);
  report_parallel_region(0, 0);
  report_parallel_region(1 * kMs, 20 * kMs);  // a stall: backs off only when the user chose nothing
  CHECK(region_threads() == (user_chose ? 2 : 1));
  CHECK(openblas_get_num_threads() == (user_chose && !deterministic_threads() ? 2 : 1));
}
