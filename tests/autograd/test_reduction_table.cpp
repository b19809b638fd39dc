// The rows of CPPGRAD_REDUCTION_OPS (tensor/reduction_table.h), every one from the table: its
// values, its gradcheck and gradgradcheck over every dim list, its name, and the same bits on 1
// and 2 threads. Then amax and amin, the rows added to the table as one line each, checked
// against max and min and against PyTorch's rules for ties, NaN and empty sets.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include "cppgrad.h"
#include "helpers.h"
#include "tensor/kernels.h"

using namespace cppgrad;
using test::check1;
using test::gradgrad1;
using test::leaf;
using V = std::vector<double>;
using Dims = std::vector<int64_t>;

namespace {

struct Row {
  std::string name;
  kernels::Reduction op;
  std::function<Tensor(const Tensor&, const Dims&, bool)> method, function;
};

std::vector<Row> rows() {
  return {
#define ROW_CASE(name, Enum, ...)                                                           \
  {#name, kernels::Reduction::Enum,                                                         \
   [](const Tensor& t, const Dims& dims, bool keepdim) { return t.name(dims, keepdim); }, \
   [](const Tensor& t, const Dims& dims, bool keepdim) { return name(t, dims, keepdim); }},
      CPPGRAD_REDUCTION_OPS(ROW_CASE)
#undef ROW_CASE
  };
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  std::vector<double> x = a.to(kFloat64).contiguous().to_vector<double>();
  std::vector<double> y = b.to(kFloat64).contiguous().to_vector<double>();
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

}  // namespace

TEST_CASE("reduction table: every row's values over dim 1 of a small matrix") {
  // [[1, 5, 3], [4, 2, 6]] reduced along its rows, by hand.
  const std::map<std::string, V> expected = {
      {"sum", {9, 12}},
      {"mean", {3, 4}},
      {"logsumexp", {std::log(std::exp(1.0) + std::exp(5.0) + std::exp(3.0)),
                     std::log(std::exp(4.0) + std::exp(2.0) + std::exp(6.0))}},
      {"amax", {5, 6}},
      {"amin", {1, 2}},
  };
  Tensor x = tensor({{1.0, 5.0, 3.0}, {4.0, 2.0, 6.0}}, kFloat64);
  for (const Row& row : rows()) {
    CAPTURE(row.name);
    REQUIRE(expected.count(row.name) == 1);  // a new row brings its values here
    const V& want = expected.at(row.name);
    for (const Tensor& out : {row.method(x, {1}, false), row.function(x, {-1}, false)}) {
      REQUIRE(out.shape() == Shape{2});
      for (size_t i = 0; i < want.size(); ++i) CHECK(out.to_vector<double>()[i] == doctest::Approx(want[i]).epsilon(1e-14));
    }
    CHECK(row.method(x, {1}, true).shape() == Shape{2, 1});
    CHECK(row.method(x, {}, false).shape() == Shape{});
  }
}

TEST_CASE("gradcheck reduction table: every row over every dim list, with and without keepdim") {
  uint64_t seed = 4000;
  for (const Row& row : rows()) {
    CAPTURE(row.name);
    for (const Tensor& x : test::reduction_inputs(seed += 10)) {
      for (const Dims& dims : test::kDimLists) {
        for (bool keepdim : {false, true}) {
          CAPTURE(shape_str(dims));
          CAPTURE(keepdim);
          CHECK(check1([&](const Tensor& a) { return row.method(a, dims, keepdim).tanh(); }, x));
        }
      }
      // Through the free function, and twice differentiated (create_graph=true).
      CHECK(check1([&](const Tensor& a) { return row.function(a * a, {0, 2}, false); }, x));
      CHECK(gradgrad1([&](const Tensor& a) { return row.method(a * a, {1}, true); }, x));
    }
    Tensor s = leaf({}, seed + 5);  // 0-d: its own set, over dim 0 or every dim
    CHECK(check1([&](const Tensor& a) { return row.method(a, {0}, false); }, s));
    CHECK(check1([&](const Tensor& a) { return row.method(a, {}, true); }, s));
  }
}

TEST_CASE("reduction table: every row by its name, in its grad_fn and its errors") {
  Tensor x = leaf({2, 3}, 4100);
  for (const Row& row : rows()) {
    CAPTURE(row.name);
    CHECK(std::string(kernels::reduction_name(row.op)) == row.name);
    CHECK(row.method(x, {0}, false).grad_fn()->op == row.name);
    CHECK(row.function(x, {}, true).grad_fn()->op == row.name);
    const std::string message = test::error_message([&] { row.method(x, {2}, false); });
    CHECK(test::contains(message, row.name + ":"));
  }
}

TEST_CASE("reduction table: every row gives the same bits on 1 and 2 threads, and in reference mode") {
  const int threads = get_num_threads();
  const int64_t grain = parallel_grain();
  set_parallel_grain(1);
  Generator gen(4200);
  Tensor x = randn({48, 7, 40}, kFloat32, gen);
  for (const Row& row : rows()) {
    CAPTURE(row.name);
    for (const Dims& dims : {Dims{0}, Dims{2}, Dims{0, 1}, Dims{1, 2}, Dims{}}) {
      CAPTURE(shape_str(dims));
      set_num_threads(1);
      const Tensor one = row.method(x, dims, false);
      set_num_threads(2);
      const Tensor two = row.method(x, dims, false);
      CHECK(same_bits(one, two));
      ReferenceModeGuard reference;
      CHECK(same_bits(row.method(x, dims, false), one));
    }
  }
  set_num_threads(threads);
  set_parallel_grain(grain);
}

TEST_CASE("amax and amin, one row each: max and min over a dim list, ties share the gradient") {
  Generator gen(4300);
  Tensor x = randn({3, 4, 5}, kFloat64, gen);
  for (int64_t dim : {0, 1, 2, -1}) {
    CAPTURE(dim);
    CHECK(test::values(x.amax(dim)) == test::values(x.max(dim).values));
    CHECK(test::values(amin(x, dim, true)) == test::values(x.min(dim, true).values));
  }
  CHECK(test::values(x.amax({0, 2})) == test::values(x.max(2).values.max(0).values));
  CHECK(x.amax().item() == x.max().item());
  CHECK(x.amin().item() == x.min().item());

  // As torch.amax: tied extremes share dC evenly; a NaN wins; integers keep their dtype.
  Tensor tied = tensor({{3.0, 1.0, 3.0}, {2.0, 2.0, 0.0}}, TensorOptions(kFloat64).requires_grad());
  tied.amax(1).sum().backward();
  CHECK(test::values(tied.grad()) == V{0.5, 0, 0.5, 0.5, 0.5, 0});
  tied.zero_grad();
  tied.amin({0, 1}).backward();
  CHECK(test::values(tied.grad()) == V{0, 0, 0, 0, 0, 1});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor with_nan = tensor({{1.0, nan, 3.0}, {4.0, 5.0, 6.0}}, TensorOptions(kFloat64).requires_grad());
  Tensor top = with_nan.amax(1);
  CHECK(std::isnan(top.to_vector<double>()[0]));
  CHECK(top.to_vector<double>()[1] == 6.0);
  top.sum().backward();
  CHECK(test::values(with_nan.grad()) == V{0, 1, 0, 0, 0, 1});
  Tensor ints = tensor(std::vector<int64_t>{4, -7, 2, 9}, {2, 2});
  CHECK(ints.amin(0).dtype() == kInt64);
  CHECK(ints.amin(0).to_vector<int64_t>() == std::vector<int64_t>{2, -7});

  // An empty set has no largest element: refused, naming the op; no set at all is fine.
  Tensor empty_rows = zeros({2, 0});
  CHECK(test::contains(test::error_message([&] { empty_rows.amax(1); }), "amax: cannot reduce an empty set"));
  CHECK(empty_rows.amin(0).shape() == Shape{0});
}

TEST_CASE("max and min along a dim: the sets must hold an element, there may be no set") {
  // As torch.max(dim): zeros({0, 3}).max(1) is zero maxima, each of three elements; max(0) is
  // three maxima of nothing, refused.
  Tensor rows = zeros({0, 3}, TensorOptions(kFloat64).requires_grad());
  auto [values, indices] = rows.max(1);
  CHECK(values.shape() == Shape{0});
  CHECK(indices.shape() == Shape{0});
  CHECK(indices.dtype() == kInt64);
  CHECK(rows.min(1, /*keepdim=*/true).values.shape() == Shape{0, 1});
  CHECK(rows.argmax(1).shape() == Shape{0});
  CHECK(rows.argmin(-1).shape() == Shape{0});
  values.sum().backward();
  CHECK(rows.grad().shape() == Shape{0, 3});
  CHECK(test::contains(test::error_message([&] { rows.max(0); }),
                       "max: cannot reduce an empty tensor of shape [0,3] over its dim 0 of size 0"));
  CHECK(test::contains(test::error_message([&] { rows.argmin(0); }), "min: cannot reduce an empty tensor of shape [0,3]"));
  CHECK(test::contains(test::error_message([&] { rows.min(); }), "min: cannot reduce an empty tensor of shape [0,3]"));
}
