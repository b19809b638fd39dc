// Safetensors: round trips of every dtype, the exact bytes written, one row per malformed file,
// the atomic save, and the files PyTorch wrote (tests/data, described in tests/data/README.md).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "cppgrad.h"
#include "nn/safetensors.h"

using namespace cppgrad;
using namespace cppgrad::nn;
namespace fs = std::filesystem;

namespace {

// A file made by hand: the 8-byte little-endian length, the header text, then `data`.
std::vector<uint8_t> file_of(const std::string& header, const std::vector<uint8_t>& data = {}) {
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

std::vector<uint8_t> length_prefix_only(uint64_t n, size_t trailing_bytes) {
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(n >> (8 * i)));
  bytes.resize(8 + trailing_bytes, '{');
  return bytes;
}

std::vector<uint8_t> zero_bytes(size_t n) { return std::vector<uint8_t>(n, 0); }

// The message of the Error that parsing `bytes` throws, or "<no error>".
std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    parse_safetensors(bytes, "bad.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A fresh, empty directory under the system's temporary directory, removed at the end.
struct ScratchDir {
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "cppgrad-safetensors-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ignored);
    fs::remove_all(path, ignored);
  }
  fs::path path;
};

void check_same_tensor(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  CHECK(got.is_contiguous());
  dispatch(want.dtype(), [&](auto tag) {
    using T = decltype(tag);
    CHECK(got.to_vector<T>() == want.to_vector<T>());
  });
}

}  // namespace

TEST_CASE("safetensors: every dtype and shape round-trips through bytes") {
  Tensor base = tensor({{1.5, -2, 3}, {4, 5, 6.25}});
  const NamedTensors tensors = {
      {"f32", base},
      {"f64", tensor({0.1, -1e300, 3.0}, kFloat64)},
      {"i64", tensor(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1, (int64_t{1} << 53) + 1}, {3})},
      {"bool", tensor(std::vector<bool>{true, false, false, true}, {2, 2})},
      {"bf16", tensor({1.5, -2, 3e38, 1e-40}, kBFloat16)},  // Hugging Face checkpoints are often BF16
      {"scalar", scalar_tensor(7.5)},
      {"empty", zeros({0, 3})},
      {"empty_bool", zeros({0}, kBool)},
      {"transposed", base.t()},                    // strides [1,3]: copied on write
      {"every_other", base.slice(1, 0, 3, 2)},     // [[1.5, 3], [4, 6.25]]
      {"expanded", tensor({1, 2}).expand({3, 2})}  // stride 0
  };
  const SafetensorsContents back = parse_safetensors(serialize_safetensors(tensors));

  REQUIRE(back.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].first);
    CHECK(back.tensors[i].first == tensors[i].first);  // file order is the caller's order
    check_same_tensor(back.tensors[i].second, tensors[i].second);
  }
  CHECK(back.at("transposed").to_vector<float>() == std::vector<float>{1.5, 4, -2, 5, 3, 6.25});
  CHECK(back.at("every_other").to_vector<float>() == std::vector<float>{1.5, 3, 4, 6.25});
  CHECK(back.at("i64").to_vector<int64_t>()[0] == std::numeric_limits<int64_t>::min());
  CHECK(back.at("f64").to_vector<double>()[1] == -1e300);
  CHECK(back.at("scalar").dim() == 0);
  CHECK(back.at("scalar").item() == 7.5);
  CHECK(back.at("bool").to_vector<bool>() == std::vector<bool>{true, false, false, true});
  CHECK(back.metadata.empty());
  // Loaded tensors own their storage: writing to one leaves the other alone.
  CHECK_FALSE(back.at("f32").storage() == base.storage());
}

