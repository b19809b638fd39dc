// Reading and writing safetensors files (the layout is described in safetensors.h).
//
// The reader trusts nothing in the file. It checks, in this order, stopping at the first fault:
//   1. the length prefix: 8 bytes present, N within kMaxSafetensorsHeader and within the file;
//   2. the header is valid UTF-8, then valid JSON with no duplicate key in any object;
//   3. (read entry by entry as the JSON parser goes, so a fault here may be reported before a
//      JSON fault further on) the top level is an object; "__metadata__" maps strings to strings; every other entry is
//      an object with exactly dtype (a known name), shape (non-negative integers whose product
//      fits int64) and data_offsets (two non-negative integers, begin <= end), and
//      numel × element size equals end - begin; no array has more than 64 values and no inner
//      object more than 65,536 keys, refused as they are read, so that the parse holds at most a
//      small multiple of the header;
//   4. sorted by begin, the tensors tile the data block: the first begins at 0, each begins
//      where the one before ended (no overlap, no hole), the last ends at the block's end;
//   5. every BOOL byte is 0 or 1.
// Only then does it read tensor bytes, each into fresh storage (the file's bytes may sit at any
// alignment). Each fault is a cppgrad::Error "op: source: what is wrong".
#include "nn/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/files.h"
#include "tensor/kernels.h"

namespace cppgrad::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data, which this code copies byte for byte");

namespace {

using Json = nlohmann::json;

constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// ---- dtypes ----------------------------------------------------------------------------------

struct DTypeName {
  std::string_view name;
  DType dtype;
};
constexpr DTypeName kSupportedDTypes[] = {
    {"F32", kFloat32}, {"F64", kFloat64}, {"I64", kInt64}, {"BOOL", kBool}, {"BF16", kBFloat16}};
// The format's other dtypes: a file holding them is well-formed, but cppgrad has no such type.
constexpr std::string_view kUnsupportedDTypes[] = {
    "F16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",
    "I8",  "U8",  "I16",     "U16",     "I32",     "U32",     "U64",     "C64"};

std::string_view safetensors_dtype_name(DType dtype) {
  for (const DTypeName& d : kSupportedDTypes)
    if (d.dtype == dtype) return d.name;
  throw Error("safetensors: unknown cppgrad dtype");
}

// ---- small helpers ---------------------------------------------------------------------------

// A name or value from the file, quoted for an error message: a short excerpt (it may be a
// hostile 10 MB name), in double quotes.
std::string quote(std::string_view text) { return fmt::format("\"{}\"", excerpt(text)); }

// The offset of the first byte that breaks UTF-8 (utf8_char_length's rules, RFC 3629's: no
// overlong forms, no UTF-16 surrogates, nothing above U+10FFFF), or npos when all of `text` is valid.
size_t first_invalid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = utf8_char_length(text.substr(i));
    if (length == 0) return i;
    i += length;
  }
  return std::string_view::npos;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

