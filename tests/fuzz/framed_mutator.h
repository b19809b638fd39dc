// The custom mutator both libFuzzer targets share: it edits a safetensors file's parts, not its
// raw bytes only, and sometimes grows a header to thousands of entries.
//
// Most byte edits change the header's length, and a header whose length prefix no longer matches
// stops at the first check. So three times in four this mutator edits the header text or the
// data block on its own and rewrites the prefix to fit; otherwise it edits the raw bytes, which
// keeps the prefix checks exercised too. Once in 64 it appends a run of generated entries to
// the header (up to what max_len allows): libFuzzer grows inputs a few bytes at a time and would
// never reach the megabyte headers where a reader's cost per entry shows (the reader was once
// quadratic: 11 s for 40,000 entries).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace fuzzing {

inline uint64_t read_u64_le(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

inline void write_u64_le(uint8_t* p, uint64_t value) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(value >> (8 * i));
}

// Inserts ",\"g<k>\":{...}" entries of empty tensors before the header's closing brace.
inline size_t grow_header(std::vector<uint8_t>& header, size_t room, std::minstd_rand& random) {
  const auto close = std::find(header.rbegin(), header.rend(), '}');
  if (close == header.rend()) return header.size();
  const size_t at = static_cast<size_t>(header.rend() - close) - 1;
  std::string entries;
  const size_t wanted = random() % 60'000 + 1;
  for (size_t k = 0; k < wanted; ++k) {
    std::string entry = ",\"g" + std::to_string(random()) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
    if (entries.size() + entry.size() > room) break;
    entries += entry;
  }
  header.insert(header.begin() + static_cast<std::ptrdiff_t>(at), entries.begin(), entries.end());
  return header.size();
}

inline size_t mutate_framed(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::minstd_rand random(seed);
  const bool framed = size >= 8 && read_u64_le(data) <= size - 8;
  if (!framed || random() % 4 == 0) return LLVMFuzzerMutate(data, size, max_size);

  const size_t header_size = static_cast<size_t>(read_u64_le(data));
  std::vector<uint8_t> header(data + 8, data + 8 + header_size);
  std::vector<uint8_t> block(data + 8 + header_size, data + size);
  if (random() % 64 == 0 && size < max_size) {
    grow_header(header, max_size - size, random);
  } else {
    const bool edit_header = block.empty() || (!header.empty() && random() % 3 != 0);
    std::vector<uint8_t>& part = edit_header ? header : block;
    const size_t other_size = edit_header ? block.size() : header.size();
    if (part.empty() || size >= max_size) return LLVMFuzzerMutate(data, size, max_size);
    const size_t capacity = max_size - 8 - other_size;  // > part.size(), since size < max_size
    const size_t old_size = part.size();
    part.resize(capacity);
    part.resize(LLVMFuzzerMutate(part.data(), old_size, capacity));
  }
  write_u64_le(data, header.size());
  std::copy(header.begin(), header.end(), data + 8);
  std::copy(block.begin(), block.end(), data + 8 + header.size());
  return 8 + header.size() + block.size();
}

}  // namespace fuzzing
