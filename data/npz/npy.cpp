// NumPy .npy files: the header parser, the conversions to a row-major little-endian tensor, and
// the writer. .npz archives are in npz.cpp.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>

#include <fcntl.h>
#include <unistd.h>

#include "data/npz/npy.h"
#include "runtime/files.h"
#include "tensor/kernels.h"

namespace cppgrad::data {

static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian machine");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLength = 6;
constexpr size_t kAlign = 64;         // np.save pads the header so that the data starts 64-aligned
constexpr size_t kGrowthDigits = 21;  // np.save leaves room for the first dim to grow to 21 digits

// A parser for exactly the dict np.save writes, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// Whitespace may appear between tokens, keys in any order, ints with Python 2's L suffix.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  NpyHeader parse() {
    NpyHeader h;
    std::optional<std::string> descr;
    std::optional<bool> fortran;
    std::optional<Shape> shape;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = string_literal("a key");
      expect(':');
      skip_space();
      if (key == "descr") {
        if (descr) fail("the key 'descr' appears twice");
        if (peek() == '[')
          fail("structured dtypes (a list of fields as 'descr') are not supported; save each field as its own array");
        descr = string_literal("'descr'");
      } else if (key == "fortran_order") {
        if (fortran) fail("the key 'fortran_order' appears twice");
        fortran = boolean();
      } else if (key == "shape") {
        if (shape) fail("the key 'shape' appears twice");
        shape = tuple();
      } else {
        fail(fmt::format("unexpected key '{}' in the header (expected 'descr', 'fortran_order' and 'shape')", key));
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail(fmt::format("expected ',' or '}}' after the value of '{}', found {}", key, found()));
    }
    ++pos_;
    skip_space();
    if (pos_ != text_.size()) fail(fmt::format("unexpected {} after the header dict", found()));
    if (!descr || !fortran || !shape)
      fail(fmt::format("the header lacks the key '{}'", !descr ? "descr" : !fortran ? "fortran_order" : "shape"));
    set_dtype(*descr, h);
    h.fortran_order = *fortran;
    h.shape = *shape;
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw Error(fmt::format("npy: {}: {}", source_, what)); }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  std::string found() const {
    if (pos_ >= text_.size()) return "the end of the header";
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    return c >= 0x20 && c < 0x7f ? fmt::format("'{}' at byte {}", static_cast<char>(c), pos_)
                                 : fmt::format("byte 0x{:02x} at byte {}", int{c}, pos_);
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(fmt::format("expected '{}', found {}", c, found()));
    ++pos_;
  }

  // 'text' or "text", without escapes (no key or dtype NumPy writes has one).
  std::string string_literal(std::string_view what) {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(fmt::format("expected a string as {}, found {}", what, found()));
    const size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') fail(fmt::format("escape sequences in {} are not supported", what));
      ++pos_;
    }
    if (pos_ >= text_.size()) fail(fmt::format("unterminated string in {}", what));
    return std::string(text_.substr(start, pos_++ - start));
  }

  bool boolean() {
    for (auto [word, value] : {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}})
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    fail(fmt::format("expected True or False as 'fortran_order', found {}", found()));
  }

  int64_t integer() {
    skip_space();
    if (peek() == '-') fail(fmt::format("negative dimension in 'shape' at byte {}", pos_));
    if (peek() < '0' || peek() > '9') fail(fmt::format("expected a dimension in 'shape', found {}", found()));
    // Python (and so NumPy's reader) refuses an integer with a leading zero, such as 02.
    if (peek() == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' && text_[pos_ + 1] <= '9')
      fail(fmt::format("a dimension in 'shape' has a leading zero at byte {} (Python reads no such integer)", pos_));
    int64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      const int digit = peek() - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) fail("a dimension in 'shape' overflows int64");
      value = value * 10 + digit;
      ++pos_;
    }
    if (peek() == 'L' || peek() == 'l') ++pos_;  // Python 2 longs, in files written by old NumPy
    return value;
  }

  // (), (5,), (2, 3), (2, 3,): a tuple of ints. (5) is an int in Python, and not a shape.
  Shape tuple() {
    if (peek() != '(') fail(fmt::format("expected a tuple as 'shape', found {}", found()));
    ++pos_;
    Shape shape;
    bool trailing_comma = false;
    while (true) {
      skip_space();
      if (peek() == ')') break;
      if (shape.size() >= 64) fail("'shape' has more than 64 dimensions");
      shape.push_back(integer());
      skip_space();
      trailing_comma = peek() == ',';
      if (trailing_comma) {
        ++pos_;
      } else if (peek() != ')') {
        fail(fmt::format("expected ',' or ')' in 'shape', found {}", found()));
      }
    }
    ++pos_;
    if (shape.size() == 1 && !trailing_comma) fail("'shape' (n) is an int, not a tuple: a 1-d shape is written (n,)");
    return shape;
  }

  void set_dtype(const std::string& descr, NpyHeader& h) const {
    if (descr.find('O') != std::string::npos)
      fail(fmt::format("object arrays ('descr' '{}') are not supported: they hold pickled Python objects, which are "
                       "never loaded", descr));
    // numpy.dtype's spellings of the four dtypes: a byte order ('<' little, '>' big, '=' native,
    // '|' not applicable, or none: native) and a code ('f4', 'f', 'float32', ...). Native is
    // little-endian on every CPU cppgrad runs on (x86-64).
    std::string_view code = descr;
    char order = '=';
    if (!code.empty() && (code[0] == '<' || code[0] == '>' || code[0] == '=' || code[0] == '|')) {
      order = code[0];
      code.remove_prefix(1);
    }
    auto unsupported = [&] {
      fail(fmt::format("dtype '{}' is not supported: float32 ('<f4'), float64 ('<f8'), int64 ('<i8') and bool ('|b1') "
                       "are, in any byte order; convert with .astype() before saving", descr));
    };
    auto is = [&](std::initializer_list<std::string_view> spellings) {
      return std::find(spellings.begin(), spellings.end(), code) != spellings.end();
    };
    if (is({"b1", "?", "bool"})) {
      h.dtype = kBool;  // one byte: every byte order reads the same
      return;
    }
    if (is({"f4", "f", "float32"})) h.dtype = kFloat32;
    else if (is({"f8", "d", "float64"})) h.dtype = kFloat64;
    else if (is({"i8", "q", "l", "int64"})) h.dtype = kInt64;
    else unsupported();
    h.big_endian = order == '>';
  }

  std::string_view text_;
  const std::string& source_;
  size_t pos_ = 0;
};