void append_u64_le(std::vector<uint8_t>& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

// ---- reading: the header ---------------------------------------------------------------------

// A valid header is an object of objects of arrays of numbers: three levels of containers.
constexpr size_t kMaxHeaderNesting = 3;
// No valid header has a longer array (a shape of more than 64 dimensions: NumPy stops at 64) or
// an inner object of more keys (a tensor has 3 fields; __metadata__ of that many strings is
// unheard of). Both bound what the parse holds to a small multiple of the header: a value of
// nlohmann-json takes 16 bytes and an object's key ~80, for as little as 2 bytes of text ("1,"),
// so a header of one 50-million-element array would otherwise take 1.6 GB to refuse.
constexpr size_t kMaxHeaderArray = 64;
constexpr size_t kMaxHeaderObjectKeys = 65'536;

// Reads the header from nlohmann-json's SAX events, in time linear in the header, one top-level
// entry at a time: as soon as an entry's value is complete, it goes to `on_entry` and is dropped
// from the tree, so the tree never holds more than one entry's fields (a whole tree can take
// more memory than the tensors read from it). nlohmann-json's own DOM parser keeps the last of
// duplicate keys silently, and its callback parser scans the enclosing object after each nested
// one ends, which is quadratic in the entries (results/2026-11-23-safetensors-load.md). Here
// each key goes straight into its object's map, so a duplicate is seen on
// insertion (the top level keeps its keys, with null values, for that); nesting deeper than a
// valid header's is refused.
class HeaderBuilder {
 public:
  using EntryHandler = std::function<void(const std::string& name, const Json& value)>;
  HeaderBuilder(const Faults& faults, EntryHandler on_entry) : faults_(faults), on_entry_(std::move(on_entry)) {}

  const Json& root() const { return root_; }

  bool null() { return add(Json(nullptr)); }
  bool boolean(bool value) { return add(Json(value)); }
  bool number_integer(Json::number_integer_t value) { return add(Json(value)); }
  bool number_unsigned(Json::number_unsigned_t value) { return add(Json(value)); }
  bool number_float(Json::number_float_t value, const Json::string_t& /*text*/) { return add(Json(value)); }
  bool string(Json::string_t& value) { return add(Json(std::move(value))); }
  bool binary(Json::binary_t& value) { return add(Json(std::move(value))); }  // never in JSON text

  bool start_object(std::size_t /*size*/) { return open(Json::value_t::object); }
  bool start_array(std::size_t /*size*/) { return open(Json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(Json::string_t& key) {
    auto& object = *open_.back()->get_ptr<Json::object_t*>();
    if (open_.size() > 1 && object.size() == kMaxHeaderObjectKeys) {
      faults_.fail("header has an object of more than {} keys (in {}), which no safetensors header has",
                   kMaxHeaderObjectKeys, quote(*entry_name_));
    }
    auto [slot, inserted] = object.try_emplace(std::move(key));
    if (!inserted) faults_.fail("header has the duplicate key {}", quote(slot->first));
    if (open_.size() == 1) entry_name_ = &slot->first, entry_slot_ = &slot->second;
    value_slot_ = &slot->second;
    return true;
  }

  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/, const nlohmann::detail::exception& e) {
    // The parser's message repeats the last token read: an unterminated string is the rest of
    // the header, so only an excerpt is shown.
    faults_.fail("header is not valid JSON: {}", excerpt(e.what(), 160));
  }

 private:
  // Puts a value where the next one goes: the root, the end of the open array, or the slot of
  // the key just read. Returns where it now lives.
  Json* place(Json value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    if (open_.back()->is_array()) {
      auto& array = *open_.back()->get_ptr<Json::array_t*>();
      if (open_.size() == 1) faults_.fail("header's top level is a JSON array, not an object");
      if (array.size() == kMaxHeaderArray) {
        faults_.fail("header has an array of more than {} values (in {}), which no safetensors header has: a shape "
                     "has at most {} dimensions", kMaxHeaderArray, quote(*entry_name_), kMaxHeaderArray);
      }
      array.push_back(std::move(value));
      return &array.back();
    }
    *value_slot_ = std::move(value);
    return value_slot_;
  }
  bool add(Json value) {
    place(std::move(value));
    if (open_.size() == 1) finish_entry();
    return true;
  }
  // The value of a top-level key is complete: hand it over and keep only the key.
  void finish_entry() {
    if (!open_.back()->is_object()) return;  // a top-level array: refused after the parse
    on_entry_(*entry_name_, *entry_slot_);
    *entry_slot_ = nullptr;
  }
  bool open(Json::value_t type) {
    if (open_.size() == kMaxHeaderNesting)
      faults_.fail("header nests containers more than {} deep, which no safetensors header does", kMaxHeaderNesting);
    // A container is only pushed to while it is the innermost open one, so the pointers to the
    // open containers stay valid (an array's elements move only when it grows).
    open_.push_back(place(Json(type)));
    return true;
  }
  bool close() {
    open_.pop_back();
    if (open_.size() == 1) finish_entry();
    return true;
  }

  const Faults& faults_;
  EntryHandler on_entry_;
  Json root_;
  const std::string* entry_name_ = nullptr;  // the top-level key being read, and its value
  Json* entry_slot_ = nullptr;
  std::vector<Json*> open_;     // the containers not yet closed, outermost first
  Json* value_slot_ = nullptr;  // where the value of the key just read goes
};

// A JSON value that must be a non-negative integer (`what` names it in errors).
uint64_t read_index(const Json& value, const Faults& faults, const std::string& what) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer()) {
    const auto signed_value = value.get<int64_t>();
    if (signed_value == 0) return 0;  // written "-0"
    faults.fail("{} is negative ({})", what, signed_value);
  }
  if (value.is_number_float()) faults.fail("{} is not an integer within 64 bits ({})", what, value.dump());
  faults.fail("{} is a JSON {}, not an integer", what, value.type_name());
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;  // byte offsets into the data block
  uint64_t end;
};

