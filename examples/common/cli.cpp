#include "common/cli.h"
#include "common/cli_app.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <vector>

#include "common/run_state.h"
#include "cppgrad.h"
#include "runtime/files.h"

using cppgrad::Error;
using cppgrad::excerpt;

namespace examples {

std::optional<int> parse_options(CLI::App& app, int argc, char** argv, const std::string& program,
                                 bool print_help) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return print_help ? app.exit(e) : 0;  // --help
    fmt::print(stderr, "{}: {}\n", program, excerpt(e.what(), 400));
    return kExitRefused;
  }
}

namespace {
// A number between min and max, max included; min too unless `open_min`.
CLI::Validator number_between(double min, double max, bool open_min) {
  const std::string range = fmt::format("{}{}, {}]", open_min ? "(" : "[", min, max);
  return CLI::Validator(
      [min, max, open_min, range](const std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return fmt::format("{} is not a number", excerpt(text));
        const bool above_min = open_min ? value > min : value >= min;
        if (!(above_min && value <= max)) return fmt::format("{} is not in {}", excerpt(text), range);
        return {};
      },
      "NUMBER in " + range);
}
}  // namespace

CLI::Validator number_in(double min, double max) { return number_between(min, max, false); }
CLI::Validator number_above(double low, double max) { return number_between(low, max, true); }

CLI::Validator names_a_path() {
  return CLI::Validator([](const std::string& text) { return text.empty() ? "'' names no file or directory" : ""; },
                        "PATH");
}

CLI::Validator digits_only() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        if (!digits) return fmt::format("{} is not a non-negative whole number", excerpt(text));
        // Past 2^64 - 1 the parse would clamp: a --seed of 2^64 would silently be 2^64 - 1.
        uint64_t value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error != std::errc() || end != text.data() + text.size())
          return fmt::format("{} is larger than 18446744073709551615 (2^64 - 1)", excerpt(text));
        return {};
      },
      "NON-NEGATIVE INTEGER");
}

void require_writer(const cppgrad::nn::Metadata& metadata, const std::string& program, const std::string& where) {
  const auto writer = metadata.find("program");
  CPPGRAD_CHECK(writer == metadata.end() || writer->second == program,
                "{}: this is a {} checkpoint (its metadata's program), not {}'s", where,
                excerpt(writer->second, 40), program);
}

int64_t metadata_count(const cppgrad::nn::Metadata& metadata, const std::string& key, const std::string& where,
                       const std::string& writer, int64_t least) {
  const auto found = metadata.find(key);
  CPPGRAD_CHECK(found != metadata.end(), "{} has no '{}' in its metadata (not written by {}?)", where, key, writer);
  const std::string& text = found->second;
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  CPPGRAD_CHECK(error == std::errc() && end == text.data() + text.size() && value >= least,
                "{} has '{}' = '{}' in its metadata, not a whole number of {} or more", where, key,
                excerpt(text, 40), least);
  return value;
}

std::string KeptOptions::key_of(const std::string& option) {
  std::string key = option.substr(option.find_first_not_of('-'));
  for (char& c : key)
    if (c == '-') c = '_';
  return key;
}

std::optional<cppgrad::nn::SafetensorsContents> KeptOptions::resume_from_file(const std::string& path,
                                                                              bool print_notices) {
  if (path.empty()) return std::nullopt;
  cppgrad::nn::SafetensorsContents contents = cppgrad::nn::load_safetensors(path);
  for (const std::string& notice : resume_from(contents.metadata))
    if (print_notices) fmt::print("{}\n", notice);
  return contents;
}

