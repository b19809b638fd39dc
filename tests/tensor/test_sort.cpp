// sort, argsort, topk and logsumexp: values, indices, NaN and infinities, ties, layouts and
// dtypes, and the errors they give (PyTorch's own numbers: tests/nn/test_parity_ops.cpp).
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;
using V = std::vector<double>;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

TEST_CASE("sort: ascending and descending, NaN as the largest value, ties in input order") {
  Tensor v = tensor({3, 1, kNaN, 2, 1, -kInf, kInf, 1});
  auto [up, up_index] = v.sort();
  CHECK(mismatch(up, {8}, {-kInf, 1, 1, 1, 2, 3, kInf, kNaN}, 0) == "");
  CHECK(values(up_index) == V{5, 1, 4, 7, 3, 0, 6, 2});
  CHECK(up_index.dtype() == kInt64);
  auto [down, down_index] = sort(v, 0, /*descending=*/true);
  CHECK(mismatch(down, {8}, {kNaN, kInf, 3, 2, 1, 1, 1, -kInf}, 0) == "");
  CHECK(values(down_index) == V{2, 6, 0, 3, 1, 4, 7, 5});  // the three 1s keep their order
  CHECK(values(argsort(v, -1, true)) == values(down_index));
  CHECK(values(v.argsort()) == values(up_index));
}

TEST_CASE("sort: along each dim of a 3-d tensor, non-contiguous inputs, int64 and bool") {
  Tensor a = tensor({{{3, 1}, {2, 4}}, {{0, 5}, {6, -1}}}, kFloat64);  // [2,2,2]
  CHECK(mismatch(a.sort(0).values, {2, 2, 2}, {0, 1, 2, -1, 3, 5, 6, 4}) == "");
  CHECK(values(a.sort(0).indices) == V{1, 0, 0, 1, 0, 1, 1, 0});
  CHECK(mismatch(a.sort(1).values, {2, 2, 2}, {2, 1, 3, 4, 0, -1, 6, 5}) == "");
  CHECK(mismatch(a.sort(-1, true).values, {2, 2, 2}, {3, 1, 4, 2, 5, 0, 6, -1}) == "");
  Tensor t = a.transpose(0, 2);  // a view with strides reversed: the same as sorting its copy
  CHECK(values(t.sort(1).values) == values(t.contiguous().sort(1).values));
  CHECK(values(t.sort(1).indices) == values(t.contiguous().sort(1).indices));
  CHECK(t.sort(1).values.is_contiguous());
  Tensor ints = tensor(std::vector<int64_t>{2, 0, 2, 1}, {4});
  CHECK(values(ints.sort(0, true).values) == V{2, 2, 1, 0});
  CHECK(values(ints.sort(0, true).indices) == V{0, 2, 3, 1});
  CHECK(ints.sort().values.dtype() == kInt64);
  Tensor flags = tensor(std::vector<bool>{true, false, true}, {3});
  CHECK(values(flags.sort().values) == V{0, 1, 1});
  CHECK(values(flags.sort().indices) == V{1, 0, 2});
}

TEST_CASE("sort and topk: 0-d and empty tensors") {
  Tensor s = scalar_tensor(5.0);
  CHECK(s.sort().values.item() == 5.0);
  CHECK(s.sort().indices.dim() == 0);
  CHECK(s.sort(0).indices.item() == 0.0);
  CHECK(s.topk(1).values.item() == 5.0);
  Tensor e = zeros({2, 0});
  CHECK(e.sort().values.shape() == Shape{2, 0});
  CHECK(e.sort(0).indices.shape() == Shape{2, 0});
  CHECK(e.topk(0).values.shape() == Shape{2, 0});
  CHECK(zeros({0, 3}).topk(2).indices.shape() == Shape{0, 2});
}

// Ties come out as PyTorch 1.13's CPU topk leaves them (tensor/kernels/sort.cpp), not by index:
// torch.topk(v, 3, largest=False).indices is [5, 4, 7], torch.tensor([1., 1, 1, 2]).topk(2).indices
// [3, 2] (more cases in test_nan_inf.cpp).
TEST_CASE("topk: largest and smallest in order, ties as PyTorch's, along any dim") {
  Tensor v = tensor({3, 1, kNaN, 2, 1, -kInf, kInf, 1});
  auto [top, top_index] = v.topk(3);
  CHECK(mismatch(top, {3}, {kNaN, kInf, 3}, 0) == "");
  CHECK(values(top_index) == V{2, 6, 0});
  auto [low, low_index] = topk(v, 3, 0, /*largest=*/false);
  CHECK(mismatch(low, {3}, {-kInf, 1, 1}, 0) == "");
  CHECK(values(low_index) == V{5, 4, 7});  // of the three 1s, the last two
  CHECK(values(tensor({1, 1, 1, 2}).topk(2).indices) == V{3, 2});
  CHECK(values(v.topk(8, 0, true, /*sorted=*/false).values.sort(0, true).indices) == V{0, 1, 2, 3, 4, 5, 6, 7});
  Tensor a = tensor({{1, 5, 3}, {4, 2, 6}}, kFloat64);
  CHECK(mismatch(a.topk(2, 1).values, {2, 2}, {5, 3, 6, 4}) == "");
  CHECK(values(a.topk(2, 1).indices) == V{1, 2, 2, 0});
  CHECK(mismatch(a.topk(1, 0).values, {1, 3}, {4, 5, 6}) == "");
  CHECK(mismatch(a.t().topk(1, 0, false).values, {1, 2}, {1, 2}) == "");
}