DType read_dtype(const Json& value, const Faults& faults, const std::string& name) {
  if (!value.is_string()) faults.fail("tensor {}: dtype is a JSON {}, not a string", quote(name), value.type_name());
  const auto& text = value.get_ref<const std::string&>();
  for (const DTypeName& d : kSupportedDTypes)
    if (d.name == text) return d.dtype;
  if (std::find(std::begin(kUnsupportedDTypes), std::end(kUnsupportedDTypes), text) != std::end(kUnsupportedDTypes))
    faults.fail("tensor {}: unsupported dtype {} (cppgrad reads F32, F64, BF16, I64 and BOOL)", quote(name), text);
  faults.fail("tensor {}: unknown dtype {}", quote(name), quote(text));
}

// The number of bytes a tensor of this shape and dtype holds. Refuses a shape whose non-zero
// sizes multiply past int64, even when a 0 elsewhere makes it empty: its strides would overflow.
uint64_t byte_size(const Shape& shape, DType dtype, const Faults& faults, const std::string& name) {
  uint64_t product = 1;
  bool has_zero = false;
  for (int64_t size : shape) {
    if (size == 0) {
      has_zero = true;
      continue;
    }
    if (__builtin_mul_overflow(product, static_cast<uint64_t>(size), &product) || product > kInt64Max)
      faults.fail("tensor {}: the sizes of shape {} multiply past the int64 range", quote(name), shape_str(shape));
  }
  const uint64_t numel = has_zero ? 0 : product;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(numel, dtype_size(dtype), &bytes))
    faults.fail("tensor {}: {} elements of {} overflow a 64-bit byte count", quote(name), numel, dtype_name(dtype));
  return bytes;
}

Entry read_entry(const std::string& name, const Json& value, const Faults& faults) {
  const std::string q = quote(name);
  if (!value.is_object()) faults.fail("tensor {}: entry is a JSON {}, not an object", q, value.type_name());
  for (const auto& field : value.items()) {
    const std::string& key = field.key();
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      faults.fail("tensor {}: unexpected field {} (an entry has exactly dtype, shape and data_offsets)", q,
                  quote(key));
    }
  }
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!value.contains(field)) faults.fail("tensor {}: entry lacks the field \"{}\"", q, field);

  Entry entry{name, read_dtype(value["dtype"], faults, name), {}, 0, 0};

  const Json& shape = value["shape"];
  if (!shape.is_array()) faults.fail("tensor {}: shape is a JSON {}, not an array", q, shape.type_name());
  for (size_t d = 0; d < shape.size(); ++d) {
    const uint64_t size = read_index(shape[d], faults, fmt::format("tensor {}: shape[{}]", q, d));
    if (size > kInt64Max) faults.fail("tensor {}: shape[{}] = {} is beyond the int64 range", q, d, size);
    entry.shape.push_back(static_cast<int64_t>(size));
  }

  const Json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    faults.fail("tensor {}: data_offsets must be an array of two integers, got {}", q,
                quote(offsets.dump(-1, ' ', false, Json::error_handler_t::replace)));
  }
  entry.begin = read_index(offsets[0], faults, fmt::format("tensor {}: data_offsets[0]", q));
  entry.end = read_index(offsets[1], faults, fmt::format("tensor {}: data_offsets[1]", q));
  if (entry.begin > entry.end)
    faults.fail("tensor {}: data_offsets [{}, {}] begin after they end", q, entry.begin, entry.end);

  const uint64_t needed = byte_size(entry.shape, entry.dtype, faults, name);
  if (needed != entry.end - entry.begin) {
    faults.fail("tensor {}: shape {} of {} needs {} bytes, but data_offsets [{}, {}] span {}", q,
                shape_str(entry.shape), dtype_name(entry.dtype), needed, entry.begin, entry.end,
                entry.end - entry.begin);
  }
  return entry;
}

