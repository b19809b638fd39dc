#include "runtime/reference_mode.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace cppgrad {

namespace {
bool from_environment() {
  const char* value = std::getenv("CPPGRAD_REFERENCE");
  return value != nullptr && std::strcmp(value, "") != 0 && std::strcmp(value, "0") != 0;
}
std::atomic<bool> reference_on{from_environment()};
}  // namespace

bool reference_mode() { return reference_on.load(std::memory_order_relaxed); }
void set_reference_mode(bool on) { reference_on.store(on, std::memory_order_relaxed); }

}  // namespace cppgrad
