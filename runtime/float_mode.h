// Subnormal floats: whether the CPU flushes them to zero (PyTorch's torch.set_flush_denormal).
//
// A float below 2⁻¹²⁶ in magnitude (1.2e-38; 2⁻¹⁰²² for a double) is subnormal. Intel CPUs
// multiply them through a microcode assist, so a matrix product whose operands hold many runs
// several times slower: a softmax over a large vocabulary with peaked logits gives probabilities
// of e⁻⁹⁰ and below, and its gradient carries them into the products of the output layer
// (bench/README.md measures a GPT-2-shaped step both ways).
//
//   cppgrad::set_flush_denormal(true);   // subnormal inputs read as 0, subnormal results become 0
//
// Off by default, as in PyTorch: flushing changes results (values below 1.2e-38 become 0), and
// gradcheck's float64 differences never come near it. It sets the SSE control register's
// flush-to-zero and denormals-are-zero bits on the calling thread at once, and on cppgrad's
// worker threads at the start of their next parallel loop (tensor/iterate.h calls
// adopt_float_mode() in each), which is also where BLAS runs for cppgrad (one thread per block).
#pragma once

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace cppgrad {

// Returns whether the CPU supports it (x86-64: always; elsewhere false and nothing changes), as
// torch.set_flush_denormal does.
bool set_flush_denormal(bool on);
bool flush_denormal();  // the setting

namespace detail {
inline std::atomic<bool> flush_denormal_wanted{false};
}

// Makes this thread's flush bits match the setting: a read of the control register, and a write
// only when they differ.
inline void adopt_float_mode() {
#if defined(__x86_64__) || defined(__i386__)
  constexpr unsigned kFlushBits = 0x8040;  // FTZ (bit 15) and DAZ (bit 6) of MXCSR
  const unsigned csr = _mm_getcsr();
  const bool want = detail::flush_denormal_wanted.load(std::memory_order_relaxed);
  if (((csr & kFlushBits) == kFlushBits) != want) _mm_setcsr(want ? csr | kFlushBits : csr & ~kFlushBits);
#endif
}

}  // namespace cppgrad