TEST_CASE("safetensors: the bytes written follow the format exactly") {
  const std::vector<uint8_t> bytes = serialize_safetensors({{"a", tensor({1, 2})}, {"b", tensor(std::vector<double>{3}, {1, 1})}});
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F64","shape":[1,1],"data_offsets":[8,16]}})";
  const std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  REQUIRE(padded.size() % 8 == 0);
  REQUIRE(bytes.size() == 8 + padded.size() + 16);

  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  CHECK(n == padded.size());
  CHECK(std::string(bytes.begin() + 8, bytes.begin() + 8 + padded.size()) == padded);

  float a[2];
  double b = 0;
  std::memcpy(a, bytes.data() + 8 + padded.size(), 8);
  std::memcpy(&b, bytes.data() + 8 + padded.size() + 8, 8);
  CHECK(a[0] == 1.0f);
  CHECK(a[1] == 2.0f);
  CHECK(b == 3.0);
}

TEST_CASE("safetensors: no tensors and no metadata give a valid empty file") {
  const std::vector<uint8_t> bytes = serialize_safetensors({});
  CHECK(bytes.size() == 16);  // "{}" padded to 8
  const SafetensorsContents back = parse_safetensors(bytes);
  CHECK(back.tensors.empty());
  CHECK(back.metadata.empty());
}

TEST_CASE("safetensors: metadata round-trips") {
  const Metadata metadata = {{"format", "pt"}, {"note", "ünïcödé, \"quotes\", \\ and a\nnewline"}, {"empty", ""}};
  const SafetensorsContents back = parse_safetensors(serialize_safetensors({{"w", ones({2})}}, metadata));
  CHECK(back.metadata == metadata);
  CHECK(back.at("w").to_vector<float>() == std::vector<float>{1, 1});
}

TEST_CASE("safetensors: lookup by name") {
  const SafetensorsContents back = parse_safetensors(serialize_safetensors({{"w", ones({1})}}));
  CHECK(back.contains("w"));
  CHECK_FALSE(back.contains("v"));
  CHECK_THROWS_WITH_AS(back.at("v"), doctest::Contains("no tensor named \"v\""), Error);
}

TEST_CASE("safetensors: BF16 is read as bfloat16, little-endian, the upper half of a float32") {
  // 1.0 = 0x3f80, -2.0 = 0xc000, +inf = 0x7f80: the bytes a PyTorch bfloat16 tensor saves.
  const std::vector<uint8_t> file =
      file_of(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}})", {0x80, 0x3f, 0x00, 0xc0, 0x80, 0x7f});
  const Tensor w = parse_safetensors(file).at("w");
  CHECK(w.dtype() == kBFloat16);
  CHECK(w.to(kFloat32).to_vector<float>() == std::vector<float>{1.0f, -2.0f, std::numeric_limits<float>::infinity()});
  const Tensor back = parse_safetensors(serialize_safetensors({{"w", w}})).at("w");  // and written back
  CHECK(back.dtype() == kBFloat16);
  CHECK(back.to(kFloat32).to_vector<float>() == w.to(kFloat32).to_vector<float>());
}

TEST_CASE("safetensors: the writer refuses what it cannot write") {
  CHECK_THROWS_WITH_AS(serialize_safetensors({{"w", ones({1})}, {"w", ones({2})}}),
                       doctest::Contains("serialize_safetensors: duplicate tensor name \"w\""), Error);
  CHECK_THROWS_WITH_AS(serialize_safetensors({{"__metadata__", ones({1})}}), doctest::Contains("reserved"), Error);
  CHECK_THROWS_WITH_AS(serialize_safetensors({{"w", Tensor()}}), doctest::Contains("undefined"), Error);
  CHECK_THROWS_WITH_AS(serialize_safetensors({{"\xff", ones({1})}}), doctest::Contains("not valid UTF-8"), Error);
}

