// examples::run_main: every exception a program's body throws becomes one exit code, never an
// exception escaping main (std::terminate would abort and lose the buffered output).
#include <doctest/doctest.h>

#include <new>
#include <stdexcept>

#include "common/cli.h"
#include "cppgrad.h"

TEST_CASE("run_main: the body's exit code, or the code of what it threw") {
  using namespace examples;
  CHECK(run_main("t", [] { return 0; }) == 0);
  CHECK(run_main("t", [] { return 5; }) == 5);
  CHECK(run_main("t", []() -> int { throw cppgrad::Error("bad --option"); }) == kExitRefused);
  CHECK(run_main("t", []() -> int { throw std::bad_alloc(); }, "--batch") == kExitOutOfMemory);
  // A tensor the machine cannot hold (4.4 TB) is out of memory, not bad input: once exit 2.
  CHECK(run_main("t", []() -> int { cppgrad::zeros({int64_t{1} << 40}); return 0; }, "--batch") == kExitOutOfMemory);
  CHECK(run_main("t", []() -> int { throw std::runtime_error("unforeseen"); }) == kExitFailed);
  CHECK(run_main("t", []() -> int { throw 42; }) == kExitFailed);
}
