// Negative controls for the suite's shared comparisons (tests/common/check.h): a NaN, an
// infinity and one wrong element must each make every comparison fail, or a test built on it
// could pass a wrong answer.
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace cppgrad;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<double> kRight{0.5, -1.25, 3.0, 2.0};

// kRight with element 2 replaced by `bad`.
Tensor spoiled(double bad) {
  std::vector<double> v = kRight;
  v[2] = bad;
  return tensor(v, {2, 2});
}

}  // namespace

TEST_CASE("check helpers: the right answer passes every comparison") {
  Tensor want = tensor(kRight, {2, 2});
  Tensor got = tensor(kRight, {2, 2});
  CHECK(check::max_abs_diff(got, want) == 0.0);
  CHECK(check::max_rel_diff(got, want) == 0.0);
  CHECK(check::allclose(got, want));
  CHECK(check::mismatch(check::values(got), kRight) == "");
  CHECK(testing::mismatch(got, {2, 2}, kRight) == "");
  CHECK(check::all_finite(got));
  // Rounding far below the tolerance still passes, in float32 as well.
  Tensor rounded = tensor(kRight, {2, 2}).to(kFloat32);
  CHECK(check::max_abs_diff(rounded, want) == 0.0);  // these values are exact in float32
  CHECK(check::allclose(want + 1e-12, want));
}

TEST_CASE("check helpers: a NaN, an infinity or a wrong element each fail") {
  Tensor want = tensor(kRight, {2, 2});
  for (double bad : {kNaN, kInf, -kInf, 3.5}) {
    INFO("element 2 set to " << bad);
    Tensor got = spoiled(bad);
    CHECK(check::max_abs_diff(got, want) >= 0.5);
    CHECK_FALSE(check::max_abs_diff(got, want) < 1e-3);
    CHECK_FALSE(check::max_rel_diff(got, want) < 1e-3);
    CHECK_FALSE(check::allclose(got, want, 1e-3, 1e-3));
    CHECK(check::mismatch(check::values(got), kRight, 1e-3) != "");
    CHECK(testing::mismatch(got, {2, 2}, kRight, 1e-3) != "");
    // The same, with the roles swapped: the reference holds the bad value.
    CHECK_FALSE(check::max_abs_diff(want, got) < 1e-3);
    CHECK_FALSE(check::allclose(want, got, 1e-3, 1e-3));
    CHECK(check::mismatch(kRight, check::values(got), 1e-3) != "");
  }
  // An output that is NaN (or infinite) throughout, the case std::max used to hide.
  for (double bad : {kNaN, kInf}) {
    INFO("every element " << bad);
    Tensor got = full({2, 2}, bad, kFloat64);
    CHECK(std::isinf(check::max_abs_diff(got, want)));
    CHECK(std::isinf(check::max_rel_diff(got, want)));
    CHECK_FALSE(check::allclose(got, want, 1e-3, 1e-3));
    CHECK_FALSE(check::all_finite(got));
  }
  // Two NaN match nowhere but in mismatch, where the expected list asks for NaN explicitly.
  CHECK(std::isinf(check::max_abs_diff(spoiled(kNaN), spoiled(kNaN))));
  CHECK(check::mismatch({kNaN}, {kNaN}) == "");
  CHECK(check::mismatch({1.0}, {kNaN}) != "");
  // An infinity matches only itself, even with a generous tolerance.
  CHECK(check::max_abs_diff(spoiled(kInf), spoiled(kInf)) == 0.0);
  CHECK(check::mismatch({1e300}, {kInf}, 1.0) != "");
  CHECK(check::mismatch({kInf}, {-kInf}, 1.0) != "");
  CHECK_FALSE(check::allclose(tensor({1e300}, kFloat64), tensor({kInf}, kFloat64), 1.0, 1.0));
}

TEST_CASE("check helpers: different lengths or shapes never compare equal") {
  CHECK(std::isinf(check::max_abs_diff(std::vector<double>{1.0, 2.0}, std::vector<double>{1.0})));
  CHECK(check::mismatch({1.0, 2.0}, {1.0}) != "");
  CHECK_FALSE(check::allclose(zeros({2, 2}, kFloat64), zeros({4}, kFloat64)));
  CHECK(testing::mismatch(zeros({2, 2}, kFloat64), {4}, {0, 0, 0, 0}) != "");
}