Metadata read_metadata(const Json& value, const Faults& faults) {
  if (!value.is_object()) faults.fail("__metadata__ is a JSON {}, not an object", value.type_name());
  Metadata metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string())
      faults.fail("__metadata__ value for key {} is a JSON {}, not a string", quote(key), item.type_name());
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

// Sorted by begin, the tensors must tile the data block exactly.
void check_layout(std::vector<Entry>& entries, uint64_t data_size, const Faults& faults) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;  // where the next tensor must begin
  for (const Entry& e : entries) {
    if (e.begin < expected) {
      faults.fail("tensor {} at data_offsets [{}, {}] overlaps the tensor before it, which ends at {}",
                  quote(e.name), e.begin, e.end, expected);
    }
    if (e.begin > expected) {
      faults.fail("a hole of {} bytes lies before tensor {}, which begins at {} where {} was expected",
                  e.begin - expected, quote(e.name), e.begin, expected);
    }
    expected = e.end;
  }
  if (expected > data_size)
    faults.fail("the tensors need {} bytes of data, but the data block holds only {}", expected, data_size);
  if (expected < data_size) {
    faults.fail("the data block holds {} bytes, {} more than the tensors' {}", data_size, data_size - expected,
                expected);
  }
}

SafetensorsContents parse(std::span<const uint8_t> bytes, const Faults& faults) {
  // 1. the length prefix
  if (bytes.size() < 8) faults.fail("the file has {} bytes, too few for the 8-byte header length", bytes.size());
  const uint64_t header_size = read_u64_le(bytes.data());
  if (header_size > kMaxSafetensorsHeader)
    faults.fail("header length {} is over the limit of {} bytes", header_size, kMaxSafetensorsHeader);
  if (header_size > bytes.size() - 8) {
    faults.fail("header length {} runs past the end of the file ({} bytes after the length)", header_size,
                bytes.size() - 8);
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes.data() + 8), header_size);
  const std::span<const uint8_t> data = bytes.subspan(8 + header_size);

  // 2. UTF-8, then JSON
  if (size_t bad = first_invalid_utf8(header); bad != std::string_view::npos)
    faults.fail("header is not valid UTF-8 (byte {} of the header)", bad);
  // 3. the entries, each read as soon as the parser has it
  SafetensorsContents contents;
  std::vector<Entry> entries;
  HeaderBuilder builder(faults, [&](const std::string& name, const Json& value) {
    if (name == "__metadata__") {
      contents.metadata = read_metadata(value, faults);
    } else {
      entries.push_back(read_entry(name, value, faults));
    }
  });
  if (!Json::sax_parse(header.begin(), header.end(), &builder)) faults.fail("header is not valid JSON");
  if (!builder.root().is_object())
    faults.fail("header's top level is a JSON {}, not an object", builder.root().type_name());

  // 4. the layout
  check_layout(entries, data.size(), faults);

  // 5. the bytes, each tensor into fresh storage
  for (const Entry& e : entries) {
    const std::span<const uint8_t> source = data.subspan(e.begin, e.end - e.begin);
    if (e.dtype == kBool) {
      auto bad = std::find_if(source.begin(), source.end(), [](uint8_t b) { return b > 1; });
      if (bad != source.end()) {
        faults.fail("tensor {}: bool element {} holds the byte {} (only 0 and 1 are valid)", quote(e.name),
                    bad - source.begin(), *bad);
      }
    }
    Tensor t = empty(e.shape, e.dtype);
    if (!source.empty()) std::memcpy(t.raw_data(), source.data(), source.size());
    contents.tensors.emplace_back(e.name, std::move(t));
  }
  return contents;
}

