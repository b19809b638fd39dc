#include "runtime/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace cppgrad::files
