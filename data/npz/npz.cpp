// NumPy .npz archives: zip files of .npy arrays, read and written with libzip.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>

#include <unistd.h>
#include <zip.h>

#include "data/npz/npy.h"
#include "runtime/files.h"

namespace cppgrad::data {

namespace {

// Deflate cannot expand data more than about 1032 times; a larger declared size is a lie (or a
// zip bomb), refused before any memory is allocated for it.
constexpr uint64_t kMaxDeflateRatio = 1032;
constexpr uint64_t kReadChunk = uint64_t{16} << 20;

struct ArchiveCloser {
  void operator()(zip_t* archive) const { zip_discard(archive); }
};
using Archive = std::unique_ptr<zip_t, ArchiveCloser>;

struct EntryCloser {
  void operator()(zip_file_t* file) const { zip_fclose(file); }
};

std::string error_text(zip_error_t* error) { return zip_error_strerror(error); }

// Reads every entry of an opened archive of `archive_size` bytes.
NamedTensors read_arrays(zip_t* archive, uint64_t archive_size, const std::string& source) {
  auto fail = [&](const std::string& what) { throw Error(fmt::format("npz: {}: {}", source, what)); };
  const zip_int64_t count = zip_get_num_entries(archive, 0);
  if (count < 0) fail("cannot count the archive's entries");
  NamedTensors arrays;
  std::set<std::string> seen;
  for (zip_int64_t i = 0; i < count; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(archive, static_cast<zip_uint64_t>(i), 0, &st) != 0)
      fail(fmt::format("entry {}: {}", i, zip_strerror(archive)));
    const zip_uint64_t needed = ZIP_STAT_NAME | ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
    if ((st.valid & needed) != needed) fail(fmt::format("entry {}: its name, sizes or method are missing", i));
    const std::string name = st.name;
    const std::string where = fmt::format("entry '{}'", name);
    if (name.size() < 4 || name.compare(name.size() - 4, 4, ".npy") != 0)
      fail(fmt::format("{} is not an .npy array (an .npz archive holds only name.npy entries)", where));
    if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE)
      fail(fmt::format("{} is encrypted", where));
    if (st.comp_method != ZIP_CM_STORE && st.comp_method != ZIP_CM_DEFLATE)
      fail(fmt::format("{} uses compression method {}; only stored and deflated entries (np.savez, "
                       "np.savez_compressed) are supported", where, st.comp_method));
    if (st.comp_size > archive_size)
      fail(fmt::format("{} claims {} compressed bytes in an archive of {}", where, st.comp_size, archive_size));
    const uint64_t limit = st.comp_method == ZIP_CM_STORE ? st.comp_size : st.comp_size * kMaxDeflateRatio + 64;
    if (st.size > limit)
      fail(fmt::format("{} claims {} bytes from {} compressed ones, more than its method can give", where, st.size,
                       st.comp_size));
    const std::string key = name.substr(0, name.size() - 4);
    if (!seen.insert(key).second) fail(fmt::format("the array '{}' appears twice", key));

    std::unique_ptr<zip_file_t, EntryCloser> file(zip_fopen_index(archive, static_cast<zip_uint64_t>(i), 0));
    if (!file) fail(fmt::format("cannot open {}: {}", where, zip_strerror(archive)));
    // Read in chunks, so that the memory held follows the bytes the entry really gives, not the
    // size it declares (which the checks above bound only to 1032 times its compressed size).
    std::vector<uint8_t> bytes;
    while (bytes.size() < st.size) {
      const size_t got = bytes.size();
      bytes.resize(got + std::min<uint64_t>(st.size - got, kReadChunk));
      const zip_int64_t n = zip_fread(file.get(), bytes.data() + got, bytes.size() - got);
      if (n < 0) fail(fmt::format("cannot read {}: {}", where, zip_file_strerror(file.get())));
      if (n == 0) fail(fmt::format("{} ends after {} of its {} bytes", where, got, st.size));
      bytes.resize(got + static_cast<uint64_t>(n));
    }
    uint8_t extra;  // libzip checks the CRC when the entry's end is read
    const zip_int64_t more = zip_fread(file.get(), &extra, 1);
    if (more < 0) fail(fmt::format("cannot read {}: {}", where, zip_file_strerror(file.get())));
    if (more > 0) fail(fmt::format("{} is longer than the {} bytes it declares", where, st.size));
    arrays.emplace_back(key, parse_npy(bytes, fmt::format("{} in {}", name, source)));
  }
  return arrays;
}

}  // namespace

