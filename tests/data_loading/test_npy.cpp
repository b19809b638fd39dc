// .npy and .npz: round trips of every dtype and order, the bytes NumPy writes, the files NumPy
// wrote (fixtures/, made by scripts/make_npy_fixtures.py), and one row per malformed file.
#include <cstring>
#include <filesystem>

#include "helpers.h"
#include "data/npz/npy.h"

using namespace data_test;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& name) { return std::string(CPPGRAD_DATA_FIXTURES) + "/" + name; }

std::vector<uint8_t> file_bytes(const std::string& path) {
  const std::string s = read_file_bytes(path);
  return {s.begin(), s.end()};
}

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}

// A tensor of each dtype and shape, with values that are exact in every dtype.
Tensor sample(DType dtype, const Shape& shape) {
  Tensor t = arange(static_cast<double>(numel(shape)), kFloat64) * 1.5 - 4.0;
  if (dtype == kBool) return t.reshape(shape).gt(scalar_tensor(0.0, kFloat64));
  if (dtype == kInt64) t = arange(numel(shape)) * 1000003 - 7;
  return t.to(dtype).reshape(shape);
}

// The formulas of scripts/make_npy_fixtures.py.
Tensor f32() { return arange(6, kFloat32).reshape({2, 3}) * 0.5 - 1.0; }
Tensor f64() { return arange(12, kFloat64).reshape({3, 4}) / 8.0 - 0.75; }
Tensor i64() {
  return tensor(std::vector<int64_t>{0, 1, -2, (int64_t{1} << 40) + 3, -(int64_t{1} << 62), INT64_MAX}, {6});
}
Tensor b1() { return tensor(std::vector<bool>{true, false, false, true, true}, {5}); }
Tensor f32_3d() { return arange(12, kFloat32).reshape({2, 3, 2}) - 5.5; }

// An .npy file by hand: magic, version, header length, then the header and data as given.
std::vector<uint8_t> npy_of(const std::string& header, size_t data_bytes = 0, int major = 1) {
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  const size_t n = header.size();
  out.push_back(static_cast<uint8_t>(n));
  out.push_back(static_cast<uint8_t>(n >> 8));
  if (major > 1) out.insert(out.end(), {static_cast<uint8_t>(n >> 16), static_cast<uint8_t>(n >> 24)});
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

}  // namespace

TEST_CASE("npy: round trips of every dtype, C and Fortran order, through memory and files") {
  const auto dir = fs::temp_directory_path();
  for (DType dtype : {kFloat32, kFloat64, kInt64, kBool})
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{5}, Shape{2, 3}, Shape{3, 0, 2}, Shape{2, 3, 4}})
      for (bool fortran : {false, true}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(shape_str(shape));
        CAPTURE(fortran);
        const Tensor t = sample(dtype, shape);
        const auto bytes = serialize_npy(t, fortran);
        CHECK(bytes.size() % 64 == t.numel() * dtype_size(dtype) % 64);  // the data starts 64-aligned
        const NpyHeader h = parse_npy_header(bytes);
        CHECK(h.fortran_order == fortran);
        CHECK(h.data_offset % 64 == 0);
        CHECK(same(parse_npy(bytes), t));
        const std::string path = (dir / "cppgrad_test_roundtrip.npy").string();
        save_npy(path, t, fortran);
        CHECK(same(load_npy(path), t));
        fs::remove(path);
      }
  // A strided view is written in its logical order.
  Tensor view = sample(kFloat32, {3, 4}).t();
  CHECK(same(parse_npy(serialize_npy(view)), view.contiguous()));
}

