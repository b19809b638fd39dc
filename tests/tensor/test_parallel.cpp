// How the thread count gives way on a busy machine (runtime/parallel.h, runtime/load.h). The
// decisions are driven with recorded readings and made-up times: no test here measures anything.
#include <cblas.h>
#include <dirent.h>
#include <fcntl.h>
#include <omp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "helpers.h"
#include "runtime/load.h"

using namespace cppgrad;
using namespace cppgrad::testing;
using load::Reading;
using load::Window;

namespace {

constexpr int64_t kMs = 1'000'000;  // nanoseconds

// Restores the thread count, the adaptation and the source of readings a test changed, however
// the test ends.
struct ThreadsGuard {
  int saved = get_num_threads();
  bool adapt = threads_adapt_to_load();
  ~ThreadsGuard() {
    load::reset_source();
    set_threads_adapt_to_load(adapt);
    set_num_threads(saved);
  }
};

// A machine of 2 cores whose other programs have `elsewhere` tasks runnable at every reading,
// on a clock that moves a reading's spacing at each look.
struct FakeMachine {
  int elsewhere = 0;
  int64_t now = 0;
  FakeMachine() {
    load::set_source(
        [this] { return std::optional<Reading>(Reading{2, elsewhere}); },
        [this] { return now += Window::kSpacing; });
  }
};

bool user_chose_waiting() {
  return std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT") || std::getenv("OMP_DYNAMIC");
}

}  // namespace

TEST_CASE("load: the readings of /proc are parsed") {
  CHECK(load::runnable_in_loadavg("0.73 1.50 2.26 3/456 12345\n") == 3);
  CHECK(load::runnable_in_loadavg("12.04 9.99 7.10 17/1024 99999") == 17);
  CHECK_FALSE(load::runnable_in_loadavg("").has_value());
  CHECK_FALSE(load::runnable_in_loadavg("0.73 1.50 2.26").has_value());
  CHECK(load::runnable_in_stat("4242 (tensor_tests) R 4200 4242 4200 0 -1 4194624 301 0 0 0 12 3"));
  CHECK_FALSE(load::runnable_in_stat("4243 (tensor_tests) S 4200 4242 4200 0 -1 4194624 0 0 0 0 0 0"));
  CHECK(load::runnable_in_stat("4244 (a (b) R c) R 1 2 3"));  // a name may hold ") R"; the last ')' ends it
  CHECK_FALSE(load::runnable_in_stat("4245 (a) R) S 1 2 3"));
  CHECK_FALSE(load::runnable_in_stat("garbage"));
#ifdef __linux__
  const std::optional<Reading> here = load::read_proc();  // this machine, now: only its form is known
  REQUIRE(here.has_value());
  CHECK(here->cores >= 1);
  CHECK(here->runnable_elsewhere >= 0);
#endif
}

