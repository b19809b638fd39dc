#include "tensor/parallel.h"

#include <atomic>

#include <cblas.h>
#include <omp.h>

#include "tensor/error.h"

namespace cppgrad {

void set_num_threads(int n) {
  CPPGRAD_CHECK(n >= 1, "set_num_threads: expected a positive thread count, got {}", n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

namespace {
std::atomic<int64_t> g_parallel_grain{262144};
}
int64_t parallel_grain() { return g_parallel_grain.load(std::memory_order_relaxed); }
void set_parallel_grain(int64_t work) {
  CPPGRAD_CHECK(work >= 1, "set_parallel_grain: expected a positive amount of work, got {}", work);
  g_parallel_grain.store(work);
}

}  // namespace cppgrad
