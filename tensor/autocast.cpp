// Autocast's state (per thread) and the choice of the kernel its products run on.
#include "tensor/autocast.h"

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "runtime/reference_mode.h"
#include "tensor/autocast_cache.h"
#include "tensor/kernels/bf16_hardware.h"

namespace cppgrad::autocast {

namespace {
thread_local State g_state;
std::atomic<Kernel> g_kernel{Kernel::Auto};

// CPUID rather than __builtin_cpu_supports: clang 14 knows neither "avx512bf16" nor "amx-bf16".
// AVX512_BF16 is leaf 7 subleaf 1, EAX bit 5; AMX-BF16 is leaf 7 subleaf 0, EDX bit 22.
bool cpuid_reports_bfloat16() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  bool amx_bf16 = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << 22)) != 0;
  bool avx512_bf16 = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 5)) != 0;
  return avx512_bf16 || amx_bf16;
#else
  return false;
#endif
}
}  // namespace

State state() { return g_state; }
bool is_enabled() { return g_state.enabled; }
DType dtype() { return g_state.dtype; }
void set_state(State s) { g_state = s; }

Guard::Guard(DType dtype, bool enabled) : previous_(g_state) {
  CPPGRAD_CHECK(dtype == kBFloat16, "autocast: dtype {} is not supported; CPU autocast runs products in bfloat16",
                dtype_name(dtype));
  // A new region starts an empty cast cache: the last region's copies served its backward.
  if (enabled && !previous_.enabled) clear_cast_cache();
  g_state = {enabled, dtype};
}
Guard::Guard(State s) : previous_(g_state) { g_state = s; }
Guard::~Guard() { g_state = previous_; }

bool cpu_has_bfloat16_instructions() {
  if (const auto* hardware = kernels::hardware_bfloat16_gemm()) return hardware->multiplies_bfloat16();
  return cpuid_reports_bfloat16();
}
bool has_onednn() { return kernels::hardware_bfloat16_gemm() != nullptr; }
std::string_view onednn_isa_name() {
  const auto* hardware = kernels::hardware_bfloat16_gemm();
  return hardware != nullptr ? hardware->isa_name() : "none (cppgrad::onednn is not linked)";
}

void set_kernel(Kernel k) {
  CPPGRAD_CHECK(k != Kernel::OneDnn || has_onednn(),
                "autocast::set_kernel: Kernel::OneDnn needs the component cppgrad::onednn, which this program does not "
                "link (CMake: find_package(cppgrad COMPONENTS onednn), target cppgrad::onednn; pkg-config: cppgrad-onednn)");
  g_kernel.store(k);
}

Kernel kernel() {
  Kernel k = g_kernel.load();
  if (k == Kernel::Auto) {
    // Computed once: the CPU does not change, and oneDNN's query is not free.
    static const Kernel chosen = has_onednn() && cpu_has_bfloat16_instructions() ? Kernel::OneDnn : Kernel::Float32;
    k = chosen;
  }
  if (k == Kernel::OneDnn && reference_mode()) return Kernel::RoundedFloat32;  // its readable form
  return k;
}

std::string_view kernel_name(Kernel k) {
  switch (k) {
    case Kernel::Auto: return "auto";
    case Kernel::OneDnn: return "oneDNN bf16 matmul";
    case Kernel::RoundedFloat32: return "float32 GEMM on bf16-rounded inputs";
    case Kernel::Float32: return "float32 GEMM: no bf16 instructions on this CPU";
  }
  return "?";
}

}  // namespace cppgrad::autocast