#ifdef __linux__
// read_proc keeps its /proc files open between readings; a process made by fork() must count its
// own threads, not the parent's whose files it inherited. Three threads of the parent spin (each
// runnable all along): the parent counts them and itself, the child, of one thread, itself alone.
TEST_CASE("load: a forked child counts its own threads, not its parent's") {
  std::atomic<bool> stop{false};
  std::atomic<int> spinning{0};
  std::vector<std::thread> spinners;
  for (int i = 0; i < 3; ++i)
    spinners.emplace_back([&stop, &spinning] {
      ++spinning;
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  while (spinning.load() < 3) std::this_thread::yield();  // each past its start (a sanitizer's may wait)
  const std::optional<int> here = load::runnable_threads_here();  // opens this process's files
  REQUIRE(here.has_value());
  CHECK(*here >= 4);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(load::runnable_threads_here() == 1 ? 0 : 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  stop = true;
  for (std::thread& t : spinners) t.join();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
#endif

#ifdef __linux__
// A program may close descriptors it did not open and reuse their numbers for files of its own:
// the readings then open their /proc files again and leave the program's files open.
TEST_CASE("load: descriptors closed behind the readings' back are opened again, the new owners' files left alone") {
  REQUIRE(load::read_proc().has_value());  // opens /proc/loadavg and each thread's stat
  std::vector<int> closed;
  if (DIR* fds = opendir("/proc/self/fd")) {
    std::vector<int> numbers;
    while (const dirent* e = readdir(fds))
      if (e->d_name[0] != '.') numbers.push_back(std::atoi(e->d_name));
    closedir(fds);
    for (int fd : numbers) {
      char target[256] = {};
      const ssize_t n = ::readlink(fmt::format("/proc/self/fd/{}", fd).c_str(), target, sizeof target - 1);
      const std::string path(target, n > 0 ? static_cast<size_t>(n) : 0);
      if (path == "/proc/loadavg" || (path.rfind("/proc/", 0) == 0 && path.find("/task/") != std::string::npos))
        if (::close(fd) == 0) closed.push_back(fd);
    }
  }
  REQUIRE(closed.size() >= 2);  // loadavg and the calling thread's stat at least
  std::vector<int> mine;  // the lowest free numbers: the ones just closed
  for (size_t i = 0; i < closed.size(); ++i) mine.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  CHECK(load::read_proc().has_value());
  CHECK(load::runnable_threads_here().value_or(0) >= 1);
  CHECK(load::read_proc().has_value());
  for (int fd : mine) {
    struct stat st {};
    CHECK(::fstat(fd, &st) == 0);  // still open, still /dev/null
    CHECK(S_ISCHR(st.st_mode));
    ::close(fd);
  }
}
#endif

TEST_CASE("load: a quiet machine leaves every core, whatever one reading says") {
  Window w;
  CHECK_FALSE(w.load().has_value());  // nothing read yet
  int64_t t = 0;
  for (int i = 0; i < 100; ++i, t += Window::kSpacing) {
    // One reading in ten sees a task elsewhere (a kernel thread, a short-lived program).
    w.add(t, Reading{2, i % 10 == 3 ? 1 : 0});
    REQUIRE(w.load().has_value());
    CHECK(w.load()->free_cores == 2);
    CHECK(w.load()->cores == 2);
  }
}

TEST_CASE("load: a neighbour runnable most of the window takes a core, and gives it back when gone") {
  Window w;
  int64_t t = 0;
  for (int i = 0; i < 10; ++i, t += Window::kSpacing) w.add(t, Reading{2, 0});
  CHECK(w.load()->free_cores == 2);
  // A build starts on one core: within half the window, the mean passes one half.
  std::vector<int> free;
  for (int i = 0; i < 10; ++i, t += Window::kSpacing) {
    w.add(t, Reading{2, 1});
    free.push_back(w.load()->free_cores);
  }
  CHECK(free == std::vector<int>{2, 2, 2, 2, 2, 1, 1, 1, 1, 1});
  CHECK(w.load()->runnable_elsewhere == doctest::Approx(1.0));  // the window holds only the build's readings
  // A neighbour that works half the time on each core (a build's two jobs and their pauses).
  for (int i = 0; i < 10; ++i, t += Window::kSpacing) w.add(t, Reading{2, i % 2 == 0 ? 2 : 0});
  CHECK(w.load()->free_cores == 1);
  // Far more runnable tasks than cores: none free, never below.
  for (int i = 0; i < 10; ++i, t += Window::kSpacing) w.add(t, Reading{2, 9});
  CHECK(w.load()->free_cores == 0);
  CHECK(w.load()->runnable_elsewhere == doctest::Approx(9.0));
  // After a long pause, one reading is the whole window: the old ones say nothing of now.
  t += 10 * Window::kWindow;
  w.add(t, Reading{2, 0});
  CHECK(w.load()->free_cores == 2);
  CHECK(w.load()->runnable_elsewhere == 0.0);
}

TEST_CASE("load: the process-wide signal reads at most once per spacing") {
  ThreadsGuard guard;
  int readings = 0;
  int64_t now = 0;
  load::set_source(
      [&] {
        ++readings;
        return std::optional<Reading>(Reading{4, 1});
      },
      [&] { return now; });
  for (int i = 0; i < 5; ++i) CHECK(load::machine_load()->free_cores == 3);
  CHECK(readings == 1);
  now += Window::kSpacing - 1;
  load::machine_load();
  CHECK(readings == 1);
  now += 1;
  load::machine_load();
  CHECK(readings == 2);
  // A machine whose load cannot be read (no /proc) gives nothing, and is not asked again before the spacing.
  load::set_source(
      [&] {
        ++readings;
        return std::optional<Reading>();
      },
      [&] { return now; });
  CHECK_FALSE(load::machine_load().has_value());
  CHECK_FALSE(load::machine_load().has_value());
  CHECK(readings == 3);
}

TEST_CASE("parallel: a busy machine runs loops and BLAS on one thread, get_num_threads keeps the count set") {
  ThreadsGuard guard;
  set_threads_adapt_to_load(true);
  set_num_threads(2);
  FakeMachine machine;
  for (int i = 0; i < 10; ++i) CHECK(region_threads() == 2);  // quiet: a window of readings of nothing else
  machine.elsewhere = 1;  // a busy loop on the other core
  for (int i = 0; i < 5; ++i) CHECK(region_threads() == 2);  // not yet half the window
  CHECK(region_threads() == 1);
  CHECK(omp_get_max_threads() == 1);
  CHECK(openblas_get_num_threads() == 1);
  CHECK(get_num_threads() == 2);
  // The result does not depend on it: each element is written by one thread either way.
  SmallParallelGrain threaded;
  Tensor x = arange(0, 100000, 1, kFloat64);
  CHECK((x * 2).sum().item() == 9999900000.0);  // exact in float64
  machine.elsewhere = 0;  // the loop ended
  for (int i = 0; i < 10; ++i) region_threads();
  CHECK(region_threads() == 2);
  CHECK(openblas_get_num_threads() == (deterministic_threads() ? 1 : 2));  // BLAS on one: ours split the products
  // Switched off: the count stays as set whatever the machine says.
  machine.elsewhere = 5;
  set_threads_adapt_to_load(false);
  for (int i = 0; i < 20; ++i) CHECK(region_threads() == 2);
}

// Run twice by CTest: as is, and with OMP_WAIT_POLICY=active set (the test
// tensor_tests/user_wait_policy_wins, with CPPGRAD_EXPECT_USER_WAIT_POLICY=1).
TEST_CASE("parallel: a user's OMP_WAIT_POLICY, GOMP_SPINCOUNT or OMP_DYNAMIC keeps the thread count") {
  if (std::getenv("CPPGRAD_EXPECT_USER_WAIT_POLICY")) REQUIRE(user_chose_waiting());
  ThreadsGuard guard;
  const bool user_chose = user_chose_waiting();
  CHECK(threads_adapt_to_load() == !user_chose);
  set_num_threads(2);
  FakeMachine machine;
  machine.elsewhere = 3;  // busy: backs off only when the user chose nothing
  for (int i = 0; i < 10; ++i) region_threads();
  CHECK(region_threads() == (user_chose ? 2 : 1));
  CHECK(openblas_get_num_threads() == (user_chose && !deterministic_threads() ? 2 : 1));
}