uint32_t read_le(const uint8_t* p, int bytes) {
  uint32_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

Shape reversed(Shape shape) {
  std::reverse(shape.begin(), shape.end());
  return shape;
}

std::vector<int64_t> reversed_dims(int64_t ndim) {
  std::vector<int64_t> dims;
  for (int64_t d = ndim - 1; d >= 0; --d) dims.push_back(d);
  return dims;
}

// np.save's spelling of a shape: (), (5,), (2, 3).
std::string shape_repr(const Shape& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

std::string_view descr_of(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "<f4";
    case DType::Float64: return "<f8";
    case DType::Int64: return "<i8";
    case DType::Bool: return "|b1";
    case DType::BFloat16: break;  // NumPy has no bfloat16 (save_npy refuses it first)
  }
  return "?";
}

}  // namespace

static uint64_t npy_header_end(std::span<const uint8_t> bytes, const std::string& source) {
  auto fail = [&](const std::string& what) -> uint64_t { throw Error(fmt::format("npy: {}: {}", source, what)); };
  if (bytes.size() < kMagicLength + 2 || std::memcmp(bytes.data(), kMagic, kMagicLength) != 0)
    return fail("not an .npy file (it does not begin with \"\\x93NUMPY\")");
  const int major = bytes[6], minor = bytes[7];
  if (!(major >= 1 && major <= 3 && minor == 0))
    return fail(fmt::format("format version {}.{} is not supported (1.0, 2.0 and 3.0 are)", major, minor));
  const size_t length_size = major == 1 ? 2 : 4;
  if (bytes.size() < kMagicLength + 2 + length_size) return fail("the file ends inside the header's length");
  const uint64_t header_length = read_le(bytes.data() + 8, static_cast<int>(length_size));
  if (header_length > kMaxNpyHeader)
    return fail(fmt::format("the header's length {} exceeds the limit of {} bytes", header_length, kMaxNpyHeader));
  return kMagicLength + 2 + length_size + header_length;
}