// One row per way a file can be malformed. Each must give an Error naming the source and,
// in `phrase`, the fault.
TEST_CASE("safetensors: every malformed file is a clear error") {
  struct Row {
    const char* what;
    std::vector<uint8_t> bytes;
    std::string phrase;
  };
  const std::string w_f32_2 = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::vector<Row> rows = {
      {"empty file", {}, "has 0 bytes, too few for the 8-byte header length"},
      {"truncated length prefix", {2, 0, 0}, "has 3 bytes, too few for the 8-byte header length"},
      {"header length beyond the file", length_prefix_only(100, 10), "header length 100 runs past the end"},
      {"header length over the limit", length_prefix_only(kMaxSafetensorsHeader + 1, 10), "is over the limit"},
      {"header length of 2^64-1", length_prefix_only(~uint64_t{0}, 10), "is over the limit"},
      {"empty header", file_of(""), "header is not valid JSON"},
      {"invalid JSON", file_of(R"({"w":{"dtype":)"), "header is not valid JSON"},
      {"trailing garbage after the JSON", file_of("{} x"), "header is not valid JSON"},
      {"invalid UTF-8", file_of("{\"\xff\":{}}"), "header is not valid UTF-8 (byte 2"},
      {"overlong UTF-8", file_of("{\"\xc0\xaf\":{}}"), "not valid UTF-8"},
      {"UTF-8 surrogate", file_of("{\"\xed\xa0\x80\":{}}"), "not valid UTF-8"},
      {"truncated UTF-8", file_of("{\"\xe2\x82"), "not valid UTF-8"},
      {"top level an array", file_of("[]"), "header's top level is a JSON array, not an object"},
      {"top level a number", file_of("7"), "top level is a JSON number"},
      {"entry not an object", file_of(R"({"w":[0,0]})"), "tensor \"w\": entry is a JSON array"},
      {"entry missing data_offsets", file_of(R"({"w":{"dtype":"F32","shape":[0]}})"),
       "tensor \"w\": entry lacks the field \"data_offsets\""},
      {"entry missing dtype", file_of(R"({"w":{"shape":[0],"data_offsets":[0,0]}})"), "lacks the field \"dtype\""},
      {"entry with an extra field",
       file_of(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"extra":1}})"),
       "unexpected field \"extra\""},
      {"dtype not a string", file_of(R"({"w":{"dtype":32,"shape":[0],"data_offsets":[0,0]}})"),
       "dtype is a JSON number"},
      {"unknown dtype", file_of(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", zero_bytes(4)),
       "unknown dtype \"F33\""},
      {"unsupported dtype F16", file_of(R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", zero_bytes(4)),
       "unsupported dtype F16"},
      {"BF16 bytes short of the shape", file_of(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})", zero_bytes(4)),
       "bfloat16"},
      {"unsupported dtype I32", file_of(R"({"w":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", zero_bytes(4)),
       "unsupported dtype I32"},
      {"unsupported dtype U8", file_of(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", zero_bytes(1)),
       "unsupported dtype U8"},
      {"shape not an array", file_of(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", zero_bytes(8)),
       "shape is a JSON number, not an array"},
      {"negative shape", file_of(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})"),
       "shape[0] is negative (-1)"},
      {"fractional shape", file_of(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", zero_bytes(4)),
       "shape[0] is not an integer"},
      {"shape beyond int64", file_of(R"({"w":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,0]}})"),
       "shape[0] = 9223372036854775808 is beyond the int64 range"},
      {"huge shape overflowing int64",
       file_of(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
       "multiply past the int64 range"},
      {"huge shape overflowing int64 despite a zero",
       file_of(R"({"w":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})"),
       "multiply past the int64 range"},
      {"numel x size overflowing 64 bits",
       file_of(R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
       "overflow a 64-bit byte count"},
      {"non-integer offsets", file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})", zero_bytes(8)),
       "data_offsets[1] is not an integer"},
      {"string offsets", file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":["0",8]}})", zero_bytes(8)),
       "data_offsets[0] is a JSON string, not an integer"},
      {"negative offsets", file_of(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[-4,0]}})"),
       "data_offsets[0] is negative"},
      {"offsets past 64 bits",
       file_of(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[0,18446744073709551616]}})"),
       "data_offsets[1] is not an integer within 64 bits"},
      {"three offsets", file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})", zero_bytes(8)),
       "data_offsets must be an array of two integers"},
      {"offsets not an array", file_of(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":0}})"),
       "data_offsets must be an array of two integers"},
      {"begin > end", file_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", zero_bytes(8)),
       "data_offsets [8, 4] begin after they end"},
      {"numel x size mismatch", file_of(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", zero_bytes(8)),
       "shape [3] of float32 needs 12 bytes, but data_offsets [0, 8] span 8"},
      {"overlapping offsets",
       file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
               zero_bytes(12)),
       "tensor \"b\" at data_offsets [4, 12] overlaps the tensor before it, which ends at 8"},
      {"two tensors at the same place",
       file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
               zero_bytes(8)),
       "overlaps the tensor before it"},
      {"a hole between tensors",
       file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
               zero_bytes(12)),
       "a hole of 4 bytes lies before tensor \"b\", which begins at 8"},
      {"a hole before the first tensor", file_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                                 zero_bytes(8)),
       "a hole of 4 bytes lies before tensor \"w\""},
      {"data block longer than the last end", file_of("{" + w_f32_2 + "}", zero_bytes(12)),
       "the data block holds 12 bytes, 4 more than the tensors' 8"},
      {"data block shorter than the last end", file_of("{" + w_f32_2 + "}", zero_bytes(5)),
       "the tensors need 8 bytes of data, but the data block holds only 5"},
      {"data without tensors", file_of("{}", zero_bytes(1)), "the data block holds 1 bytes, 1 more"},
      {"duplicate tensor names", file_of("{" + w_f32_2 + "," + w_f32_2 + "}", zero_bytes(8)),
       "header has the duplicate key \"w\""},
      {"duplicate field in an entry",
       file_of(R"({"w":{"dtype":"F32","dtype":"F64","shape":[0],"data_offsets":[0,0]}})"),
       "header has the duplicate key \"dtype\""},
      {"duplicate metadata key", file_of(R"({"__metadata__":{"k":"a","k":"b"}})"), "duplicate key \"k\""},
      {"nesting too deep", file_of(R"({"w":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", zero_bytes(4)),
       "nests containers more than 3 deep"},
      {"bool byte 2", file_of(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", {1, 0, 2}),
       "tensor \"m\": bool element 2 holds the byte 2 (only 0 and 1 are valid)"},
      {"metadata value not a string", file_of(R"({"__metadata__":{"k":1}})"),
       "__metadata__ value for key \"k\" is a JSON number, not a string"},
      {"metadata not an object", file_of(R"({"__metadata__":"pt"})"), "__metadata__ is a JSON string, not an object"},
  };

  for (const Row& row : rows) {
    INFO(row.what);
    const std::string message = parse_error(row.bytes);
    CHECK_MESSAGE(message.rfind("parse_safetensors: bad.safetensors: ", 0) == 0, message);
    CHECK_MESSAGE(message.find(row.phrase) != std::string::npos, message);
  }
  CHECK(rows.size() == 53);
}

