#include "tensor/parallel.h"

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

}  // namespace cppgrad