std::vector<std::string> KeptOptions::resume_from(const std::map<std::string, std::string>& metadata) {
  check_checkpoint_format(metadata);  // first: another format's metadata may not mean the same
  const auto writer = metadata.find("program");
  CPPGRAD_CHECK(writer != metadata.end(), "--resume: the checkpoint's metadata names no program");
  require_writer(metadata, program_, "--resume");
  std::vector<std::string> notices;
  for (const Kept& k : kept_) {
    const std::string key = key_of(k.option);
    auto saved = metadata.find(key);
    CPPGRAD_CHECK(saved != metadata.end(), "--resume: the checkpoint's metadata has no {} (the run's {})", key, k.option);
    CLI::Option* option = app_.get_option(k.option);
    const bool given = option->count() > 0;
    const std::string own = k.text();
    auto set = [&](const std::string& text) {
      option->clear();
      option->add_result(text);
      option->run_callback();  // the option's validators and conversion, into its variable
    };
    try {
      set(saved->second);
    } catch (const CLI::Error& e) {
      throw Error(fmt::format("--resume: the checkpoint's {} '{}' is not a value {} takes: {}", key,
                              excerpt(saved->second, 40), k.option, excerpt(e.what(), 200)));
    }
    if (!given || k.text() == own) continue;
    CPPGRAD_CHECK(k.overridable, "{} {}: the checkpoint's run has {} {}, and a resumed run continues with it (leave {} "
                  "out, or start a new run without --resume)", k.option, own, k.option, k.text(), k.option);
    notices.push_back(fmt::format("note: {} {} replaces the checkpoint's {}", k.option, own, k.text()));
    set(own);
  }
  return notices;
}

void KeptOptions::save_into(std::map<std::string, std::string>& metadata) const {
  metadata["checkpoint_format"] = std::to_string(kCheckpointFormat);
  metadata["program"] = program_;
  for (const Kept& k : kept_) metadata[key_of(k.option)] = k.text();
}

