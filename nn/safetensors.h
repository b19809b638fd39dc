// Reading and writing safetensors files: the open checkpoint format of the Hugging Face
// ecosystem, which holds only tensors and never code.
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header][raw little-endian tensor data]
//   header: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//            "__metadata__": {"key": "value"}}
// Offsets are relative to the start of the data block.
//
// Every file is treated as untrusted: each field is checked, and any violation is a
// cppgrad::Error that names the file and what is wrong, never a crash or an out-of-bounds read.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "../tensor/tensor.h"

namespace cppgrad::nn {

using NamedTensors = cppgrad::NamedTensors;  // name → tensor, in order (tensor/state_dict.h)
using Metadata = std::map<std::string, std::string>;

struct SafetensorsContents {
  NamedTensors tensors;  // in the order of their data offsets
  Metadata metadata;     // the "__metadata__" entry, if any

  bool contains(const std::string& name) const;
  const Tensor& at(const std::string& name) const;  // throws Error naming the missing key
};

// The largest header accepted (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

std::vector<uint8_t> serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata = {});
SafetensorsContents parse_safetensors(std::span<const uint8_t> bytes, const std::string& source = "<memory>");

// Writes to a temporary file in the same directory (".<name>.tmp-<pid>-XXXXXX"), then renames it
// into place: a crash never leaves a half-written checkpoint under `path`. A temporary left by a
// save that was killed mid-write is removed by the next save of the same path, once its process
// has gone.
void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});
SafetensorsContents load_safetensors(const std::string& path);

}  // namespace cppgrad::nn