TEST_CASE("npz: round trips of every dtype, stored and deflated, names and order kept") {
  NamedTensors arrays = {{"weights", sample(kFloat32, {3, 2})}, {"x/y", sample(kFloat64, {4})},
                         {"ids", sample(kInt64, {2, 2})},       {"mask", sample(kBool, {5})},
                         {"empty", sample(kFloat32, {0, 3})},   {"scalar", sample(kInt64, {})}};
  const std::string path = (fs::temp_directory_path() / "cppgrad_test_roundtrip.npz").string();
  for (bool compress : {false, true}) {
    save_npz(path, arrays, compress);
    for (const NamedTensors& back : {load_npz(path), parse_npz(file_bytes(path))}) {
      REQUIRE(back.size() == arrays.size());
      for (size_t i = 0; i < arrays.size(); ++i) {
        CHECK(back[i].first == arrays[i].first);
        CHECK(same(back[i].second, arrays[i].second));
      }
    }
  }
  // The same arrays give the same bytes (the entries' times are fixed).
  save_npz(path, arrays);
  const auto first = file_bytes(path);
  save_npz(path, arrays);
  CHECK(file_bytes(path) == first);
  fs::remove(path);
  CHECK_THROWS_WITH_AS(save_npz(path, {{"a", zeros({1})}, {"a", zeros({1})}}), "save_npz: the name 'a' appears twice",
                       Error);
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("npy: the files NumPy wrote read back equal, in every dtype, order, byte order and version") {
  CHECK(same(load_npy(fixture("f4.npy")), f32()));
  CHECK(same(load_npy(fixture("f8.npy")), f64()));
  CHECK(same(load_npy(fixture("i8.npy")), i64()));
  CHECK(same(load_npy(fixture("b1.npy")), b1()));
  CHECK(same(load_npy(fixture("f8_fortran.npy")), f64()));
  CHECK(same(load_npy(fixture("f4_3d_fortran.npy")), f32_3d()));
  CHECK(same(load_npy(fixture("f4_big.npy")), f32()));
  CHECK(same(load_npy(fixture("f8_big_fortran.npy")), f64()));
  CHECK(same(load_npy(fixture("i8_big.npy")), i64()));
  CHECK(same(load_npy(fixture("scalar.npy")), tensor(std::vector<double>{2.5}, {})));
  CHECK(same(load_npy(fixture("empty.npy")), zeros({0, 3})));
  CHECK(parse_npy_header(file_bytes(fixture("f4_v2.npy"))).data_offset == 128);
  CHECK(same(load_npy(fixture("f4_v2.npy")), f32()));
  CHECK(same(load_npy(fixture("f4_v3.npy")), f32()));
  for (const char* name : {"arrays.npz", "arrays_compressed.npz"}) {
    NamedTensors arrays = load_npz(fixture(name));
    REQUIRE(arrays.size() == 3);
    CHECK(arrays[0].first == "x");
    CHECK(same(arrays[0].second, f32()));
    CHECK(arrays[1].first == "y");
    CHECK(same(arrays[1].second, i64()));
    CHECK(arrays[2].first == "mask");
    CHECK(same(arrays[2].second, b1()));
  }
  NamedTensors positional = load_npz(fixture("positional.npz"));
  REQUIRE(positional.size() == 2);
  CHECK(positional[0].first == "arr_0");
  CHECK(same(positional[0].second, f64()));
  CHECK(same(positional[1].second, b1()));
}

TEST_CASE("npy: cppgrad writes the very bytes np.save wrote, in C and in Fortran order") {
  CHECK(serialize_npy(f32()) == file_bytes(fixture("f4.npy")));
  CHECK(serialize_npy(f64()) == file_bytes(fixture("f8.npy")));
  CHECK(serialize_npy(i64()) == file_bytes(fixture("i8.npy")));
  CHECK(serialize_npy(b1()) == file_bytes(fixture("b1.npy")));
  CHECK(serialize_npy(f64(), true) == file_bytes(fixture("f8_fortran.npy")));
  CHECK(serialize_npy(f32_3d(), true) == file_bytes(fixture("f4_3d_fortran.npy")));
  CHECK(serialize_npy(tensor(std::vector<double>{2.5}, {})) == file_bytes(fixture("scalar.npy")));
  CHECK(serialize_npy(zeros({0, 3})) == file_bytes(fixture("empty.npy")));
}

TEST_CASE("npy: object arrays and other dtypes NumPy wrote are refused, never parsed") {
  CHECK_THROWS_WITH_AS(load_npy(fixture("object.npy")),
                       fmt::format("npy: {}: object arrays ('descr' '|O') are not supported: they hold pickled Python "
                                   "objects, which are never loaded", fixture("object.npy")).c_str(),
                       Error);
  CHECK_THROWS_WITH_AS(load_npy(fixture("i4.npy")),
                       fmt::format("npy: {}: dtype '<i4' is not supported: float32 ('<f4'), float64 ('<f8'), int64 "
                                   "('<i8') and bool ('|b1') are, in any byte order; convert with .astype() before "
                                   "saving", fixture("i4.npy")).c_str(),
                       Error);
}

// NumPy's reader takes any spelling numpy.dtype() takes; these are the four dtypes' (checked with
// NumPy 1.24: '=f4', '|f4', 'f4', 'f' and 'float32' are all float32, native order).
TEST_CASE("npy: every spelling NumPy reads of the four dtypes is read") {
  const std::vector<std::pair<std::string, DType>> spellings = {
      {"<f4", kFloat32}, {"=f4", kFloat32}, {"|f4", kFloat32}, {"f4", kFloat32}, {"f", kFloat32}, {"float32", kFloat32},
      {"<f8", kFloat64}, {"=f8", kFloat64}, {"d", kFloat64},   {"float64", kFloat64}, {"<i8", kInt64}, {"=i8", kInt64},
      {"q", kInt64},     {"int64", kInt64}, {"|b1", kBool},    {"?", kBool},          {"bool", kBool}, {"<b1", kBool}};
  for (const auto& [descr, dtype] : spellings) {
    CAPTURE(descr);
    const int64_t item = dtype == kBool ? 1 : dtype == kFloat32 ? 4 : 8;
    std::vector<uint8_t> bytes =
        npy_of("{'descr': '" + descr + "', 'fortran_order': False, 'shape': (2,)}\n", static_cast<size_t>(2 * item));
    bytes[bytes.size() - static_cast<size_t>(item)] = 1;  // the second element's lowest byte
    const Tensor t = parse_npy(bytes, "spelling.npy");
    CHECK(t.dtype() == dtype);
    CHECK(t.shape() == Shape{2});
    if (dtype == kInt64) CHECK(t.to_vector<int64_t>() == std::vector<int64_t>{0, 1});
    if (dtype == kBool) CHECK(t.to_vector<bool>() == std::vector<bool>{false, true});
  }
  // '>' still means big-endian: the lowest byte of an int64 comes last.
  std::vector<uint8_t> big = npy_of("{'descr': '>i8', 'fortran_order': False, 'shape': (1,)}\n", 8);
  big.back() = 7;
  CHECK(parse_npy(big, "big.npy").to_vector<int64_t>() == std::vector<int64_t>{7});
}

TEST_CASE("npy: malformed files, one row each, give an Error that says what is wrong") {
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n";
  struct Row {
    const char* what;
    std::vector<uint8_t> bytes;
    const char* message;  // a part of the error's text
  };
  std::vector<uint8_t> bad_magic = npy_of(ok, 8);
  bad_magic[1] = 'X';
  std::vector<uint8_t> bad_version = npy_of(ok, 8);
  bad_version[6] = 4;
  std::vector<uint8_t> long_header = npy_of(ok, 8);
  long_header[8] = 0xff;
  long_header[9] = 0xff;
  std::vector<uint8_t> huge_v2 = npy_of(ok, 8, 2);
  huge_v2[11] = 0x7f;
  const std::vector<Row> rows = {
      {"empty file", {}, "not an .npy file"},
      {"bad magic", bad_magic, "not an .npy file"},
      {"version 4.0", bad_version, "format version 4.0 is not supported"},
      {"cut in the length", {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 10}, "ends inside the header's length"},
      {"header past the end", long_header, "ends inside the header"},
      {"header over the limit", huge_v2, "exceeds the limit"},
      {"data too short", npy_of(ok, 7), "needs 8 bytes of data, the file has 7"},
      {"data too long", npy_of(ok, 9), "needs 8 bytes of data, the file has 9"},
      {"not a dict", npy_of("['descr']\n"), "expected '{'"},
      {"missing key", npy_of("{'descr': '<f4', 'shape': (2,)}\n", 8), "lacks the key 'fortran_order'"},
      {"extra key", npy_of("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}\n"), "unexpected key 'x'"},
      {"duplicate key", npy_of("{'descr': '<f4', 'descr': '<f4'}\n"), "appears twice"},
      {"unterminated string", npy_of("{'descr: '<f4'}"), "expected ':'"},
      {"escape", npy_of("{'descr': '<f\\x34'}"), "escape sequences"},
      {"structured dtype", npy_of("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}\n"),
       "structured dtypes"},
      {"object dtype", npy_of("{'descr': '|O', 'fortran_order': False, 'shape': (2,)}\n", 16), "object arrays"},
      {"int32", npy_of("{'descr': '<i4', 'fortran_order': False, 'shape': (2,)}\n", 8), "dtype '<i4' is not supported"},
      {"int32 by name", npy_of("{'descr': 'int32', 'fortran_order': False, 'shape': (2,)}\n", 8), "not supported"},
      {"leading zero", npy_of("{'descr': '<f4', 'fortran_order': False, 'shape': (02,)}\n", 8), "leading zero"},
      {"fortran not bool", npy_of("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}\n", 8), "True or False"},
      {"shape not a tuple", npy_of("{'descr': '<f4', 'fortran_order': False, 'shape': [2]}\n", 8), "expected a tuple"},
      {"shape (2) is an int", npy_of("{'descr': '<f4', 'fortran_order': False, 'shape': (2)}\n", 8), "not a tuple"},
      {"negative dim", npy_of("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}\n"), "negative dimension"},
      {"dim overflows", npy_of("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}\n"),
       "overflows int64"},
      {"count overflows", npy_of("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}\n"),
       "more elements than int64 counts"},
      {"zero-sized, other dims overflow",
       npy_of("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296)}\n"),
       "more elements than int64 counts"},
      {"bytes overflow", npy_of("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,)}\n"),
       "too large"},
      {"huge but short", npy_of("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000, 1000)}\n"),
       "needs 8000000000000 bytes of data, the file has 0"},
      {"junk after the dict", npy_of("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x\n", 8),
       "after the header dict"},
      {"cut in the dict", npy_of("{'descr': '<f4', 'fortr"), "unterminated string"},
      {"dict never closed", npy_of("{'descr': '<f4'"), "expected ',' or '}'"},
      {"binary junk", npy_of(std::string("{\x01\x02")), "byte 0x01"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.what);
    try {
      parse_npy(row.bytes, "bad.npy");
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find(row.message) != std::string::npos);
      CHECK(std::string(e.what()).find("bad.npy") != std::string::npos);
    }
  }
  // Bool bytes other than 0 and 1 read as true, as NumPy reads them.
  std::vector<uint8_t> bools = npy_of("{'descr': '|b1', 'fortran_order': False, 'shape': (3,)}\n", 3);
  bools[bools.size() - 3] = 0;
  bools[bools.size() - 2] = 2;
  bools[bools.size() - 1] = 255;
  CHECK(parse_npy(bools).to_vector<bool>() == std::vector<bool>{false, true, true});
  // Python 2's long suffix, double quotes, no spaces: the dict as old NumPy versions wrote it.
  CHECK(parse_npy(npy_of("{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(2L,)}", 8)).shape() == Shape{2});
}

