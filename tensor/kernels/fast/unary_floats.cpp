// The vectorised float32 forms of the transcendental unary rows (exp, log, tanh, sigmoid, silu,
// erf, gelu, gelu_tanh) and of their backwards, made from the rows' vector columns
// (tensor/op_tables.h): loops over contiguous floats built on vector_math.h, compiled once per
// vector unit and chosen when the program starts (runtime/simd_clones.h). Every clone does the
// same IEEE operations in the same order (a multiply-add is fused only where vector_math.h writes
// std::fma, in every clone alike), so each gives the same bits as the others.
//
// The scalar reference (the row's forward column, std::erf and friends in float) stays what
// reference mode runs. The two differ by the reference's own rounding: both are within 2 ulp of
// the exact function where the float formula does not cancel (tests/tensor/test_unary_floats.cpp
// sweeps the float range), and this form stays within 1 ulp where it does (GELU below -3).
// Measured in bench/bench_unary (figures in bench/README.md). A first reading skips this file.
#include "tensor/kernels/fast/unary_floats.h"

#include "runtime/profile.h"
#include "runtime/simd_clones.h"
#include "tensor/iterate.h"
#include "tensor/kernels/fast/vector_math.h"
#include "tensor/op_tables.h"

namespace cppgrad::kernels::fast {

namespace {

using namespace op_constants;

// ---- the loops: one forward y = f(x), and for some rows one backward dA = g·f'(A), per row
// with a vector column (tensor/op_tables.h): a row's `vector y` and `vector dA` in double,
// rounded to float once.
#define CPPGRAD_VECTOR_LOOPS(name, Enum, dtypes, forward, saves, dA, domain, ...) \
  __VA_OPT__(CPPGRAD_VECTOR_LOOPS_OF(name, __VA_ARGS__))
#define CPPGRAD_VECTOR_LOOPS_OF(name, vector_y, ...)                                          \
  CPPGRAD_SIMD_CLONES void name##_floats(const float* x, float* y, int64_t n) {               \
    for (int64_t i = 0; i < n; ++i) {                                                         \
      const double a = x[i];                                                                  \
      y[i] = static_cast<float>(vector_y);                                                    \
    }                                                                                         \
  }                                                                                           \
  __VA_OPT__(CPPGRAD_SIMD_CLONES void name##_backward_floats(const float* grad, const float* x, float* out, \
                                                             int64_t n) {                     \
    for (int64_t i = 0; i < n; ++i) {                                                         \
      const double g = grad[i], a = x[i];                                                     \
      out[i] = static_cast<float>(__VA_ARGS__);                                               \
    }                                                                                         \
  })
CPPGRAD_UNARY_OPS(CPPGRAD_VECTOR_LOOPS)
#undef CPPGRAD_VECTOR_LOOPS_OF
#undef CPPGRAD_VECTOR_LOOPS

using Forward = void (*)(const float*, float*, int64_t);
using Backward = void (*)(const float*, const float*, float*, int64_t);

// A row's forward loop; null for a row without a vector column.
Forward forward_of(Unary op) {
  switch (op) {
#define CPPGRAD_VECTOR_FORWARD(name, Enum, dtypes, forward, saves, dA, domain, ...) \
    __VA_OPT__(case Unary::Enum: return name##_floats;)
    CPPGRAD_UNARY_OPS(CPPGRAD_VECTOR_FORWARD)
#undef CPPGRAD_VECTOR_FORWARD
    default: return nullptr;
  }
}

// A row's backward loop and its name in a profile; null for a row without a `vector dA`.
struct BackwardLoop {
  Backward loop = nullptr;
  const char* name = nullptr;
};
BackwardLoop backward_of(Unary op) {
  switch (op) {
#define CPPGRAD_VECTOR_BACKWARD(name, Enum, dtypes, forward, saves, dA, domain, ...) \
    __VA_OPT__(CPPGRAD_VECTOR_BACKWARD_OF(name, Enum, __VA_ARGS__))
#define CPPGRAD_VECTOR_BACKWARD_OF(name, Enum, vector_y, ...) \
    __VA_OPT__(case Unary::Enum: return {name##_backward_floats, #name "_backward"};)
    CPPGRAD_UNARY_OPS(CPPGRAD_VECTOR_BACKWARD)
#undef CPPGRAD_VECTOR_BACKWARD_OF
#undef CPPGRAD_VECTOR_BACKWARD
    default: return {};
  }
}

// Blocks of a fixed size, spread over the threads: which element a block holds does not depend
// on the thread count. ~20 operations an element.
constexpr int64_t kBlock = 4096;
template <class Body>
void in_blocks(int64_t n, Body body) {
  parallel_for((n + kBlock - 1) / kBlock, kBlock * 20, [&](int64_t b) {
    const int64_t start = b * kBlock;
    body(start, std::min(kBlock, n - start));
  });
}

bool contiguous_float32(const Tensor& t) { return t.dtype() == kFloat32 && t.is_contiguous(); }

}  // namespace

bool has_vector_form(Unary op) { return forward_of(op) != nullptr; }

bool unary_floats(Unary op, const Tensor& in, const Tensor& out) {
  const Forward f = forward_of(op);
  if (f == nullptr || !contiguous_float32(in) || !contiguous_float32(out) || in.shape() != out.shape()) return false;
  const float* x = in.data<float>();
  float* y = out.data<float>();
  in_blocks(in.numel(), [&](int64_t start, int64_t n) { f(x + start, y + start, n); });
  return true;
}

Tensor unary_backward_floats(Unary op, const Tensor& grad, const Tensor& input) {
  const BackwardLoop backward = backward_of(op);
  const Backward f = backward.loop;
  if (f == nullptr || !contiguous_float32(grad) || !contiguous_float32(input) || grad.shape() != input.shape())
    return {};
  CPPGRAD_PROFILE_SCOPE(backward.name);
  Tensor out = empty(grad.shape(), kFloat32);
  const float* g = grad.data<float>();
  const float* x = input.data<float>();
  float* o = out.data<float>();
  in_blocks(grad.numel(), [&](int64_t start, int64_t n) { f(g + start, x + start, o + start, n); });
  return out;
}

}  // namespace cppgrad::kernels::fast