TEST_CASE("safetensors: a long hostile name is cut short in the message") {
  const std::string name(10'000, 'x');
  const std::string message = parse_error(file_of("{\"" + name + "\":1}"));
  CHECK(message.find("entry is a JSON number") != std::string::npos);
  CHECK(message.size() < 300);
}

TEST_CASE("safetensors: tensors are returned in data-offset order") {
  const std::vector<uint8_t> bytes =
      file_of(R"({"late":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
              R"("none":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
              R"("early":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
              {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40});  // 1.0f, 2.0f
  const SafetensorsContents back = parse_safetensors(bytes);
  REQUIRE(back.tensors.size() == 3);
  CHECK(back.tensors[0].first == "none");
  CHECK(back.tensors[1].first == "early");
  CHECK(back.tensors[2].first == "late");
  CHECK(back.at("early").item() == 1.0);
  CHECK(back.at("late").item() == 2.0);
  CHECK(back.at("none").shape() == Shape{0});
}

TEST_CASE("safetensors: a tensor at an odd offset in the buffer is read correctly") {
  // The data block starts 8 + 3 bytes in, so the doubles sit unaligned in the file's bytes.
  std::vector<uint8_t> data(16);
  const double values[2] = {-0.5, 1e-300};
  std::memcpy(data.data(), values, 16);
  const std::vector<uint8_t> bytes = file_of(R"({"d":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})" "   ", data);
  std::vector<uint8_t> shifted(1, 0xAA);
  shifted.insert(shifted.end(), bytes.begin(), bytes.end());
  const SafetensorsContents back = parse_safetensors(std::span<const uint8_t>(shifted).subspan(1));
  CHECK(back.at("d").to_vector<double>() == std::vector<double>{-0.5, 1e-300});
}

TEST_CASE("safetensors: save then load through a file") {
  ScratchDir dir;
  const std::string path = (dir.path / "model.safetensors").string();
  save_safetensors(path, {{"w", tensor({{1, 2}, {3, 4}})}, {"mask", tensor(std::vector<bool>{false, true}, {2})}},
                   {{"step", "10"}});
  const SafetensorsContents back = load_safetensors(path);
  CHECK(back.at("w").to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(back.at("mask").to_vector<bool>() == std::vector<bool>{false, true});
  CHECK(back.metadata == Metadata{{"step", "10"}});
  CHECK(names_in(dir.path) == std::vector<std::string>{"model.safetensors"});

  CHECK_THROWS_WITH_AS(load_safetensors((dir.path / "missing.safetensors").string()),
                       doctest::Contains("load_safetensors: cannot open '"), Error);
  CHECK_THROWS_WITH_AS(load_safetensors(dir.path.string()), doctest::Contains("not a regular file"), Error);
  std::ofstream(dir.path / "short.safetensors") << "abc";
  CHECK_THROWS_WITH_AS(load_safetensors((dir.path / "short.safetensors").string()),
                       doctest::Contains(("load_safetensors: " + (dir.path / "short.safetensors").string() +
                                          ": the file has 3 bytes")
                                             .c_str()),
                       Error);
}

TEST_CASE("safetensors: a failed save leaves the existing file intact and no temporary behind") {
  ScratchDir dir;
  const fs::path path = dir.path / "ckpt.safetensors";
  save_safetensors(path.string(), {{"w", tensor({1, 2, 3})}});
  const std::vector<uint8_t> original = read_bytes(path);
  REQUIRE(original.size() > 8);

  SUBCASE("the tensors cannot be written") {
    CHECK_THROWS_WITH_AS(save_safetensors(path.string(), {{"w", ones({1})}, {"w", ones({1})}}),
                         doctest::Contains("save_safetensors: duplicate tensor name"), Error);
  }
  SUBCASE("the rename fails, after the temporary was written") {
    // Renaming a file over a non-empty directory fails, even for root.
    const fs::path target = dir.path / "taken";
    fs::create_directory(target);
    std::ofstream(target / "inside") << "x";
    CHECK_THROWS_WITH_AS(save_safetensors(target.string(), {{"w", ones({4})}}),
                         doctest::Contains("cannot rename into place"), Error);
    CHECK(names_in(target) == std::vector<std::string>{"inside"});
    CHECK(names_in(dir.path) == std::vector<std::string>{"ckpt.safetensors", "taken"});
    fs::remove_all(target);
  }
  SUBCASE("the directory does not exist") {
    const fs::path missing = dir.path / "no-such-dir" / "ckpt.safetensors";
    CHECK_THROWS_WITH_AS(save_safetensors(missing.string(), {{"w", ones({1})}}),
                         doctest::Contains("cannot create a temporary file in"), Error);
    CHECK_FALSE(fs::exists(dir.path / "no-such-dir"));
  }
  SUBCASE("the directory is not writable") {
    if (::geteuid() == 0) {  // root writes to any directory whatever its mode; /proc/self takes no files
      CHECK_THROWS_WITH_AS(save_safetensors("/proc/self/ckpt.safetensors", {{"w", ones({1})}}),
                           doctest::Contains("cannot create a temporary file in /proc/self"), Error);
    } else {
      fs::permissions(dir.path, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                      fs::perm_options::remove);
      CHECK_THROWS_WITH_AS(save_safetensors(path.string(), {{"w", ones({1})}}),
                           doctest::Contains("cannot create a temporary file in"), Error);
      fs::permissions(dir.path, fs::perms::owner_write, fs::perm_options::add);
    }
  }

  CHECK(read_bytes(path) == original);
  CHECK(load_safetensors(path.string()).at("w").to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK(names_in(dir.path) == std::vector<std::string>{"ckpt.safetensors"});
}

TEST_CASE("safetensors: saving replaces a file and keeps its permissions") {
  ScratchDir dir;
  const fs::path path = dir.path / "ckpt.safetensors";

  const mode_t old_mask = ::umask(027);
  save_safetensors(path.string(), {{"w", ones({1})}});
  ::umask(old_mask);
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0640);  // a new file: 0666 less the umask, as open() gives

  REQUIRE(::chmod(path.c_str(), 0604) == 0);
  save_safetensors(path.string(), {{"w", full({2}, 5.0)}});
  REQUIRE(::stat(path.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0604);  // an existing file keeps its mode
  CHECK(load_safetensors(path.string()).at("w").to_vector<float>() == std::vector<float>{5, 5});
  CHECK(names_in(dir.path) == std::vector<std::string>{"ckpt.safetensors"});
}

TEST_CASE("safetensors: the files PyTorch wrote load by name") {
  const std::string data = CPPGRAD_TEST_DATA;

  const SafetensorsContents kpm = load_safetensors(data + "/mha_e8h2_kpm.safetensors");
  CHECK(kpm.tensors.size() == 18);
  CHECK(kpm.metadata.at("kind") == "MultiheadAttention");
  CHECK(kpm.metadata.at("embed_dim") == "8");
  const Tensor& w = kpm.at("param.in_proj_weight");
  CHECK(w.dtype() == kFloat64);
  CHECK(w.shape() == Shape{24, 8});
  CHECK(w.at<double>({0, 0}) == -0.18508864243945825);
  CHECK(w.at<double>({23, 7}) == 0.208173470328544);
  const Tensor& mask = kpm.at("in.key_padding_mask");
  CHECK(mask.dtype() == kBool);
  CHECK(mask.shape() == Shape{2, 4});
  CHECK(mask.to_vector<bool>() == std::vector<bool>{false, false, false, false, false, false, false, true});
  CHECK(kpm.at("out.weights").shape() == Shape{2, 3, 4});

  const SafetensorsContents nomask = load_safetensors(data + "/mha_e8h2_nomask.safetensors");
  CHECK(nomask.tensors.size() == 16);
  CHECK_FALSE(nomask.contains("in.key_padding_mask"));
  CHECK(nomask.at("param.out_proj.weight").shape() == Shape{8, 8});
  CHECK(nomask.at("in.query").shape() == Shape{2, 3, 8});

  const SafetensorsContents transformer = load_safetensors(data + "/transformer_nomask.safetensors");
  const auto params = std::count_if(transformer.tensors.begin(), transformer.tensors.end(),
                                    [](const auto& entry) { return entry.first.rfind("param.", 0) == 0; });
  CHECK(params == 46);
  CHECK(transformer.metadata.at("kind") == "Transformer");
  CHECK(transformer.at("param.encoder.layers.0.self_attn.in_proj_weight").shape() == Shape{48, 16});
  const Tensor& out = transformer.at("out.output");
  CHECK(out.shape() == Shape{2, 4, 16});
  CHECK(out.at<double>({0, 0, 0}) == -0.8090723132361228);
  CHECK(out.at<double>({1, 3, 15}) == -3.1112191000706195);
  CHECK(transformer.at("param.decoder.norm.bias").at<double>({0}) == 0.0012159225778977634);

  // Written again by cppgrad, the same names, values and metadata come back.
  const SafetensorsContents again = parse_safetensors(serialize_safetensors(transformer.tensors, transformer.metadata));
  REQUIRE(again.tensors.size() == transformer.tensors.size());
  for (size_t i = 0; i < again.tensors.size(); ++i) {
    CHECK(again.tensors[i].first == transformer.tensors[i].first);
    check_same_tensor(again.tensors[i].second, transformer.tensors[i].second);
  }
  CHECK(again.metadata == transformer.metadata);
}
