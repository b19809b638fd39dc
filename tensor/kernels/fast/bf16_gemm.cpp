// oneDNN's matmul primitive on bfloat16 inputs with a float32 result: on CPUs with AVX512_BF16
// (vdpbf16ps: pairs of bfloat16 products summed into float32) or AMX it runs at about twice
// float32's rate, and oneDNN picks the instructions itself at run time. A primitive is built per
// shape and layout (the first call of a shape costs a JIT compile) and kept per thread.
//
// Its threads: oneDNN's OpenMP build runs on one thread inside a parallel region (gemm.h's
// blocks) and otherwise on OpenMP's default count, which deterministic mode keeps at 1
// (runtime/parallel.h): the same bits at any thread count, as BLAS gives.
#include "tensor/kernels/fast/bf16_gemm.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <tuple>
#include <type_traits>

#include "runtime/error.h"
#include "runtime/simd_clones.h"

namespace cppgrad::kernels::fast {

namespace {

bool has_isa(dnnl::cpu_isa isa, dnnl::cpu_isa wanted) {
  // oneDNN's ISA values are masks, each holding the bits of the ones it extends.
  return (static_cast<unsigned>(isa) & static_cast<unsigned>(wanted)) == static_cast<unsigned>(wanted);
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;

struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc a, b, c;
};

Primitive& primitive_for(const Key& key) {
  thread_local std::map<Key, Primitive> cache;
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  const auto [ta, tb, m, n, k, lda, ldb, ldc, accumulate] = key;
  using dt = dnnl::memory::data_type;
  // A (m, k) and B (k, n) as stored: rows ld apart, or, transposed, columns ld apart.
  const dnnl::memory::desc a_md({m, k}, dt::bf16, ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
  const dnnl::memory::desc b_md({k, n}, dt::bf16, tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
  const dnnl::memory::desc c_md({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (accumulate) {  // C += A·B: oneDNN's sum post-op adds the old C (scaled by beta, set at execution)
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, cpu_engine());
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("bf16 gemm: oneDNN has no bfloat16 matmul for {}x{}x{} on this CPU ({}): {}", m, k, n,
                            onednn_isa_name(), e.what()));
  }
  return cache.emplace(key, Primitive{dnnl::matmul(pd), a_md, b_md, c_md}).first->second;
}

}  // namespace

bool onednn_multiplies_bfloat16() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return has_isa(isa, dnnl::cpu_isa::avx512_core_bf16) || has_isa(isa, dnnl::cpu_isa::avx512_core_amx);
}

std::string_view onednn_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

void onednn_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda,
                      const bfloat16* b, int64_t ldb, float* c, int64_t ldc, float beta) {
  CPPGRAD_CHECK(beta == 0.0f || beta == 1.0f, "bf16 gemm: beta {} (only 0 or 1)", beta);
  Primitive& p = primitive_for({ta, tb, m, n, k, lda, ldb, ldc, beta != 0.0f});
  // oneDNN's handles take non-const pointers; it only reads A and B.
  dnnl::memory am(p.a, cpu_engine(), const_cast<bfloat16*>(a));
  dnnl::memory bm(p.b, cpu_engine(), const_cast<bfloat16*>(b));
  dnnl::memory cm(p.c, cpu_engine(), c);
  thread_local dnnl::stream stream(cpu_engine());
  p.matmul.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream.wait();
}


// ---- rounding to bfloat16 (autocast's product on a CPU without bfloat16 instructions) ----------
namespace {
template <class Out>
CPPGRAD_SIMD_CLONES void round_rows_into(const float* __restrict from, int64_t rows, int64_t cols, int64_t ld,
                                         Out* __restrict to) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = from + r * ld;
    Out* out = to + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      if constexpr (std::is_same_v<Out, float>)
        out[j] = round_to_bfloat16(row[j]);
      else
        out[j] = bfloat16::from_bits(float_to_bfloat16_bits(row[j]));
    }
  }
}
}  // namespace

void round_rows(const float* from, int64_t rows, int64_t cols, int64_t ld, float* to) {
  round_rows_into(from, rows, cols, ld, to);
}
void round_rows(const float* from, int64_t rows, int64_t cols, int64_t ld, bfloat16* to) {
  round_rows_into(from, rows, cols, ld, to);
}

}  // namespace cppgrad::kernels::fast
