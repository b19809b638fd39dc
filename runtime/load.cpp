#include "runtime/load.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace cppgrad::load {

void Window::add(int64_t now, Reading reading) {
  cores_ = std::max(1, reading.cores);
  samples_.push_back({now, std::max(0, reading.runnable_elsewhere)});
  while (now - samples_.front().time >= kWindow) samples_.pop_front();
}

std::optional<Load> Window::load() const {
  if (samples_.empty()) return std::nullopt;
  double sum = 0;
  for (const Sample& s : samples_) sum += s.runnable_elsewhere;
  const double elsewhere = sum / static_cast<double>(samples_.size());
  const int free = static_cast<int>(std::lround(std::max(0.0, cores_ - elsewhere)));
  return Load{cores_, elsewhere, free};
}

namespace {

// A /proc file a reading keeps open, and which file it is: the descriptor is read, and closed
// (when the KeptFile goes), only while it still names that file. A program may close descriptors
// it did not open (before an exec, say) and get the same numbers for files of its own; those stay
// untouched.
class KeptFile {
 public:
  explicit KeptFile(const char* path) : fd_(::open(path, O_RDONLY | O_CLOEXEC)) {
    struct stat st {};
    if (fd_ >= 0 && ::fstat(fd_, &st) == 0) {
      dev_ = st.st_dev;
      ino_ = st.st_ino;
    } else if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  KeptFile(KeptFile&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), dev_(other.dev_), ino_(other.ino_) {}
  KeptFile& operator=(KeptFile&& other) noexcept {
    if (this != &other) {
      close();
      fd_ = std::exchange(other.fd_, -1);
      dev_ = other.dev_;
      ino_ = other.ino_;
    }
    return *this;
  }
  ~KeptFile() { close(); }

  // The whole file (a few hundred bytes) read from its start, or nothing.
  std::optional<std::string> read() const {
    if (!ours()) return std::nullopt;
    char buffer[1024];
    const ssize_t n = ::pread(fd_, buffer, sizeof buffer, 0);
    if (n <= 0) return std::nullopt;
    return std::string(buffer, static_cast<size_t>(n));
  }
  // Whether the descriptor still names the file opened.
  bool ours() const {
    struct stat st {};
    return fd_ >= 0 && ::fstat(fd_, &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_;
  }

 private:
  void close() {
    if (ours()) ::close(fd_);
    fd_ = -1;
  }

  int fd_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

// The /proc files a reading looks at, kept open and read again from the start (a /proc file is
// made anew at each read from offset 0): opening and closing them took half of a reading's time
// (bench_stalls prints what a reading costs). The directory of threads is listed afresh each
// time. A process made by fork() opens its own: /proc/self named the parent when the parent
// opened them. Used under read_proc's lock.
class ProcFiles {
 public:
  // The text of /proc/loadavg, or nothing.
  std::optional<std::string> loadavg() {
    renew_after_fork();
    if (!loadavg_ || !loadavg_->ours()) loadavg_.emplace("/proc/loadavg");
    return loadavg_->read();
  }

  // How many of this process's threads are running or runnable, or nothing where they cannot be
  // listed. The list is read at each call, so a thread started since is counted at once.
  std::optional<int> runnable_threads() {
    renew_after_fork();
    // (Not kept open: a stream whose descriptor a program closed could not be freed.)
    const std::unique_ptr<DIR, int (*)(DIR*)> tasks(opendir("/proc/self/task"), closedir);
    if (tasks == nullptr) return std::nullopt;
    std::map<long, KeptFile> listed;
    int runnable = 0;
    while (const dirent* task = readdir(tasks.get())) {
      if (task->d_name[0] == '.') continue;
      const long id = std::strtol(task->d_name, nullptr, 10);
      const std::string path = stat_path(task->d_name);
      auto kept = tasks_.extract(id);
      KeptFile file = kept ? std::move(kept.mapped()) : KeptFile(path.c_str());
      std::optional<std::string> stat = file.read();
      if (!stat && kept) {  // open on a thread that ended and whose id is taken again
        file = KeptFile(path.c_str());
        stat = file.read();
      }
      if (stat && runnable_in_stat(*stat)) ++runnable;
      // At most kKeptOpen stay open (the others close here): a program of many threads keeps its
      // descriptors for itself.
      if (stat && listed.size() < kKeptOpen) listed.emplace(id, std::move(file));
    }
    tasks_ = std::move(listed);  // closing the files of the threads that have ended since
    return runnable;
  }

 private:
  static constexpr size_t kKeptOpen = 64;

  static std::string stat_path(const char* task) { return std::string("/proc/self/task/") + task + "/stat"; }

  void renew_after_fork() {
    const pid_t now = ::getpid();
    if (now == pid_) return;
    // The parent's descriptors, copied by fork(): this process closes its copies only.
    loadavg_.reset();
    tasks_.clear();
    pid_ = now;
  }

  pid_t pid_ = 0;
  std::optional<KeptFile> loadavg_;
  std::map<long, KeptFile> tasks_;  // thread id -> its /proc/self/task/<id>/stat
};

int64_t steady_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Signal {
  std::mutex mutex;
  Window window;
  std::function<std::optional<Reading>()> read = read_proc;
  std::function<int64_t()> now = steady_now;
  std::optional<int64_t> tried_at;  // the last reading's time, read or not
};
Signal& signal() {
  static Signal s;
  return s;
}

}  // namespace

std::optional<int> runnable_in_loadavg(std::string_view loadavg) {
  double averages[3];
  int runnable = 0, tasks = 0;
  const std::string text(loadavg);
  if (std::sscanf(text.c_str(), "%lf %lf %lf %d/%d", &averages[0], &averages[1], &averages[2], &runnable, &tasks) != 5)
    return std::nullopt;
  return runnable;
}

bool runnable_in_stat(std::string_view stat) {
  const size_t name_end = stat.rfind(')');  // the name may hold spaces and parentheses itself
  return name_end != std::string_view::npos && name_end + 2 < stat.size() && stat[name_end + 2] == 'R';
}

namespace {
struct OpenProcFiles {
  std::mutex mutex;
  ProcFiles files;
};
OpenProcFiles& open_proc_files() {
  static OpenProcFiles open;
  return open;
}
}  // namespace

std::optional<Reading> read_proc() {
  OpenProcFiles& open = open_proc_files();
  std::lock_guard lock(open.mutex);
  const std::optional<std::string> loadavg = open.files.loadavg();
  if (!loadavg) return std::nullopt;
  const std::optional<int> runnable = runnable_in_loadavg(*loadavg);
  if (!runnable) return std::nullopt;
  // The thread reading, running now, even where its own threads cannot be listed.
  const int ours = open.files.runnable_threads().value_or(1);
  static const int cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  return Reading{cores, std::max(0, *runnable - ours)};
}

std::optional<int> runnable_threads_here() {
  OpenProcFiles& open = open_proc_files();
  std::lock_guard lock(open.mutex);
  return open.files.runnable_threads();
}

std::optional<Load> machine_load() {
  Signal& s = signal();
  std::lock_guard lock(s.mutex);
  const int64_t now = s.now();
  if (!s.tried_at || now - *s.tried_at >= Window::kSpacing) {
    s.tried_at = now;
    if (const std::optional<Reading> reading = s.read()) s.window.add(now, *reading);
  }
  return s.window.load();
}

void set_source(std::function<std::optional<Reading>()> read, std::function<int64_t()> now) {
  Signal& s = signal();
  std::lock_guard lock(s.mutex);
  s.read = std::move(read);
  s.now = std::move(now);
  s.window = Window();
  s.tried_at.reset();
}

void reset_source() { set_source(read_proc, steady_now); }

}  // namespace cppgrad::load
