// Autocast's products (tensor/autocast.h): inside the region a float32 product multiplies its
// inputs rounded to bfloat16 and sums in float32, on either kernel; outside it, and for float64,
// nothing changes.
//
// The tolerance is the textbook bound for a float32 dot product of k terms summed in any order:
// |ĉ - c| <= k·u·Σ|a||b| with u = 2^-24, where c is the exact dot product of the rounded inputs
// (computed in float64, whose own error is 2^29 times smaller). A product of two bfloat16 values
// (8 significant bits each) is exact in float32, so the sums are the only rounding: the bound
// holds for OpenBLAS and for oneDNN alike, in whatever order they add.
#include <cstdlib>
#include <cstring>

#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;
using namespace cppgrad::check;

namespace {

// Sets the bf16 kernel for a test and puts Auto back, however the test ends.
struct KernelGuard {
  explicit KernelGuard(autocast::Kernel k) { autocast::set_kernel(k); }
  ~KernelGuard() { autocast::set_kernel(autocast::Kernel::Auto); }
};

Tensor rounded64(const Tensor& x) { return x.to(kBFloat16).to(kFloat64); }

// The largest |got - exact| over the bound k·u·Σ|a||b| (<= 1 passes), with exact the float64
// product of the rounded inputs.
double error_over_bound(const Tensor& got, const Tensor& a, const Tensor& b) {
  const int64_t k = a.size(-1);
  Tensor exact = rounded64(a).matmul(rounded64(b));
  Tensor bound = rounded64(a).abs().matmul(rounded64(b).abs()) * (static_cast<double>(k) * 0x1p-24) + 1e-30;
  return ((got.to(kFloat64) - exact).abs() / bound).max().item();
}

// Both kernels where oneDNN can multiply bfloat16 at all (AVX-512 and up, emulating what it lacks);
// under an emulated older CPU (tests/portable) only the float32 GEMM.
std::vector<autocast::Kernel> kernels_to_test() {
  const std::string isa(autocast::onednn_isa_name());
  if (isa.rfind("avx512", 0) == 0) return {autocast::Kernel::RoundedFloat32, autocast::Kernel::OneDnn};
  MESSAGE("oneDNN sees ", isa, ", without bfloat16 matmuls: the float32 GEMM form only");
  return {autocast::Kernel::RoundedFloat32};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.contiguous().to_vector<float>(), y = b.contiguous().to_vector<float>();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("autocast: the region turns on and off, nests, and only takes bfloat16") {
  CHECK_FALSE(autocast::is_enabled());
  {
    autocast::Guard on(kBFloat16);
    CHECK(autocast::is_enabled());
    CHECK(autocast::dtype() == kBFloat16);
    {
      autocast::Guard off(kBFloat16, false);
      CHECK_FALSE(autocast::is_enabled());
    }
    CHECK(autocast::is_enabled());
  }
  CHECK_FALSE(autocast::is_enabled());
  CHECK_THROWS_WITH_AS([] { autocast::Guard g(kFloat64); }(), doctest::Contains("autocast: dtype float64 is not supported"), Error);
  CHECK_THROWS_WITH_AS([] { autocast::Guard g(kFloat32); }(), doctest::Contains("bfloat16"), Error);
  CHECK_FALSE(autocast::is_enabled());
}

TEST_CASE("autocast: matmul multiplies bfloat16-rounded inputs, sums in float32, gives float32") {
  Generator gen(11);
  for (autocast::Kernel kernel : kernels_to_test()) {
    CAPTURE(autocast::kernel_name(kernel));
    KernelGuard use(kernel);
    // Plain, a transposed left operand, a transposed right one, batched, and a batch times one matrix.
    Tensor a = randn({37, 70}, kFloat32, gen), b = randn({70, 29}, kFloat32, gen);
    Tensor at = randn({70, 37}, kFloat32, gen).transpose(0, 1), bt = randn({29, 70}, kFloat32, gen).transpose(0, 1);
    Tensor a3 = randn({3, 9, 40}, kFloat32, gen), b3 = randn({3, 40, 11}, kFloat32, gen), w = randn({40, 5}, kFloat32, gen);
    std::vector<std::pair<Tensor, Tensor>> cases{{a, b}, {at, b}, {a, bt}, {a3, b3}, {a3, w}};
    for (auto& [x, y] : cases) {
      Tensor got;
      {
        autocast::Guard bf16(kBFloat16);
        got = x.matmul(y);
      }
      CHECK(got.dtype() == kFloat32);
      CHECK(error_over_bound(got, x, y) <= 1.0);
      // And it is the rounded inputs' product, not the float32 one: that differs by ~2^-9·√k.
      CHECK(max_abs_diff(got, x.to(kFloat64).matmul(y.to(kFloat64))) > 1e-3);
    }
  }
}

TEST_CASE("autocast: linear, with and without bias, on both kernels") {
  Generator gen(12);
  Tensor x = randn({2, 13, 48}, kFloat32, gen), w = randn({20, 48}, kFloat32, gen), bias = randn({20}, kFloat32, gen);
  for (autocast::Kernel kernel : kernels_to_test()) {
    CAPTURE(autocast::kernel_name(kernel));
    KernelGuard use(kernel);
    Tensor with_bias, without;
    {
      autocast::Guard bf16(kBFloat16);
      with_bias = kernels::linear(x, w, bias);
      without = kernels::linear(x, w, Tensor());
    }
    CHECK(with_bias.dtype() == kFloat32);
    CHECK(error_over_bound(without, x, w.transpose(0, 1)) <= 1.0);
    // The bias is added in float32, unrounded: (with - bias) is the product, to float32 rounding of the sum.
    CHECK(max_abs_diff(with_bias - bias, without) < 1e-5);
  }
}

TEST_CASE("autocast: outside the region and for float64, products are unchanged") {
  Generator gen(13);
  Tensor a = randn({64, 96}, kFloat32, gen), b = randn({96, 80}, kFloat32, gen);
  Tensor a64 = a.to(kFloat64), b64 = b.to(kFloat64);
  const Tensor before = a.matmul(b), before64 = a64.matmul(b64);
  Tensor inside64;
  {
    autocast::Guard bf16(kBFloat16);
    inside64 = a64.matmul(b64);
    autocast::Guard off(kBFloat16, false);
    CHECK(same_bits(a.matmul(b), before));  // a region turned off inside a region
  }
  // The same call on the same path: the same bits.
  CHECK(same_bits(a.matmul(b), before));
  CHECK(same_bits(inside64, before64));
}

TEST_CASE("autocast: the product's bits do not depend on the thread count, on either kernel") {
  SmallParallelGrain threaded;
  const int saved = get_num_threads();
  Generator gen(14);
  // Large enough to be cut into blocks (gemm.h), and a batch whose matrices go to threads.
  Tensor a = randn({512, 96}, kFloat32, gen), b = randn({96, 160}, kFloat32, gen);
  Tensor a3 = randn({6, 40, 24}, kFloat32, gen), b3 = randn({6, 24, 40}, kFloat32, gen);
  Tensor a_stored_transposed = randn({96, 512}, kFloat32, gen);
  for (autocast::Kernel kernel : kernels_to_test()) {
    CAPTURE(autocast::kernel_name(kernel));
    KernelGuard use(kernel);
    autocast::Guard bf16(kBFloat16);
    set_num_threads(1);
    const Tensor one = a.matmul(b), one3 = a3.matmul(b3);
    set_num_threads(2);
    const Tensor two = a.matmul(b), two3 = a3.matmul(b3);
    CHECK(same_bits(one, two));
    CHECK(same_bits(one3, two3));
    // The operands were rounded in blocks of rows on the threads, a transposed one by its stored
    // rows: every block where it belongs.
    CHECK(error_over_bound(two, a, b) <= 1.0);
    CHECK(error_over_bound(a_stored_transposed.mT().matmul(b), a_stored_transposed.mT(), b) <= 1.0);
    // The batch's products ran on the pool's threads, and were autocast there too.
    CHECK(error_over_bound(two3, a3, b3) <= 1.0);
    CHECK(max_abs_diff(two3, a3.to(kFloat64).matmul(b3.to(kFloat64))) > 1e-4);
  }
  set_num_threads(saved);
}

// Never slower than float32 (pytorch/pytorch#86270): without AVX512_BF16 or AMX, oneDNN's
// bfloat16 product is emulated and the rounding pass gains nothing, so autocast's products run as
// the float32 GEMM runs them: the same kernel, the same bits. tests/portable runs this under an
// emulated CPU without AVX, where CPPGRAD_EXPECT_BF16_KERNEL says which kernel must be taken.
TEST_CASE("autocast: the kernel taken is oneDNN only where the CPU multiplies bfloat16") {
  const autocast::Kernel taken = autocast::kernel();
  const bool bf16_cpu = autocast::cpu_has_bfloat16_instructions();
  MESSAGE("oneDNN sees ", autocast::onednn_isa_name(), ": autocast runs on ", autocast::kernel_name(taken));
  CHECK(taken == (bf16_cpu ? autocast::Kernel::OneDnn : autocast::Kernel::Float32));
  if (const char* expected = std::getenv("CPPGRAD_EXPECT_BF16_KERNEL"))
    CHECK(autocast::kernel_name(taken) == std::string_view(expected));
  // And the products run, on the kernel taken: bfloat16's products where the CPU has them, else
  // the very float32 GEMM (no pass over the inputs, so no slower).
  Generator gen(15);
  Tensor a = randn({33, 64}, kFloat32, gen), b = randn({64, 17}, kFloat32, gen);
  const Tensor fp32 = a.matmul(b);
  autocast::Guard bf16(kBFloat16);
  if (bf16_cpu) {
    CHECK(error_over_bound(a.matmul(b), a, b) <= 1.0);
  } else {
    CHECK(same_bits(a.matmul(b), fp32));
    KernelGuard rounded(autocast::Kernel::RoundedFloat32);  // bfloat16's numbers on any CPU, asked for
    CHECK(error_over_bound(a.matmul(b), a, b) <= 1.0);
    CHECK(max_abs_diff(a.matmul(b), fp32) > 1e-4);
  }
  ReferenceModeGuard reference;
  CHECK(autocast::kernel() == (bf16_cpu ? autocast::Kernel::RoundedFloat32 : autocast::Kernel::Float32));  // the readable form
}
