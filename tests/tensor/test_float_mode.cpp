// set_flush_denormal (runtime/float_mode.h): subnormal floats read as zero, on the calling thread
// and on cppgrad's worker threads, in elementwise loops and in matrix products; off by default.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;

namespace {

// Restores the setting and the thread count a test changed, however the test ends.
struct FloatModeGuard {
  bool saved = flush_denormal();
  int threads = get_num_threads();
  ~FloatModeGuard() {
    set_flush_denormal(saved);
    set_num_threads(threads);
  }
};

// How many elements of t are not ±0, read from their bits: a float read while the flush is on
// would itself read a subnormal as zero.
int64_t nonzeros(const Tensor& t) {
  const Tensor c = t.contiguous();
  int64_t count = 0;
  for (int64_t i = 0; i < c.numel(); ++i) {
    if (c.dtype() == kFloat32) count += (std::bit_cast<uint32_t>(c.data<float>()[i]) << 1) != 0;  // sign bit off
    else count += (std::bit_cast<uint64_t>(c.data<double>()[i]) << 1) != 0;
  }
  return count;
}

}  // namespace

TEST_CASE("flush denormal: off by default, subnormal values stay, on, they read as zero on every thread") {
  FloatModeGuard guard;
  SmallParallelGrain threaded;  // so the loops below run on the worker thread too
  set_num_threads(2);
  CHECK_FALSE(flush_denormal());
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dtype));
    // 1e-39 is subnormal in float (below 2⁻¹²⁶ ≈ 1.2e-38), 1e-310 in double (below 2⁻¹⁰²²)
    const double tiny = dtype == kFloat32 ? 1e-39 : 1e-310;
    REQUIRE((dtype == kFloat32 ? std::fpclassify(static_cast<float>(tiny)) : std::fpclassify(tiny)) == FP_SUBNORMAL);
    const Tensor x = full({64 * 1024}, tiny, dtype);
    // 128 × 128 × 128 multiply-adds: a product gemm.h cuts into blocks for the threads
    const Tensor a = full({128, 128}, tiny, dtype), identity = eye(128, dtype);

    set_flush_denormal(false);
    CHECK(nonzeros(x * 1.0) == x.numel());
    CHECK(nonzeros(a.matmul(identity)) == a.numel());

    CHECK(set_flush_denormal(true));  // x86-64 always has the bits
    CHECK(flush_denormal());
    CHECK(nonzeros(x * 1.0) == 0);  // every element, each thread's share
    CHECK(nonzeros(x + x) == 0);
    CHECK(nonzeros(a.matmul(identity)) == 0);
    // Normal numbers are untouched.
    const Tensor ones = full({64 * 1024}, 1.0, dtype);
    CHECK(nonzeros(ones * 0.5) == ones.numel());

    set_flush_denormal(false);  // and back: the worker adopts it at its next loop
    CHECK(nonzeros(x * 1.0) == x.numel());
    CHECK(nonzeros(a.matmul(identity)) == a.numel());
  }
}