void check_writable(const std::string& option, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  CPPGRAD_CHECK(p.has_filename(), "{}: '{}' names no file", option, excerpt(path));
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) {
    CPPGRAD_CHECK(S_ISREG(info.st_mode), "{}: '{}' exists and is not a regular file", option, excerpt(path));
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);  // no O_TRUNC: the file stays as it is
    CPPGRAD_CHECK(fd >= 0, "{}: cannot write '{}': {}", option, excerpt(path), std::strerror(errno));
    ::close(fd);
  }
  // The file is written next to itself and renamed into place, so the directory must take new names.
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  CPPGRAD_CHECK(::stat(dir.c_str(), &info) == 0 && S_ISDIR(info.st_mode), "{}: the directory of '{}' does not exist",
                option, excerpt(path));
  // Asked by creating a file there: access() answers for the permission bits alone, and root passes
  // them where no file can be made (/proc, a read-only mount).
  const std::string probe = (dir / fmt::format(".{}.{}.probe", p.filename().string(), ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  CPPGRAD_CHECK(fd >= 0, "{}: cannot create files in the directory of '{}': {}", option, excerpt(path),
                std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_writable_in(const std::string& option, const std::string& dir, const std::string& file) {
  namespace fs = std::filesystem;
  fs::path path(dir);
  if (!path.has_filename()) path = path.parent_path();  // "out/" is "out"
  // The directories are made here one at a time, outermost first, and only those this call made
  // are removed after: a path like new/../old names an existing directory through a missing one,
  // which a list guessed before making them would remove.
  std::vector<fs::path> made;
  struct RemoveMade {
    const std::vector<fs::path>& made;
    ~RemoveMade() {
      for (auto p = made.rbegin(); p != made.rend(); ++p) ::rmdir(p->c_str());  // empty: the probe file is gone
    }
  } remove_made{made};
  fs::path so_far;
  for (const fs::path& part : path) {
    so_far /= part;
    if (::mkdir(so_far.c_str(), 0777) == 0) {
      made.push_back(so_far);
      continue;
    }
    CPPGRAD_CHECK(errno == EEXIST, "{}: cannot create the directory '{}': {}", option, excerpt(so_far.string()),
                  std::strerror(errno));
  }
  check_writable(option, (path / file).string());
}

void check_memory(const std::string& what, double floats) {
  const double needed = floats * 4.0;
  const double available = cppgrad::machine_memory_bytes();
  CPPGRAD_CHECK(needed <= available, "{} needs about {:.1f} GB for its parameters and their training state, but this "
                "machine has {:.1f} GB", what, needed / 1e9, available / 1e9);
}

namespace {

// The bytes a gzip stream on `fd` uncompresses to, at most max_bytes of them; closes fd.
std::string read_gzip_stream(const std::string& option, const std::string& path, int fd, int64_t max_bytes,
                             const std::string& limit_hint) {
  std::unique_ptr<gzFile_s, decltype(&gzclose)> file(gzdopen(fd, "rb"), &gzclose);  // closes fd with it
  if (!file) {
    ::close(fd);
    throw Error(fmt::format("{}: cannot read '{}' as gzip", option, excerpt(path)));
  }
  std::string bytes;
  char chunk[1 << 16];
  int got = 0;
  while ((got = gzread(file.get(), chunk, sizeof chunk)) > 0) {
    bytes.append(chunk, static_cast<size_t>(got));
    CPPGRAD_CHECK(static_cast<int64_t>(bytes.size()) <= max_bytes, "{}: '{}' uncompresses to more than the limit of {} "
                  "bytes{}", option, excerpt(path), max_bytes, limit_hint);
  }
  int code = Z_OK;
  std::string why = gzerror(file.get(), &code);  // a stream cut short ends with Z_BUF_ERROR, not a failed read
  const size_t named = why.find(": ");
  if (why.starts_with("<fd:") && named != std::string::npos) why.erase(0, named + 2);  // zlib's name for the fd
  CPPGRAD_CHECK(got == 0 && code == Z_OK, "{}: '{}' is not a readable gzip file: {}", option, excerpt(path), why);
  return bytes;
}

}  // namespace

std::string read_data_file(const std::string& option, const std::string& path, int64_t max_bytes,
                           const std::string& limit_hint) {
  cppgrad::files::InputFile file(path, option);
  unsigned char head[2] = {0, 0};
  const size_t head_bytes = file.read(head, sizeof head);
  if ((head_bytes == 2 && head[0] == 0x1f && head[1] == 0x8b) || path.ends_with(".gz")) {  // gzip's magic number
    const int fd = file.release();
    if (::lseek(fd, 0, SEEK_SET) != 0) {
      ::close(fd);
      throw Error(fmt::format("{}: cannot read '{}' from its start", option, excerpt(path)));
    }
    return read_gzip_stream(option, path, fd, max_bytes, limit_hint);
  }
  CPPGRAD_CHECK(file.size() <= max_bytes, "{}: '{}' has {} bytes, more than the limit of {}{}", option, excerpt(path),
                file.size(), max_bytes, limit_hint);
  std::string bytes(std::max<size_t>(static_cast<size_t>(file.size()), head_bytes), '\0');
  std::memcpy(bytes.data(), head, head_bytes);
  bytes.resize(head_bytes + file.read(bytes.data() + head_bytes, bytes.size() - head_bytes));
  return bytes;
}

int run_main(const std::string& program, const std::function<int()>& body, const std::string& smaller) {
  // Called before the error line: the output so far goes out first, and in order on a terminal.
  auto report = [&](int code, const std::string& message) {
    std::cout.flush();
    std::fflush(stdout);
    fmt::print(stderr, "{}: {}\n", program, message);
    return code;
  };
  const std::string try_smaller = smaller.empty() ? "" : fmt::format(" (try a smaller {})", smaller);
  try {
    return body();
  } catch (const cppgrad::OutOfMemoryError& e) {
    return report(kExitOutOfMemory, e.what() + try_smaller);
  } catch (const Error& e) {
    return report(kExitRefused, e.what());
  } catch (const Diverged& e) {
    return report(kExitDiverged, e.what());
  } catch (const std::bad_alloc&) {
    return report(kExitOutOfMemory, "out of memory" + try_smaller);
  } catch (const std::exception& e) {
    return report(kExitFailed, fmt::format("error: {}", excerpt(e.what(), 400)));
  } catch (...) {
    return report(kExitFailed, "error: an exception that is not a std::exception");
  }
}

}  // namespace examples
