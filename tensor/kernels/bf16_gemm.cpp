// Autocast's matrix product (tensor/autocast.h): C = r(op(A))·r(op(B)) + beta·C, where r rounds
// each element to the nearest bfloat16 and the sums are float32.
//
// The reference form is the definition: round both inputs (as float32 values), then the float32
// GEMM (autocast::Kernel::RoundedFloat32). On a CPU with bfloat16 instructions, oneDNN multiplies
// the rounded inputs stored as bfloat16 (the component cppgrad::onednn, bf16_hardware.h): the
// same products, summed in another order, so within float32 rounding of the reference's. On a CPU without them autocast's
// products do not come here at all (Kernel::Float32: gemm.h multiplies them as float32).
//
// Both are cut into the blocks of gemm.h, so their bits do not depend on the thread count.
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>

#include "runtime/profile.h"
#include "tensor/autocast.h"
#include "tensor/autocast_cache.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/bf16_hardware.h"
#include "tensor/kernels/fast/bf16_round.h"
#include "tensor/kernels/gemm.h"

namespace cppgrad::kernels {

namespace {
HardwareBFloat16Gemm g_hardware{};  // constant-initialised: registration may come in any order
bool g_has_hardware = false;
}  // namespace

void register_hardware_bfloat16_gemm(const HardwareBFloat16Gemm& gemm) {
  g_hardware = gemm;
  g_has_hardware = true;
}
const HardwareBFloat16Gemm* hardware_bfloat16_gemm() { return g_has_hardware ? &g_hardware : nullptr; }

}  // namespace cppgrad::kernels

namespace cppgrad::kernels::detail {

namespace {

// An operand as stored (op(X) is rows × cols of it, or its transpose), rounded into a dense
// buffer of the caching allocator: its leading dimension becomes its column count.
struct Rounded {
  Tensor buffer;
  int64_t ld;
};

std::atomic<int64_t> g_products{0}, g_rounded{0}, g_bytes_rounded{0}, g_hits{0};

Rounded rounded(const float* x, bool transposed, int64_t op_rows, int64_t op_cols, int64_t ld, DType as) {
  CPPGRAD_PROFILE_SCOPE("bf16 rounding");  // what autocast adds to a product, apart in a profile
  const int64_t rows = transposed ? op_cols : op_rows, cols = transposed ? op_rows : op_cols;
  Tensor buffer = empty({rows * cols}, as);
  // Blocks of rows on the threads: a step rounds hundreds of megabytes (gpt2-124M's: 405 MB of
  // bfloat16), and each element rounds alone, so the split changes no bit.
  constexpr int64_t kBlockRows = 64;
  parallel_for((rows + kBlockRows - 1) / kBlockRows, kBlockRows * cols, [&](int64_t block) {
    const int64_t first = block * kBlockRows, count = std::min(kBlockRows, rows - first);
    if (as == kFloat32)
      fast::round_rows(x + first * ld, count, cols, ld, buffer.data<float>() + first * cols);
    else
      fast::round_rows(x + first * ld, count, cols, ld, buffer.data<bfloat16>() + first * cols);
  });
  g_rounded.fetch_add(1, std::memory_order_relaxed);
  g_bytes_rounded.fetch_add(rows * cols * static_cast<int64_t>(dtype_size(as)), std::memory_order_relaxed);
  return {buffer, std::max<int64_t>(cols, 1)};
}

// The cast cache (tensor/autocast_cache.h): a rounded copy per operand, keyed by where the
// operand lies (its storage, first element, extent and rows' stride) and the precision it is
// held in. An entry is good while its storage lives (the weak pointer: a freed storage's address
// may come back for another tensor) at the version it was rounded from.
struct CastKey {
  const Storage* storage;
  const float* data;
  int64_t rows, cols, ld;
  DType as;
  auto operator<=>(const CastKey&) const = default;
};
struct CastEntry {
  std::weak_ptr<Storage> storage;
  uint64_t version;
  Rounded copy;
};
using CastCache = std::map<CastKey, CastEntry>;
CastCache& cast_cache() {
  thread_local CastCache cache;
  return cache;
}

Rounded cached_rounded(const Tensor& of, const float* x, bool transposed, int64_t op_rows, int64_t op_cols, int64_t ld,
                       DType as) {
  const std::shared_ptr<Storage>& storage = of.storage();
  const CastKey key{storage.get(), x, transposed ? op_cols : op_rows, transposed ? op_rows : op_cols, ld, as};
  CastCache& cache = cast_cache();
  auto found = cache.find(key);
  if (found != cache.end() && found->second.storage.lock() == storage && found->second.version == storage->version) {
    g_hits.fetch_add(1, std::memory_order_relaxed);
    return found->second.copy;
  }
  // The copies of freed tensors go first: a step's activations die by the thousand.
  std::erase_if(cache, [](const auto& entry) { return entry.second.storage.expired(); });
  Rounded copy = rounded(x, transposed, op_rows, op_cols, ld, as);
  cache.insert_or_assign(key, CastEntry{storage, storage->version, copy});
  return copy;
}

Rounded operand(const Tensor* of, const float* x, bool transposed, int64_t op_rows, int64_t op_cols, int64_t ld,
                DType as) {
  return of != nullptr ? cached_rounded(*of, x, transposed, op_rows, op_cols, ld, as)
                       : rounded(x, transposed, op_rows, op_cols, ld, as);
}

}  // namespace

void count_autocast(int64_t products, int64_t operands_rounded, int64_t bytes_rounded) {
  g_products.fetch_add(products, std::memory_order_relaxed);
  g_rounded.fetch_add(operands_rounded, std::memory_order_relaxed);
  g_bytes_rounded.fetch_add(bytes_rounded, std::memory_order_relaxed);
}

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float* c, int64_t ldc, float beta, GemmCut cut, const Tensor* a_of, const Tensor* b_of) {
  g_products.fetch_add(1, std::memory_order_relaxed);
  if (autocast::kernel() == autocast::Kernel::OneDnn) {
    const Rounded ra = operand(a_of, a, ta, m, k, lda, kBFloat16), rb = operand(b_of, b, tb, k, n, ldb, kBFloat16);
    blocked_gemm(ta, tb, m, n, k, ra.buffer.data<bfloat16>(), ra.ld, rb.buffer.data<bfloat16>(), rb.ld, c, ldc, beta, cut,
                 [](auto... args) { g_hardware.gemm(args...); });
    return;
  }
  const Rounded ra = operand(a_of, a, ta, m, k, lda, kFloat32), rb = operand(b_of, b, tb, k, n, ldb, kFloat32);
  blocked_gemm(ta, tb, m, n, k, ra.buffer.data<float>(), ra.ld, rb.buffer.data<float>(), rb.ld, c, ldc, beta, cut,
               [](auto... args) { blas_gemm(args...); });
}

}  // namespace cppgrad::kernels::detail

namespace cppgrad::autocast {

CastStats cast_stats() {
  using namespace kernels::detail;
  return {g_products.load(), g_rounded.load(), g_bytes_rounded.load(), g_hits.load()};
}

void reset_cast_stats() {
  using namespace kernels::detail;
  for (auto* counter : {&g_products, &g_rounded, &g_bytes_rounded, &g_hits}) counter->store(0);
}

void clear_cast_cache() { kernels::detail::cast_cache().clear(); }

}  // namespace cppgrad::autocast
