// What a PyTorch user types without thinking: t.sum(1), t.mean(1), t == 0, x > 0.0, t[i],
// tensor(std::vector<int>, shape), randperm, std::cout << t, and fmt printing of a shape, all
// from cppgrad.h alone.
#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using cppgrad::testing::mismatch;
using cppgrad::testing::shares_storage;

namespace {
// Whether tensor(std::vector<T>, shape) compiles for T.
template <class T>
constexpr bool can_make_tensor = requires(const std::vector<T>& v) { tensor(v, Shape{1}); };
}  // namespace

TEST_CASE("sum(dim) and mean(dim) take one dim as an integer, as torch does") {
  Tensor t = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(mismatch(t.sum(1), {2}, {6, 15}) == "");
  CHECK(mismatch(t.sum(0), {3}, {5, 7, 9}) == "");
  CHECK(mismatch(t.sum(-1, /*keepdim=*/true), {2, 1}, {6, 15}) == "");
  CHECK(mismatch(t.mean(1), {2}, {2, 5}) == "");
  CHECK(mismatch(t.mean(0, true), {1, 3}, {2.5, 3.5, 4.5}) == "");
  // The list forms still work: {1} means the same as 1, and {} every dim.
  CHECK(mismatch(t.sum({1}), {2}, {6, 15}) == "");
  CHECK(mismatch(t.sum({0, 1}), {}, {21}) == "");
  CHECK(mismatch(t.sum({}, true), {1, 1}, {21}) == "");
  CHECK(mismatch(t.mean({}), {}, {3.5}) == "");
}

TEST_CASE("comparisons with a number give bool tensors") {
  Tensor x = tensor({-1.5, 0.0, 0.5, 2.0});
  CHECK(mismatch(x == 0, {4}, {0, 1, 0, 0}) == "");
  CHECK((x == 0).dtype() == kBool);
  CHECK(mismatch(x > 0.0, {4}, {0, 0, 1, 1}) == "");
  CHECK(mismatch(x >= 0.5, {4}, {0, 0, 1, 1}) == "");
  CHECK(mismatch(x < 0, {4}, {1, 0, 0, 0}) == "");
  CHECK(mismatch(x <= 0, {4}, {1, 1, 0, 0}) == "");
  CHECK(mismatch(x != 2, {4}, {1, 1, 1, 0}) == "");
  CHECK(mismatch(0.0 < x, {4}, {0, 0, 1, 1}) == "");
  CHECK(mismatch(1 == x, {4}, {0, 0, 0, 0}) == "");
  // An integer tensor against a fraction compares exactly (no rounding of 0.5 to 0 or 1).
  Tensor n = arange(3.0);  // int64 0, 1, 2
  CHECK(mismatch(n == 0.5, {3}, {0, 0, 0}) == "");
  CHECK(mismatch(n < 0.5, {3}, {1, 0, 0}) == "");
  CHECK(mismatch(n == 1, {3}, {0, 1, 0}) == "");
  // A mask compared with a number.
  Tensor mask = tensor({1, 0, 1}).to(kBool);
  CHECK(mismatch(mask == 0, {3}, {0, 1, 0}) == "");
  // No gradient flows through a comparison.
  Tensor w = tensor({1.0, -1.0}, TensorOptions(kFloat64).requires_grad());
  CHECK_FALSE((w > 0.0).requires_grad());
}

TEST_CASE("t[i] selects along the first dim, a view, negative from the end") {
  Tensor t = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(mismatch(t[1], {3}, {4, 5, 6}) == "");
  CHECK(mismatch(t[-2], {3}, {1, 2, 3}) == "");
  CHECK(mismatch(t[1][2], {}, {6}) == "");
  CHECK(shares_storage(t[0], t));
  CHECK_THROWS_AS(t[2], Error);
  // Differentiable, as select is.
  Tensor w = tensor({{1.0, 2.0}, {3.0, 4.0}}, TensorOptions(kFloat64).requires_grad());
  (w[1] * 3.0).sum().backward();
  CHECK(mismatch(w.grad(), {2, 2}, {0, 0, 3, 3}) == "");
}

TEST_CASE("tensor(std::vector<int>, shape) gives int64, element types a tensor cannot hold do not compile") {
  Tensor t = tensor(std::vector<int>{3, -1, 4, 1}, {2, 2});
  CHECK(t.dtype() == kInt64);
  CHECK(mismatch(t, {2, 2}, {3, -1, 4, 1}) == "");
  CHECK(tensor(std::vector<uint8_t>{7, 8}, {2}).dtype() == kInt64);
  CHECK(tensor(std::vector<float>{1.5f}, {1}).dtype() == kFloat32);
  CHECK(tensor(std::vector<double>{1.5}, {1}).dtype() == kFloat64);
  // No overload takes a vector of long double or of strings: a compile-time error, not a link error.
  static_assert(!can_make_tensor<long double>);
  static_assert(!can_make_tensor<std::string>);
  static_assert(can_make_tensor<int> && can_make_tensor<float> && can_make_tensor<bool>);
}

TEST_CASE("randperm is a seeded permutation of 0..n-1") {
  Generator g(5);
  Tensor p = randperm(10, g);
  CHECK(p.dtype() == kInt64);
  CHECK(p.shape() == Shape{10});
  std::vector<int64_t> v = p.to_vector<int64_t>();
  std::vector<int64_t> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 10; ++i) CHECK(sorted[static_cast<size_t>(i)] == i);
  Generator same(5), other(6);
  CHECK(randperm(10, same).to_vector<int64_t>() == v);
  CHECK(randperm(10, other).to_vector<int64_t>() != v);
  // Every position is reached: over many draws each value lands in the first slot.
  Generator many(1);
  std::vector<int> first(4, 0);
  for (int i = 0; i < 400; ++i) ++first[static_cast<size_t>(randperm(4, many).to_vector<int64_t>()[0])];
  for (int count : first) CHECK(count > 60);  // 100 expected each; 60 is over 4 standard deviations below
  CHECK(randperm(0).numel() == 0);
  CHECK_THROWS_AS(randperm(-1), Error);
}

TEST_CASE("std::cout << t and fmt printing of a shape work from cppgrad.h") {
  Tensor t = tensor({{1, 2}, {3, 4}});
  std::ostringstream os;
  os << t;
  CHECK(os.str() == t.str());
  CHECK(os.str() == fmt::format("{}", t));
  CHECK(fmt::format("{}", t.shape()) == "[2, 2]");
}
