// A counter-based random stream: word i of a stream with key k is mix64(k + i·γ), so any
// element's draw can be made (again) on its own, in any order, on any thread. Dropout uses it,
// and the fused attention regenerates its dropout mask block by block in the backward pass.
#pragma once

#include <cstdint>

namespace cppgrad::kernels {

// splitmix64's finaliser: a bijection of 64-bit words whose outputs look independent even for
// consecutive inputs.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// p · 2^24: element i is dropped when the top 24 bits of its word (as many random bits as a
// float has) fall below it.
inline uint64_t dropout_threshold(double p) { return static_cast<uint64_t>(p * 16777216.0); }

inline bool dropout_keeps(uint64_t key, uint64_t index, uint64_t threshold) {
  return (mix64(key + index * 0x9e3779b97f4a7c15ULL) >> 40) >= threshold;
}

// Dropout keyed by example (tensor/keyed_dropout.h): each example has a stream of its own, and
// an element of it takes the word of its position, not of its flat index. The position is
// (lead, row, col): its last two coordinates within the example, and the ones before them
// flattened; the word packs them in fixed fields, lead·2^40 + row·2^20 + col. So a sequence
// padded to another length (each rank pads its own share of a batch) leaves every element's
// word where it was, and a (B·H, T, S) tensor gives its elements the words (B, H, T, S) gives.
inline constexpr int64_t kExampleRowLimit = int64_t{1} << 20;   // rows and cols: below
inline constexpr int64_t kExampleLeadLimit = int64_t{1} << 24;  // leads: below
inline uint64_t example_word(int64_t lead, int64_t row, int64_t col) {
  return (static_cast<uint64_t>(lead) << 40) | (static_cast<uint64_t>(row) << 20) | static_cast<uint64_t>(col);
}

}  // namespace cppgrad::kernels