NpyHeader parse_npy_header(std::span<const uint8_t> bytes, const std::string& source) {
  const uint64_t end = npy_header_end(bytes, source);
  if (bytes.size() < end)
    throw Error(fmt::format("npy: {}: the file ends inside the header ({} bytes, the header ends at {})", source,
                            bytes.size(), end));
  const size_t start = bytes[6] == 1 ? 10 : 12;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + start, end - start);
  NpyHeader h = HeaderParser(text, source).parse();
  h.data_offset = end;
  // The product of the non-zero dims too: a zero-sized array's strides are still products of
  // its other dims, and (0, 2^40, 2^40) would overflow them.
  int64_t count = 1, spanned = 1;
  for (int64_t d : h.shape)
    if (__builtin_mul_overflow(count, d, &count) || (d != 0 && __builtin_mul_overflow(spanned, d, &spanned)))
      throw Error(fmt::format("npy: {}: shape {} has more elements than int64 counts", source, shape_str(h.shape)));
  if (__builtin_mul_overflow(static_cast<uint64_t>(count), dtype_size(h.dtype), &h.data_bytes))
    throw Error(fmt::format("npy: {}: shape {} is too large", source, shape_str(h.shape)));
  return h;
}

static Tensor npy_empty_storage(const NpyHeader& h) { return empty(h.fortran_order ? reversed(h.shape) : h.shape, h.dtype); }

static Tensor npy_finish(const Tensor& raw, const NpyHeader& h) {
  auto* bytes = static_cast<uint8_t*>(raw.raw_data());
  const size_t item = dtype_size(h.dtype);
  const auto n = static_cast<size_t>(raw.numel());
  if (h.dtype == kBool) {
    // Any byte but 0 is true, as NumPy reads it; a C++ bool must hold exactly 0 or 1.
    for (size_t i = 0; i < n; ++i) bytes[i] = bytes[i] != 0;
  } else if (h.big_endian) {
    for (size_t i = 0; i < n; ++i) std::reverse(bytes + i * item, bytes + (i + 1) * item);
  }
  if (h.fortran_order && h.shape.size() > 1)
    return kernels::contiguous(kernels::permute(raw, reversed_dims(static_cast<int64_t>(h.shape.size()))));
  return raw;
}

Tensor parse_npy(std::span<const uint8_t> bytes, const std::string& source) {
  const NpyHeader h = parse_npy_header(bytes, source);
  const uint64_t available = bytes.size() - h.data_offset;
  if (available != h.data_bytes)
    throw Error(fmt::format("npy: {}: a {} array of shape {} needs {} bytes of data, the file has {}", source,
                            dtype_name(h.dtype), shape_str(h.shape), h.data_bytes, available));
  Tensor raw = npy_empty_storage(h);
  if (h.data_bytes > 0) std::memcpy(raw.raw_data(), bytes.data() + h.data_offset, h.data_bytes);
  return npy_finish(raw, h);
}

Tensor load_npy(const std::string& path) {
  // The header first, then the data straight into the tensor: no second copy of a large array.
  files::InputFile file(path, "load_npy");
  const auto file_size = static_cast<uint64_t>(file.size());
  std::vector<uint8_t> head(std::min<uint64_t>(file_size, 12));
  head.resize(file.read(head.data(), head.size()));
  const uint64_t header_end = npy_header_end(head, path);
  if (header_end > file_size)
    throw Error(fmt::format("npy: {}: the file ends inside the header ({} bytes, the header ends at {})", path,
                            file_size, header_end));
  const size_t prefix = head.size();
  head.resize(header_end);
  if (file.read(head.data() + prefix, header_end - prefix) != header_end - prefix)
    throw Error(fmt::format("npy: {}: the file ends inside the header", path));
  const NpyHeader h = parse_npy_header(head, path);
  if (file_size - header_end != h.data_bytes)
    throw Error(fmt::format("npy: {}: a {} array of shape {} needs {} bytes of data, the file has {}", path,
                            dtype_name(h.dtype), shape_str(h.shape), h.data_bytes, file_size - header_end));
  Tensor raw = npy_empty_storage(h);
  if (file.read(raw.raw_data(), h.data_bytes) != h.data_bytes)
    throw Error(fmt::format("npy: {}: the file ends inside the data (it shrank while it was read)", path));
  return npy_finish(raw, h);
}

