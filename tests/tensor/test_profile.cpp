// The kernel profiler: names the kernels that ran, counts their calls, and its times add up to
// no more than the wall time, at one thread and at two (where workers must not be counted).
#include <algorithm>

#include "helpers.h"
#include "runtime/profile.h"

using namespace cppgrad;

namespace {

// Enables the profiler for one test and leaves it as it found it.
struct ProfileOn {
  bool saved = profile::enabled();
  ProfileOn() {
    profile::set_enabled(true);
    profile::reset();
  }
  ~ProfileOn() {
    profile::set_enabled(saved);
    profile::reset();
  }
};

const profile::Entry* find(const std::vector<profile::Entry>& list, const std::string& name) {
  auto it = std::find_if(list.begin(), list.end(), [&](const profile::Entry& e) { return e.name == name; });
  return it == list.end() ? nullptr : &*it;
}

void some_work() {
  Generator gen(7);
  Tensor a = randn({64, 128}, TensorOptions(), gen), b = randn({128, 96}, TensorOptions(), gen);
  for (int i = 0; i < 3; ++i) {
    Tensor c = a.matmul(b);                  // one GEMM
    Tensor d = (c * 2.0).softmax(-1);        // a binary op, then softmax
    Tensor heads = randn({8, 32, 16}, TensorOptions(), gen);  // a batched product: one GEMM per head
    Tensor e = heads.matmul(heads.transpose(1, 2));
    CHECK(d.sum().item() > 0);
    CHECK(e.numel() == 8 * 32 * 32);
  }
}

}  // namespace

TEST_CASE("profile: counts the kernels that ran, and the times add up to at most the wall time") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    const int saved_threads = get_num_threads();
    set_num_threads(threads);
    testing::SmallParallelGrain small_grain;  // the batched product and the loops go parallel
    {
      ProfileOn on;
      some_work();
      const double wall = profile::seconds_since_reset();
      const auto list = profile::entries();
      const profile::Entry* gemm = find(list, "blas gemm");
      REQUIRE(gemm != nullptr);
      CHECK(gemm->calls >= 3);
      CHECK(find(list, "softmax") != nullptr);
      double inside = 0;
      for (const auto& e : list) {
        CHECK(e.seconds >= 0);
        inside += e.seconds;
      }
      CHECK(inside <= wall);
      const std::string report = profile::report();
      CHECK(report.find("outside kernels") != std::string::npos);
      CHECK(report.find("BLAS:") != std::string::npos);
    }
    set_num_threads(saved_threads);
  }
}

TEST_CASE("profile: disabled, nothing is recorded") {
  const bool saved = profile::enabled();
  profile::set_enabled(false);
  profile::reset();
  some_work();
  CHECK(profile::entries().empty());
  profile::set_enabled(saved);
}
