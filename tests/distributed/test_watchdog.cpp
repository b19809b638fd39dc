// The collectives' watchdog (distributed/watchdog.h): its timeout's checks, and collectives that
// complete within a short timeout on every rank. (A stopped rank: watchdog_test.sh.)
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "cppgrad.h"
#include "distributed/distributed.h"

using namespace cppgrad;
namespace dist = cppgrad::distributed;

TEST_CASE("watchdog: the collective timeout is a positive, finite number of seconds") {
  const double before = dist::collective_timeout();
  CHECK(before > 0);
  CHECK_THROWS_WITH_AS(dist::set_collective_timeout(0), doctest::Contains("not a positive number of seconds"), Error);
  CHECK_THROWS_AS(dist::set_collective_timeout(-1), Error);
  CHECK_THROWS_AS(dist::set_collective_timeout(std::nan("")), Error);
  CHECK_THROWS_AS(dist::set_collective_timeout(std::numeric_limits<double>::infinity()), Error);
  CHECK(dist::collective_timeout() == before);  // a refused value changes nothing
  dist::set_collective_timeout(12.5);
  CHECK(dist::collective_timeout() == 12.5);
  dist::set_collective_timeout(before);
}

TEST_CASE("watchdog: collectives that complete in time are not ended") {
  const double before = dist::collective_timeout();
  dist::set_collective_timeout(5);  // far above what these take, even under a sanitizer
  for (int i = 0; i < 20; ++i) {
    Tensor x = full({3}, static_cast<double>(dist::rank() + i), kFloat64);
    dist::all_reduce(x);
    const double expected = dist::world_size() * (dist::world_size() - 1) / 2.0 + dist::world_size() * i;
    CHECK(x.to_vector<double>() == std::vector<double>(3, expected));
    dist::barrier();
  }
  dist::set_collective_timeout(before);
}
