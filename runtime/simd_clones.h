// Kernels compiled several times, for the vector units a CPU may have, the best chosen when the
// program starts (GCC's function multi-versioning: an ifunc resolver asks the CPU once).
//
// The library is built for the x86-64 baseline (SSE2), so that it runs on every x86-64 CPU Debian
// supports; a handful of loops that are compute-bound, not memory-bound (the vectorised exp of
// softmax, Adam's update), are marked CPPGRAD_SIMD_CLONES and also get an AVX2 + FMA version
// (x86-64-v3: Haswell, Zen and later) and an AVX-512 one (x86-64-v4). The library is compiled
// with -ffp-contract=off, so no clone fuses a multiply and an add that the others round twice;
// a multiply-add meant to be fused is written std::fma, rounded once by every clone (the
// baseline's by a call into libm, the others' by the instruction). An elementwise result is then
// the same bits whichever clone runs. Reductions are not: a wider vector adds its partial sums in
// another order.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define CPPGRAD_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPPGRAD_SIMD_CLONES  // elsewhere (clang's fuzz build, other CPUs): one version, the baseline
#endif