TEST_CASE("npz: malformed archives are refused with an Error naming what is wrong") {
  const std::string dir = fs::temp_directory_path().string();
  auto error_of = [](const std::vector<uint8_t>& bytes) -> std::string {
    try {
      parse_npz(bytes, "bad.npz");
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  CHECK(error_of({}).find("not a readable zip archive") != std::string::npos);
  CHECK(error_of({'P', 'K', 3, 4, 0, 0}).find("not a readable zip archive") != std::string::npos);
  std::vector<uint8_t> good = file_bytes(fixture("arrays.npz"));
  CHECK(error_of(good) == "accepted");
  // Cut anywhere, the archive is refused (its central directory is at the end).
  for (size_t keep : {good.size() / 4, good.size() / 2, good.size() - 10})
    CHECK(error_of(std::vector<uint8_t>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(keep))) != "accepted");
  // A flipped byte in the first entry's data: the CRC check catches it.
  std::vector<uint8_t> flipped = good;
  const std::vector<uint8_t> magic = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  auto at = std::search(flipped.begin(), flipped.end(), magic.begin(), magic.end());
  REQUIRE(at != flipped.end());
  *(at + 130) ^= 0x40;  // inside x's data (its header is 128 bytes)
  CHECK(error_of(flipped).find("CRC") != std::string::npos);
  // An entry that is not .npy, and one whose .npy is broken.
  const std::string path = dir + "/cppgrad_test_bad.npz";
  save_npz(path, {{"x", zeros({2})}});
  std::vector<uint8_t> renamed = file_bytes(path);
  for (size_t i = 0; i + 5 < renamed.size(); ++i)
    if (std::memcmp(renamed.data() + i, "x.npy", 5) == 0) renamed[i + 4] = 'z';  // x.npz, in both headers
  CHECK(error_of(renamed).find("entry 'x.npz' is not an .npy array") != std::string::npos);
  fs::remove(path);
}
