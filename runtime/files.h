// Files a user names, opened for reading. Only a regular file is read: a FIFO would block for
// ever waiting for a writer, a device like /dev/zero never ends, and a directory holds no data.
// The check is made on the open descriptor (fstat), so nothing can swap the file in between,
// and the open itself does not block (O_NONBLOCK), so a FIFO with no writer is refused at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace cppgrad::files {

class InputFile {
 public:
  // Opens `path` for reading; throws cppgrad::Error "WHAT: cannot open 'PATH': REASON" or
  // "WHAT: 'PATH' is not a regular file (a FIFO)". `what` names the reader ("load_npy").
  InputFile(const std::string& path, std::string_view what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int64_t size() const { return size_; }  // as fstat saw it when opened
  // Reads up to `n` bytes at the current position into `out`, retrying after signals; fewer only
  // at the end of the file. Throws cppgrad::Error naming the file on a read error.
  size_t read(void* out, size_t n);
  // Hands the descriptor over (to a library that closes it itself); this object no longer owns it.
  int release();

 private:
  int fd_ = -1;
  int64_t size_ = 0;
  std::string what_, path_;
};

// The bytes of the regular file `path`, at most `max_bytes` of them (a larger file is refused
// before anything is read: "WHAT: 'PATH' has N bytes, more than the limit of M").
std::string read_regular_file(const std::string& path, std::string_view what, int64_t max_bytes);

// Writes `bytes` to `path` whole or not at all: into a temporary file beside it, synced, then
// renamed over `path`, so that a reader never sees a half-written file and a failed or killed
// write leaves the old file as it was. An existing file keeps its permissions. Errors are
// cppgrad::Error "WHAT: PATH: REASON" (a directory that does not exist or cannot be written).
void write_file_atomically(const std::string& path, std::span<const uint8_t> bytes, std::string_view what);
// The same for text (an SVG, JSON).
inline void write_file_atomically(const std::string& path, std::string_view text, std::string_view what) {
  write_file_atomically(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()), what);
}

}  // namespace cppgrad::files
