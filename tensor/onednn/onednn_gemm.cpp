// oneDNN's matmul primitive on bfloat16 inputs with a float32 result: on CPUs with AVX512_BF16
// (vdpbf16ps: pairs of bfloat16 products summed into float32) or AMX it runs at about twice
// float32's rate, and oneDNN picks the instructions itself at run time. A primitive is built per
// shape and layout (the first call of a shape costs a JIT compile) and kept per thread.
//
// Its threads: oneDNN's OpenMP build runs on one thread inside a parallel region (gemm.h's
// blocks) and otherwise on OpenMP's default count, which deterministic mode keeps at 1
// (runtime/parallel.h): the same bits at any thread count, as BLAS gives.
//
// This file is the component cppgrad::onednn, the only one that links oneDNN: it registers its
// product with autocast (tensor/kernels/bf16_hardware.h) when the program starts. Its library
// asks the linker to keep this file (--undefined=cppgrad_onednn_component), which nothing calls.
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "runtime/error.h"
#include "tensor/kernels/bf16_hardware.h"

namespace cppgrad::kernels {

namespace {

std::string_view onednn_isa_name();

bool has_isa(dnnl::cpu_isa isa, dnnl::cpu_isa wanted) {
  // oneDNN's ISA values are masks, each holding the bits of the ones it extends.
  return (static_cast<unsigned>(isa) & static_cast<unsigned>(wanted)) == static_cast<unsigned>(wanted);
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;

// A shape's primitive, and its operands' memory objects, made once: a call only points them at
// its buffers. Building three memory objects and the argument map at each call cost as much as
// a small product: fused attention multiplies thousands of 64-row tiles a step.
struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory a, b, c;
  std::unordered_map<int, dnnl::memory> args;
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
  dnnl::memory a(a_md, cpu_engine(), DNNL_MEMORY_NONE), b(b_md, cpu_engine(), DNNL_MEMORY_NONE),
      c(c_md, cpu_engine(), DNNL_MEMORY_NONE);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
  return cache.emplace(key, Primitive{dnnl::matmul(pd), a, b, c, std::move(args)}).first->second;
}

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
  p.a.set_data_handle(const_cast<bfloat16*>(a));
  p.b.set_data_handle(const_cast<bfloat16*>(b));
  p.c.set_data_handle(c);
  thread_local dnnl::stream stream(cpu_engine());
  p.matmul.execute(stream, p.args);
  stream.wait();
}

[[maybe_unused]] const bool registered = [] {
  register_hardware_bfloat16_gemm({onednn_multiplies_bfloat16, onednn_isa_name, onednn_gemm_bf16});
  return true;
}();

}  // namespace

}  // namespace cppgrad::kernels

// What the component's link option names, so that a static link keeps this file.
extern "C" void cppgrad_onednn_component() {}
