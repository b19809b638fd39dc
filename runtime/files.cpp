#include "runtime/files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "runtime/error.h"

namespace cppgrad::files {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

std::string system_error_text(int error) { return std::error_code(error, std::generic_category()).message(); }

// The mode a new file gets from open(..., 0666): 0666 less the process's umask. The umask is
// read from /proc, since the umask() call that reads it also changes it, racing other threads.
mode_t new_file_mode() {
  mode_t mask = 022;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Umask:", 0) == 0) {
      mask = static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
      break;
    }
  }
  return 0666 & ~mask;
}

// The temporaries of `destination` are named ".<file name>.tmp-<pid>-XXXXXX": the process that
// writes one is in its name.
std::string temp_prefix(const std::filesystem::path& destination) {
  return fmt::format(".{}.tmp-", destination.filename().string());
}

// A save killed mid-write (kill -9, a power cut) leaves its temporary behind, since no code of
// it runs any more. The next save of the same file removes those whose process has gone; a
// live process may be saving the same file at this moment, so its temporary stays. Best
// effort: what cannot be removed is left, silently.
void remove_stale_temporaries(const std::filesystem::path& destination) {
  namespace fs = std::filesystem;
  const fs::path dir = destination.has_parent_path() ? destination.parent_path() : ".";
  const std::string prefix = temp_prefix(destination);
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string_view rest = std::string_view(name).substr(prefix.size());  // "<pid>-XXXXXX"
    const size_t dash = rest.find('-');
    if (dash == 0 || dash > 9 || rest.substr(0, dash).find_first_not_of("0123456789") != std::string_view::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(std::string(rest.substr(0, dash))));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (EPERM: alive, someone else's)
    std::error_code ignored;
    fs::remove(it->path(), ignored);
  }
}

// A temporary file next to the destination that removes itself unless renamed into place, so
// that every way out of write_file_atomically, a throw included, leaves no stray file behind.
class TempFile {
 public:
  TempFile(const std::filesystem::path& destination, const Faults& faults) : faults_(faults) {
    const std::filesystem::path dir = destination.has_parent_path() ? destination.parent_path() : ".";
    name_ = (dir / fmt::format("{}{}-XXXXXX", temp_prefix(destination), ::getpid())).string();
    fd_ = ::mkstemp(name_.data());
    if (fd_ < 0) faults.fail("cannot create a temporary file in {}: {}", dir.string(), system_error_text(errno));
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlink(name_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void set_mode(mode_t mode) {
    if (::fchmod(fd_, mode) != 0) fail_with_errno("cannot set the permissions of");
  }

  void write_all(std::span<const uint8_t> bytes) {
    while (!bytes.empty()) {
      const ssize_t written = ::write(fd_, bytes.data(), bytes.size());
      if (written < 0 && errno == EINTR) continue;
      if (written < 0) fail_with_errno("cannot write");
      bytes = bytes.subspan(static_cast<size_t>(written));
    }
  }

  void sync_and_close() {
    if (::fsync(fd_) != 0) fail_with_errno("cannot fsync");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail_with_errno("cannot close");
  }

  void rename_to(const std::string& path) {
    if (::rename(name_.c_str(), path.c_str()) != 0) fail_with_errno("cannot rename into place");
    renamed_ = true;
  }

 private:
  [[noreturn]] void fail_with_errno(std::string_view what) const {
    faults_.fail("{} the temporary file {}: {}", what, name_, system_error_text(errno));
  }

  const Faults& faults_;
  std::string name_;
  int fd_ = -1;
  bool renamed_ = false;
};

// After a rename, the directory entry is durable only once the directory itself is synced.
// Best effort: the file is already in place, so a failure here is not reported.
void sync_directory(const std::filesystem::path& destination) {
  const std::filesystem::path dir = destination.has_parent_path() ? destination.parent_path() : ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

InputFile::InputFile(const std::string& path, std::string_view what) : what_(what), path_(excerpt(path)) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw Error(fmt::format("{}: cannot open '{}': {}", what_, path_, std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
    const std::string kind = kind_of(info.st_mode);
    ::close(fd_);
    throw Error(fmt::format("{}: '{}' is not a regular file ({})", what_, path_, kind));
  }
  // Reads of a regular file never block; the flag only mattered for the open.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = static_cast<int64_t>(info.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

size_t InputFile::read(void* out, size_t n) {
  size_t filled = 0;
  while (filled < n) {
    const ssize_t got = ::read(fd_, static_cast<char*>(out) + filled, n - filled);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(fmt::format("{}: cannot read '{}': {}", what_, path_, std::strerror(errno)));
    if (got == 0) break;  // the end of the file (it may have shrunk since it was opened)
    filled += static_cast<size_t>(got);
  }
  return filled;
}

int InputFile::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

std::string read_regular_file(const std::string& path, std::string_view what, int64_t max_bytes) {
  InputFile file(path, what);
  if (file.size() > max_bytes)
    throw Error(fmt::format("{}: '{}' has {} bytes, more than the limit of {}", what, excerpt(path), file.size(),
                            max_bytes));
  std::string bytes(static_cast<size_t>(file.size()), '\0');
  bytes.resize(file.read(bytes.data(), bytes.size()));
  return bytes;
}

void write_file_atomically(const std::string& path, std::span<const uint8_t> bytes, std::string_view what) {
  const Faults faults(what, path);
  const std::filesystem::path destination(path);
  if (!destination.has_filename()) faults.fail("the path names no file");

  // An existing file keeps its permissions; a new one gets what open() would give it.
  struct stat existing {};
  const mode_t mode = ::stat(path.c_str(), &existing) == 0 ? (existing.st_mode & 07777) : new_file_mode();

  remove_stale_temporaries(destination);
  TempFile temp(destination, faults);
  temp.set_mode(mode);
  temp.write_all(bytes);
  temp.sync_and_close();
  temp.rename_to(path);
  sync_directory(destination);
}

}  // namespace cppgrad::files