TEST_CASE("logsumexp: values, max-shifted for large inputs, every dim list") {
  Tensor a = tensor({{0, std::log(3.0)}, {1, 1}}, kFloat64);
  CHECK(mismatch(a.logsumexp(1), {2}, {std::log(4.0), 1 + std::log(2.0)}, 1e-15) == "");
  CHECK(mismatch(logsumexp(a, {0}, /*keepdim=*/true), {1, 2}, {std::log(1 + std::exp(1.0)), std::log(3 + std::exp(1.0))},
                 1e-15) == "");
  CHECK(mismatch(a.logsumexp({}), {}, {std::log(4 + 2 * std::exp(1.0))}, 1e-15) == "");
  // exp(1000) overflows float64 and exp(-1000) underflows to 0: both only shifted
  Tensor big = tensor({{1000, 1000}, {-1000, -1000 + std::log(3.0)}}, kFloat64);
  CHECK(mismatch(big.logsumexp(-1), {2}, {1000 + std::log(2.0), -1000 + std::log(4.0)}, 1e-15) == "");
  Tensor big32 = tensor({100, 100});  // float32: exp(100) overflows
  CHECK(big32.logsumexp(0).dtype() == kFloat32);
  CHECK(std::abs(big32.logsumexp(0).item() - (100 + std::log(2.0))) < 1e-5);
  // A 3-d input over two dims equals the copy reduced one dim at a time.
  Generator gen(27);
  Tensor x = randn({2, 3, 4}, kFloat64, gen).permute({2, 0, 1});  // [4,2,3], non-contiguous
  CHECK(check::max_abs_diff(x.logsumexp({0, 2}), x.logsumexp(2, true).logsumexp(0).squeeze(-1)) < 1e-14);
  CHECK(x.logsumexp({0, 2}, true).shape() == Shape{1, 2, 1});
  CHECK(scalar_tensor(2.5, kFloat64).logsumexp(0).item() == 2.5);
}

TEST_CASE("logsumexp: -inf rows, +inf, NaN, empty sets and integers, as PyTorch") {
  Tensor a = tensor({{-kInf, -kInf}, {kInf, 1}, {kInf, -kInf}, {kNaN, 1}, {kNaN, -kInf}}, kFloat64);
  CHECK(mismatch(a.logsumexp(1), {5}, {-kInf, kInf, kInf, kNaN, kNaN}, 0) == "");
  CHECK(mismatch(zeros({0, 3}).logsumexp(0), {3}, {-kInf, -kInf, -kInf}, 0) == "");
  CHECK(zeros({0, 3}).logsumexp(1).shape() == Shape{0});
  Tensor ints = tensor(std::vector<int64_t>{1, 2}, {2});
  CHECK(ints.logsumexp(0).dtype() == kFloat32);  // torch's default float dtype
  CHECK(std::abs(ints.logsumexp(0).item() - std::log(std::exp(1.0) + std::exp(2.0))) < 1e-6);
}

TEST_CASE("errors: sort, topk and logsumexp") {
  Tensor a = zeros({2, 3});
  CHECK(error_message([&] { a.sort(2); }) == "sort: dim 2 out of range for a tensor of 2 dims (expected -2 to 1)");
  CHECK(contains(error_message([&] { a.argsort(-3); }), "sort: dim -3 out of range"));
  CHECK(error_message([&] { a.topk(4); }) == "topk: k = 4 out of range for dim 1 of size 3 (shape [2,3])");
  CHECK(error_message([&] { a.topk(-1, 0); }) == "topk: k = -1 out of range for dim 0 of size 2 (shape [2,3])");
  CHECK(contains(error_message([&] { a.topk(1, 2); }), "topk: dim 2 out of range"));
  CHECK(contains(error_message([&] { scalar_tensor(1.0).topk(2); }), "topk: k = 2 out of range"));
  CHECK(contains(error_message([&] { a.logsumexp(2); }), "logsumexp: dim 2 out of range for a tensor of 2 dims"));
  CHECK(error_message([&] { a.logsumexp({0, -2}); }) == "logsumexp: dim list repeats a dim");
  CHECK(contains(error_message([&] { scalar_tensor(1.0).logsumexp(1); }), "logsumexp: dim 1 out of range"));
}