NamedTensors parse_npz(std::span<const uint8_t> bytes, const std::string& source) {
  // libzip takes an empty input for an empty archive (as it would a new one); np.load refuses it.
  if (bytes.empty()) throw Error(fmt::format("npz: {}: not a readable zip archive: the file is empty", source));
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* buffer = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  if (!buffer) {
    const std::string text = error_text(&error);
    zip_error_fini(&error);
    throw Error(fmt::format("npz: {}: {}", source, text));
  }
  Archive archive(zip_open_from_source(buffer, ZIP_RDONLY | ZIP_CHECKCONS, &error));
  if (!archive) {
    zip_source_free(buffer);  // the archive owns it only once opened
    const std::string text = error_text(&error);
    zip_error_fini(&error);
    throw Error(fmt::format("npz: {}: not a readable zip archive: {}", source, text));
  }
  zip_error_fini(&error);
  return read_arrays(archive.get(), bytes.size(), source);
}

NamedTensors load_npz(const std::string& path) {
  files::InputFile file(path, "load_npz");
  const auto size = static_cast<uint64_t>(file.size());
  if (size == 0) throw Error(fmt::format("npz: {}: not a readable zip archive: the file is empty", path));
  int code = 0;
  const int fd = file.release();
  Archive archive(zip_fdopen(fd, ZIP_RDONLY | ZIP_CHECKCONS, &code));  // closes fd once it succeeds
  if (!archive) {
    ::close(fd);
    zip_error_t error;
    zip_error_init_with_code(&error, code);
    const std::string text = error_text(&error);
    zip_error_fini(&error);
    throw Error(fmt::format("npz: {}: not a readable zip archive: {}", path, text));
  }
  return read_arrays(archive.get(), size, path);
}

void save_npz(const std::string& path, const NamedTensors& arrays, bool compress) {
  std::set<std::string> names;
  for (const auto& [name, t] : arrays) {
    CPPGRAD_CHECK(!name.empty(), "save_npz: an array has an empty name");
    CPPGRAD_CHECK(names.insert(name).second, "save_npz: the name '{}' appears twice", name);
    CPPGRAD_CHECK(t.defined(), "save_npz: the array '{}' is undefined", name);
  }
  // libzip writes a temporary file and renames it into place when the archive is closed.
  int code = 0;
  Archive archive(zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code));
  if (!archive) {
    zip_error_t error;
    zip_error_init_with_code(&error, code);
    const std::string text = error_text(&error);
    zip_error_fini(&error);
    throw Error(fmt::format("save_npz: cannot create '{}': {}", path, text));
  }
  auto fail = [&](const std::string& what) {
    throw Error(fmt::format("save_npz: '{}': {}: {}", path, what, zip_strerror(archive.get())));
  };
  std::vector<std::vector<uint8_t>> contents;  // must outlive zip_close, which reads them
  contents.reserve(arrays.size());
  for (const auto& [name, t] : arrays) {
    contents.push_back(serialize_npy(t));
    zip_source_t* source = zip_source_buffer(archive.get(), contents.back().data(), contents.back().size(), 0);
    if (!source) fail("cannot add '" + name + "'");
    const zip_int64_t index = zip_file_add(archive.get(), (name + ".npy").c_str(), source, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(source);
      fail("cannot add '" + name + "'");
    }
    const auto entry = static_cast<zip_uint64_t>(index);
    if (zip_set_file_compression(archive.get(), entry, compress ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0) != 0)
      fail("cannot set the compression of '" + name + "'");
    // A fixed time (1980-01-02 noon UTC, a day into zip's first year in any time zone), so that
    // the same arrays give the same bytes.
    if (zip_file_set_mtime(archive.get(), entry, 315532800 + 36 * 3600, 0) != 0) fail("cannot set the time of '" + name + "'");
  }
  if (zip_close(archive.get()) != 0) fail("cannot write the archive");
  archive.release();  // closed: zip_close freed it
}

}  // namespace cppgrad::data
