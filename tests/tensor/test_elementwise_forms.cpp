// The two forms of the elementwise kernels give the same bits (all but the transcendental rows'
// vectorised float32 forms, which test_unary_floats.cpp holds within 2 ulp): the reference loops of
// tensor/kernels/elementwise.cpp (reference mode) and the fast loops of
// tensor/kernels/fast/elementwise.h. Both apply the same scalar expression to each element, and
// the library is built with -ffp-contract=off, so no form fuses a multiply and an add that the
// other rounds twice: the results are compared bit for bit, NaN included.
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "helpers.h"
#include "tensor/kernels/fast/unary_floats.h"

using namespace cppgrad;
using namespace cppgrad::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <class T>
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  std::vector<T> x = a.contiguous().to_vector<T>(), y = b.contiguous().to_vector<T>();
  if constexpr (std::is_same_v<T, bool>) return x == y;
  else return std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}
bool same_bits(const Tensor& a, const Tensor& b) {
  bool same = false;
  dispatch(a.dtype(), [&](auto tag) { same = same_bits<decltype(tag)>(a, b); });
  return same;
}

// f run on the fast form and on the reference form.
template <class F>
bool forms_agree(F f) {
  Tensor fast = f();
  ReferenceModeGuard reference;
  Tensor slow = f();
  return same_bits(fast, slow);
}

// Inputs in the layouts the fast loops single out (contiguous) and those they do not
// (transposed, a strided slice), with a NaN, infinities, zeros and values of both signs.
std::vector<Tensor> layouts(DType dtype, uint64_t seed) {
  Generator gen(seed);
  Tensor x = (randn({40, 33}, kFloat64, gen) * 3.0).to(dtype);
  if (is_floating(dtype))
    x.slice(0, 0, 1, 1).slice(1, 0, 4, 1).copy_(tensor({{kNaN, kInf, -kInf, 0.0}}, dtype));
  return {x, x.t(), x.slice(1, 1, 33, 3)};
}

}  // namespace

TEST_CASE("elementwise forms: a row's name from its table, and no name past the table") {
  CHECK(std::string(kernels::unary_name(kernels::Unary::Gelu)) == "gelu");
  CHECK(std::string(kernels::binary_name(kernels::Binary::Maximum)) == "maximum");
  CHECK(std::string(kernels::compare_name(kernels::Compare::Ge)) == "ge");
  CHECK(std::string(kernels::reduction_name(kernels::Reduction::Sum)) == "sum");
  CHECK_THROWS_AS(kernels::unary_name(static_cast<kernels::Unary>(1000)), std::out_of_range);
}

TEST_CASE("elementwise forms: every unary row, every dtype it takes, every layout") {
  const std::vector<DType> dtypes{kFloat32, kFloat64, kInt64};
#define UNARY_FORMS(name, Enum, ...)                                                                  \
  for (DType dtype : dtypes) {                                                                        \
    for (const Tensor& x : layouts(dtype, 11)) {                                                      \
      CAPTURE(#name);                                                                                 \
      CAPTURE(dtype_name(dtype));                                                                     \
      if (!is_floating(dtype) && check::error_message([&] { kernels::unary(kernels::Unary::Enum, x); }) != "") \
        continue; /* a floating-only row */                                                           \
      if (dtype == kFloat32 && x.is_contiguous() && kernels::fast::has_vector_form(kernels::Unary::Enum)) \
        continue; /* vectorised, not the same bits: test_unary_floats.cpp bounds the difference */    \
      CHECK(forms_agree([&] { return kernels::unary(kernels::Unary::Enum, x); }));                    \
    }                                                                                                 \
  }
  CPPGRAD_UNARY_OPS(UNARY_FORMS)
#undef UNARY_FORMS
}

TEST_CASE("elementwise forms: binary ops and comparisons, dense, broadcast and strided") {
  const std::vector<kernels::Binary> ops{kernels::Binary::Add, kernels::Binary::Sub, kernels::Binary::Mul,
                                         kernels::Binary::Div, kernels::Binary::Maximum, kernels::Binary::Minimum};
  for (DType dtype : {kFloat32, kFloat64, kInt64}) {
    CAPTURE(dtype_name(dtype));
    std::vector<Tensor> a = layouts(dtype, 12), b = layouts(dtype, 13);
    Generator gen(14);
    Tensor row = randn({33}, kFloat64, gen).to(dtype);  // broadcast along the run: stride 0 inside it
    Tensor one = full({}, 2.5, dtype);                  // a scalar operand
    for (kernels::Binary op : ops) {
      CAPTURE(static_cast<int>(op));
      CHECK(forms_agree([&] { return kernels::binary(op, a[0], b[0]); }));
      CHECK(forms_agree([&] { return kernels::binary(op, a[0], row); }));
      CHECK(forms_agree([&] { return kernels::binary(op, a[0], one); }));
      CHECK(forms_agree([&] { return kernels::binary(op, a[1], b[1]); }));
      CHECK(forms_agree([&] { return kernels::binary(op, a[2], b[2]); }));
    }
    CHECK(forms_agree([&] { return kernels::compare(kernels::Compare::Lt, a[0], b[0]); }));
    CHECK(forms_agree([&] { return kernels::compare(kernels::Compare::Eq, a[1], row.expand({40, 33}).t()); }));
  }
}

TEST_CASE("elementwise forms: on the threaded path too") {
  SmallParallelGrain small;
  for (const Tensor& x : layouts(kFloat32, 15)) {
    CHECK(forms_agree([&] { return kernels::unary(kernels::Unary::Sin, x); }));
    CHECK(forms_agree([&] { return kernels::binary(kernels::Binary::Mul, x, x); }));
  }
}