std::vector<uint8_t> serialize_npy(const Tensor& t, bool fortran_order) {
  CPPGRAD_CHECK(t.defined(), "save_npy: the tensor is undefined");
  CPPGRAD_CHECK(t.dtype() != kBFloat16, "save_npy: NumPy has no bfloat16; save x.to(kFloat32) (exact: every bfloat16 is a float32)");
  // The header as np.save writes it: keys sorted, room for the first dim to grow, then spaces and
  // a newline up to a multiple of 64 bytes.
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': {}, 'shape': {}, }}", descr_of(t.dtype()),
                                 fortran_order ? "True" : "False", shape_repr(t.shape()));
  if (t.dim() > 0) {
    const std::string growing = std::to_string(fortran_order ? t.shape().back() : t.shape().front());
    dict.append(kGrowthDigits - std::min(kGrowthDigits, growing.size()), ' ');
  }
  // np.save pads with 1 to 64 spaces, then a newline, so that the data starts 64-aligned.
  auto header_length = [&](size_t prefix) {
    const size_t with_newline = dict.size() + 1;
    return with_newline + (kAlign - (prefix + with_newline) % kAlign);
  };
  int major = 1;
  size_t prefix = kMagicLength + 2 + 2;
  size_t padded = header_length(prefix);
  if (padded > 0xffff) {  // too long for version 1.0's u16 length
    major = 2;
    prefix = kMagicLength + 2 + 4;
    padded = header_length(prefix);
  }
  const Tensor data = fortran_order && t.dim() > 1 ? kernels::contiguous(kernels::permute(t, reversed_dims(t.dim())))
                                                   : kernels::contiguous(t);
  const size_t data_bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
  std::vector<uint8_t> out(prefix + padded + data_bytes, ' ');  // the padding spaces in place
  std::memcpy(out.data(), kMagic, kMagicLength);
  out[6] = static_cast<uint8_t>(major);
  out[7] = 0;
  for (size_t i = 0; i < prefix - kMagicLength - 2; ++i) out[8 + i] = static_cast<uint8_t>(padded >> (8 * i));
  std::memcpy(out.data() + prefix, dict.data(), dict.size());
  out[prefix + padded - 1] = '\n';
  if (data_bytes > 0) std::memcpy(out.data() + prefix + padded, data.raw_data(), data_bytes);
  return out;
}

static void write_file_atomically(const std::string& path, std::span<const uint8_t> bytes, std::string_view op) {
  const std::filesystem::path destination(path);
  CPPGRAD_CHECK(destination.has_filename(), "{}: '{}' names no file", op, path);
  const std::filesystem::path dir = destination.has_parent_path() ? destination.parent_path() : ".";
  // A new name beside the destination, opened as open() would create any file (0666 less the
  // umask); renamed into place only once complete, so a crash never leaves half a file at `path`.
  static std::atomic<uint64_t> counter{0};
  const std::string temp =
      (dir / fmt::format(".{}.tmp-{}-{}", destination.filename().string(), ::getpid(), counter++)).string();
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  CPPGRAD_CHECK(fd >= 0, "{}: cannot create a temporary file in '{}': {}", op, dir.string(), std::strerror(errno));
  auto fail = [&](std::string_view what) {
    const int error = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    throw Error(fmt::format("{}: {} '{}': {}", op, what, path, std::strerror(error)));
  };
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) fail("cannot write");
    bytes = bytes.subspan(static_cast<size_t>(written));
  }
  if (::fsync(fd) != 0) fail("cannot sync");
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw Error(fmt::format("{}: cannot close '{}': {}", op, path, std::strerror(error)));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw Error(fmt::format("{}: cannot rename into '{}': {}", op, path, std::strerror(error)));
  }
}

void save_npy(const std::string& path, const Tensor& t, bool fortran_order) {
  write_file_atomically(path, serialize_npy(t, fortran_order), "save_npy");
}

}  // namespace cppgrad::data
