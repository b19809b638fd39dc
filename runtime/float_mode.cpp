#include "runtime/float_mode.h"

namespace cppgrad {

bool set_flush_denormal(bool on) {
#if defined(__x86_64__) || defined(__i386__)
  detail::flush_denormal_wanted.store(on, std::memory_order_relaxed);
  adopt_float_mode();
  return true;
#else
  (void)on;
  return false;
#endif
}

bool flush_denormal() { return detail::flush_denormal_wanted.load(std::memory_order_relaxed); }

}  // namespace cppgrad
