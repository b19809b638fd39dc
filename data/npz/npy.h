// NumPy's .npy and .npz files: how data usually leaves Python for a C++ training program.
//
//   Tensor x = data::load_npy("x.npy");               // np.save("x.npy", x)
//   data::NamedTensors d = data::load_npz("d.npz");   // np.savez("d.npz", x=x, y=y): {"x", "y"}
//   data::save_npy("out.npy", t);                     // np.load("out.npy") reads it back
//
// An .npy file (NumPy's format specification, versions 1.0, 2.0 and 3.0):
//   "\x93NUMPY" major minor, the header's length (u16 LE in 1.0, u32 LE in 2.0 and 3.0),
//   the header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//   padded with spaces and a newline to a multiple of 64 bytes, then the raw elements.
// Supported: float32, float64, int64 and bool ('<f4' '<f8' '<i8' '|b1'), little- or big-endian
// (converted on reading), C or Fortran order (made row-major on reading), any shape including
// () and zero-sized dims. Anything else is refused with an Error naming it: other dtypes (convert
// with x.astype(np.float32) first), structured dtypes and object arrays, whose pickled contents
// are never parsed.
//
// Files are untrusted input: the header is parsed by a small parser for exactly that dict (no
// evaluation), its size is bounded, the shape's element count is checked for overflow and the
// data's size against the file's, a bool byte other than 0 or 1 reads as true, and every fault is
// an Error that names the file, never a crash. An .npz file is a zip archive of .npy files (one
// per array, "name.npy"), stored or deflated; it is read and written with libzip, which checks
// each entry's CRC; entries' declared sizes are checked against the archive's before any memory
// is allocated for them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../dataset.h"

namespace cppgrad::data {

// The largest .npy header accepted: NumPy's own reader refuses headers over 10,000 bytes unless
// told otherwise; this allows a little more for many-dimensional shapes.
inline constexpr uint64_t kMaxNpyHeader = 65536;

// What an .npy header says.
struct NpyHeader {
  DType dtype = kFloat32;
  bool big_endian = false;
  bool fortran_order = false;
  Shape shape;
  uint64_t data_offset = 0;  // where the elements begin: magic, length and header
  uint64_t data_bytes = 0;   // numel × element size
};

// Parses the magic string, version and header dict at the start of `bytes` (which needs to hold
// only the header). `source` names the file in errors.
NpyHeader parse_npy_header(std::span<const uint8_t> bytes, const std::string& source = "<memory>");

Tensor parse_npy(std::span<const uint8_t> bytes, const std::string& source = "<memory>");
Tensor load_npy(const std::string& path);

// Version 1.0 when the header fits (always, but for shapes of thousands of dims), else 2.0;
// little-endian; the header is laid out as NumPy's np.save lays it out, so the bytes are those
// NumPy writes. fortran_order writes the elements column-major, as np.save of an F-ordered array.
std::vector<uint8_t> serialize_npy(const Tensor& t, bool fortran_order = false);
// Writes a temporary file beside `path` and renames it into place.
void save_npy(const std::string& path, const Tensor& t, bool fortran_order = false);

// The arrays of an .npz archive, in the archive's order, named without ".npy".
NamedTensors parse_npz(std::span<const uint8_t> bytes, const std::string& source = "<memory>");
NamedTensors load_npz(const std::string& path);
// As np.savez (stored) or, with compress, np.savez_compressed (deflated).
void save_npz(const std::string& path, const NamedTensors& arrays, bool compress = false);

}  // namespace cppgrad::data