// ---- writing ---------------------------------------------------------------------------------

std::string json_string(const std::string& text) { return Json(text).dump(); }  // valid UTF-8 by now

std::vector<uint8_t> serialize(const NamedTensors& tensors, const Metadata& metadata, std::string_view op) {
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors) {
    CPPGRAD_CHECK(name != "__metadata__", "{}: \"__metadata__\" is reserved and cannot name a tensor", op);
    CPPGRAD_CHECK(seen.insert(name).second, "{}: duplicate tensor name {}", op, quote(name));
    CPPGRAD_CHECK(first_invalid_utf8(name) == std::string_view::npos, "{}: tensor name {} is not valid UTF-8", op,
          quote(name));
    CPPGRAD_CHECK(t.defined(), "{}: tensor {} is undefined", op, quote(name));
    CPPGRAD_CHECK(static_cast<size_t>(t.dim()) <= kMaxHeaderArray,  // what the reader takes back
                  "{}: tensor {} has {} dimensions; a safetensors shape has at most {}", op, quote(name), t.dim(),
                  kMaxHeaderArray);
  }
  CPPGRAD_CHECK(metadata.size() <= kMaxHeaderObjectKeys, "{}: {} __metadata__ entries; the reader takes at most {}", op,
                metadata.size(), kMaxHeaderObjectKeys);
  for (const auto& [key, value] : metadata) {
    CPPGRAD_CHECK(first_invalid_utf8(key) == std::string_view::npos && first_invalid_utf8(value) == std::string_view::npos,
          "{}: __metadata__ entry {} is not valid UTF-8", op, quote(key));
  }

  // The header, in the caller's order; offsets follow one another from 0.
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      header += fmt::format("{}{}:{}", first ? "" : ",", json_string(key), json_string(value));
      first = false;
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
    header += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          header.size() > 1 ? "," : "", json_string(name), safetensors_dtype_name(t.dtype()),
                          fmt::join(t.shape(), ","), offset, offset + nbytes);
    offset += nbytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // so the data block starts 8-byte aligned
  CPPGRAD_CHECK(header.size() <= kMaxSafetensorsHeader, "{}: the header would take {} bytes, over the limit of {}", op,
        header.size(), kMaxSafetensorsHeader);

  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + offset);
  append_u64_le(out, header.size());
  out.insert(out.end(), header.begin(), header.end());
  for (const auto& [name, t] : tensors) {
    const Tensor dense = kernels::contiguous(t);  // a copy only for a non-contiguous view
    const auto* p = static_cast<const uint8_t*>(dense.raw_data());
    out.insert(out.end(), p, p + dense.numel() * dtype_size(dense.dtype()));
  }
  return out;
}

}  // namespace

bool SafetensorsContents::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& entry) { return entry.first == name; });
}

const Tensor& SafetensorsContents::at(const std::string& name) const {
  for (const auto& [key, t] : tensors)
    if (key == name) return t;
  throw Error(fmt::format("SafetensorsContents::at: no tensor named {} among the {} loaded", quote(name),
                          tensors.size()));
}

std::vector<uint8_t> serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata) {
  return serialize(tensors, metadata, "serialize_safetensors");
}

SafetensorsContents parse_safetensors(std::span<const uint8_t> bytes, const std::string& source) {
  return parse(bytes, Faults("parse_safetensors", source));
}

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  const std::vector<uint8_t> bytes = serialize(tensors, metadata, "save_safetensors");
  files::write_file_atomically(path, bytes, "save_safetensors");
}

SafetensorsContents load_safetensors(const std::string& path) {
  const std::string bytes = files::read_regular_file(path, "load_safetensors", std::numeric_limits<int64_t>::max());
  return parse(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), Faults("load_safetensors", path));
}

}  // namespace cppgrad::nn
