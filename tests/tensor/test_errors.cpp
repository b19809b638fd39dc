// Errors: one cppgrad::Error per kind of misuse, whose message names the op and what is at fault.
#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;
using doctest::Contains;

TEST_CASE("errors: matmul inner dimensions differ") {
  Tensor a = zeros({2, 3}), b = zeros({4, 5});
  CHECK_THROWS_AS(a.matmul(b), Error);
  CHECK(error_message([&] { a.matmul(b); }) == "matmul: [2,3] @ [4,5]: inner dimensions 3 and 4 differ");
  CHECK(error_message([&] { kernels::matmul(a, b); }) == "matmul: [2,3] @ [4,5]: inner dimensions 3 and 4 differ");
  CHECK(error_message([] { kernels::matmul(zeros({3}), zeros({4})); }) ==
        "matmul: [3] @ [4]: inner dimensions 3 and 4 differ");
  CHECK_THROWS_WITH_AS(zeros({3}).matmul(zeros({4})), Contains("inner dimensions 3 and 4 differ"), Error);
  CHECK_THROWS_WITH_AS(zeros({2, 2, 3}).matmul(zeros({2, 4, 2})), Contains("inner dimensions 3 and 4 differ"), Error);
}

TEST_CASE("errors: matmul batch dims that do not broadcast") {
  CHECK_THROWS_WITH_AS(zeros({2, 3, 4}).matmul(zeros({3, 4, 5})), Contains("matmul: shapes [2] and [3] cannot be broadcast"),
                       Error);
}

TEST_CASE("errors: binary shapes that do not broadcast") {
  Tensor a = zeros({2, 3}), b = zeros({4});
  CHECK_THROWS_AS(a + b, Error);
  CHECK_THROWS_WITH_AS(a + b, Contains("add: shapes [2,3] and [4] cannot be broadcast"), Error);
  CHECK_THROWS_WITH_AS(a - b, Contains("sub: shapes [2,3] and [4]"), Error);
  CHECK_THROWS_WITH_AS(a * b, Contains("mul: shapes [2,3] and [4]"), Error);
  CHECK_THROWS_WITH_AS(a / b, Contains("div: shapes [2,3] and [4]"), Error);
  CHECK_THROWS_WITH_AS(maximum(a, b), Contains("maximum: shapes [2,3] and [4]"), Error);
  CHECK_THROWS_WITH_AS(zeros({2, 3}) + zeros({3, 2}), Contains("add: shapes [2,3] and [3,2]"), Error);
  CHECK_THROWS_WITH_AS(a < b, Contains("lt: shapes [2,3] and [4] cannot be broadcast"), Error);
  CHECK_THROWS_WITH_AS(a == b, Contains("eq: shapes [2,3] and [4]"), Error);
  CHECK_THROWS_WITH_AS(a.ge(b), Contains("ge: shapes [2,3] and [4]"), Error);
  CHECK_THROWS_WITH_AS(where(zeros({2}, kBool), a, b), Contains("where: shapes"), Error);
  CHECK_THROWS_WITH_AS(a.masked_fill(zeros({3, 3}, kBool), 0), Contains("masked_fill: shapes [2,3] and [3,3]"), Error);
  // In place, the result must keep the target's shape.
  Tensor small = zeros({3});
  CHECK_THROWS_WITH_AS(small.add_(zeros({2, 3})), Contains("add_: the result shape [2,3] differs"), Error);
}

TEST_CASE("errors: expand and cat and stack with mismatched shapes") {
  CHECK_THROWS_WITH_AS(zeros({2, 3}).expand({4, 3}), Contains("expand: shape [2,3] cannot be expanded to [4,3]"), Error);
  CHECK_THROWS_WITH_AS(zeros({2, 3}).expand({3}), Contains("expand: cannot expand shape [2,3]"), Error);
  CHECK_THROWS_WITH_AS(cat({zeros({2, 3}), zeros({2, 4})}, 0),
                       Contains("cat: tensor 1 has shape [2,4], tensor 0 has [2,3]: sizes differ in dim 1"), Error);
  CHECK_THROWS_WITH_AS(cat({zeros({2, 3}), zeros({3})}, 0), Contains("cat: tensor 1 has shape [3], tensor 0 has [2,3]"),
                       Error);
  CHECK_THROWS_WITH_AS(cat({}, 0), Contains("cat: expected a non-empty list"), Error);
  CHECK_THROWS_WITH_AS(stack({zeros({2}), zeros({3})}), Contains("stack: tensor 1 has shape [3], tensor 0 has [2]"),
                       Error);
}

TEST_CASE("errors: a dim out of range") {
  Tensor a = zeros({2, 3});
  const auto bad_dim = Contains("dim 2 out of range for a tensor of 2 dims (expected -2 to 1)");
  CHECK_THROWS_AS(a.sum({2}), Error);
  CHECK_THROWS_WITH_AS(a.sum({2}), Contains("sum: dim 2 out of range for a tensor of 2 dims"), Error);
  CHECK_THROWS_WITH_AS(a.mean({-3}), Contains("mean: dim -3 out of range for a tensor of 2 dims"), Error);
  CHECK_THROWS_WITH_AS(a.transpose(0, 2), bad_dim, Error);
  CHECK_THROWS_WITH_AS(a.softmax(2), Contains("softmax: dim 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(a.log_softmax(-3), Contains("log_softmax: dim -3 out of range"), Error);
  CHECK_THROWS_WITH_AS(a.max(2), Contains("max: dim 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(a.select(2, 0), Contains("select: dim 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(a.unsqueeze(4), Contains("unsqueeze: dim 4 out of range for a tensor of 3 dims"), Error);
  CHECK_THROWS_WITH_AS(a.permute({0, 2}), Contains("permute: dim 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(a.permute({0, 0}), Contains("permute: dim 0 repeated in [0,0]"), Error);
  CHECK_THROWS_WITH_AS(a.permute({0}), Contains("permute: 1 dims given for a tensor of shape [2,3]"), Error);
  CHECK_THROWS_WITH_AS(cat({a, a}, 2), Contains("cat: dim 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(a.sum({0, -2}), Contains("sum: dim list repeats a dim"), Error);
  CHECK_THROWS_WITH_AS(a.index_select(2, tensor(std::vector<int64_t>{0}, {1})), Contains("index_select: dim 2"), Error);
  CHECK_THROWS_WITH_AS(a.size(2), Contains("size: dim 2 out of range"), Error);
}

TEST_CASE("errors: an index out of range") {
  Tensor a = zeros({3, 2});
  CHECK_THROWS_AS(a.select(0, 3), Error);
  CHECK_THROWS_WITH_AS(a.select(0, 3), Contains("select: index 3 out of range for dim 0 of size 3 (shape [3,2])"), Error);
  CHECK_THROWS_WITH_AS(a.select(1, -3), Contains("select: index -3 out of range for dim 1 of size 2 (shape [3,2])"),
                       Error);
  Tensor idx = tensor(std::vector<int64_t>{0, 5}, {2});
  CHECK_THROWS_WITH_AS(a.index_select(0, idx),
                       Contains("index_select: index 5 out of range for dim 0 of size 3 (shape [3,2])"), Error);
  Tensor gidx = tensor(std::vector<int64_t>{0, 2}, {1, 2});
  CHECK_THROWS_WITH_AS(a.gather(1, gidx), Contains("gather: index 2 out of range for dim 1 of size 2 (shape [3,2])"),
                       Error);
  CHECK_THROWS_WITH_AS(scatter_add(a, 1, gidx, ones({1, 2})),
                       Contains("scatter_add: index 2 out of range for dim 1 of size 2 (shape [3,2])"), Error);
  CHECK_THROWS_WITH_AS(index_add(a, 0, idx, ones({2, 2})),
                       Contains("index_add: index 5 out of range for dim 0 of size 3 (shape [3,2])"), Error);
  CHECK_THROWS_WITH_AS(a.gather(0, tensor(std::vector<int64_t>{-4}, {1, 1})),
                       Contains("gather: index -4 out of range for dim 0 of size 3 (shape [3,2])"), Error);
  CHECK_THROWS_WITH_AS(a.at<float>({3, 0}), Contains("at: index 3 out of range for dim 0 of size 3 (shape [3,2])"),
                       Error);
  CHECK_THROWS_WITH_AS(a.narrow(0, 2, 2), Contains("narrow: start 2 and length 2 do not fit in dim 0 of size 3"), Error);
  // Bounds near INT64_MAX are refused, not overflowed; a negative start is reported as passed.
  CHECK_THROWS_WITH_AS(a.narrow(1, INT64_MAX, 1),
                       Contains("narrow: start 9223372036854775807 and length 1 do not fit in dim 1 of size 2"), Error);
  CHECK_THROWS_WITH_AS(a.narrow(1, 1, INT64_MAX),
                       Contains("narrow: start 1 and length 9223372036854775807 do not fit in dim 1 of size 2"), Error);
  CHECK_THROWS_WITH_AS(a.narrow(1, -3, 1), Contains("narrow: start -3 and length 1 do not fit in dim 1 of size 2"),
                       Error);
}

TEST_CASE("errors: index tensors that do not fit") {
  Tensor a = zeros({3, 2});
  CHECK_THROWS_WITH_AS(a.gather(1, tensor(std::vector<int64_t>{0}, {1})),
                       Contains("gather: index of shape [1] needs as many dims as the tensor of shape [3,2]"), Error);
  CHECK_THROWS_WITH_AS(a.gather(1, zeros({4, 1}, kInt64)),
                       Contains("gather: index of shape [4,1] is larger than [3,2] in dim 0"), Error);
  CHECK_THROWS_WITH_AS(a.index_select(0, zeros({2, 2}, kInt64)),
                       Contains("index_select: index must be 0-d or 1-d, got shape [2,2]"), Error);
  CHECK_THROWS_WITH_AS(scatter_add(a, 1, zeros({3, 1}, kInt64), ones({3, 2})),
                       Contains("scatter_add: source shape [3,2] differs from index shape [3,1]"), Error);
}

TEST_CASE("errors: a wrong dtype") {
  Tensor i = arange(4);
  // The float functions take integers to float32, as PyTorch's (test_parity_ops.cpp); those
  // PyTorch refuses for integers are refused, and relu, which keeps them integers in PyTorch.
  CHECK(i.exp().dtype() == kFloat32);
  CHECK_THROWS_AS(i.relu(), Error);
  CHECK_THROWS_WITH_AS(i.relu(), Contains("relu: expected a floating dtype (float32 or float64), got int64"), Error);
  CHECK_THROWS_WITH_AS(i.silu(), Contains("silu: expected a floating dtype"), Error);
  CHECK_THROWS_WITH_AS(i.gelu(), Contains("gelu: expected a floating dtype"), Error);
  CHECK_THROWS_WITH_AS(i.pow(2), Contains("pow: expected a floating dtype"), Error);
  CHECK_THROWS_WITH_AS(i.mean(), Contains("mean: expected a floating dtype, got int64"), Error);
  CHECK_THROWS_WITH_AS(i.softmax(0), Contains("softmax: expected a floating dtype"), Error);
  CHECK_THROWS_WITH_AS(i.reshape({2, 2}).matmul(i.reshape({2, 2})),
                       Contains("matmul: [2,2] @ [2,2]: expected float32 or float64, got int64"), Error);
  CHECK_THROWS_WITH_AS(zeros({2, 2}).matmul(zeros({2, 2}, kFloat64)),
                       Contains("matmul: [2,2] @ [2,2]: dtypes float32 and float64 differ"), Error);
  Tensor t = zeros({3, 2});
  CHECK_THROWS_WITH_AS(t.index_select(0, tensor({0, 1})), Contains("index_select: index must be int64, got float32"),
                       Error);
  CHECK_THROWS_WITH_AS(t.gather(0, zeros({1, 2})), Contains("gather: index must be int64, got float32"), Error);
  CHECK_THROWS_WITH_AS(where(zeros({2}), zeros({2}), zeros({2})), Contains("where: condition must be bool, got float32"),
                       Error);
  CHECK_THROWS_WITH_AS(t.masked_fill(zeros({3, 2}), 1), Contains("masked_fill: mask must be bool, got float32"), Error);
  CHECK_THROWS_WITH_AS(t.logical_not(), Contains("logical_not: expected a bool tensor, got float32"), Error);
  CHECK_THROWS_WITH_AS(tensor({1, 0}, kBool).neg(), Contains("neg: not defined for dtype bool"), Error);
  CHECK_THROWS_WITH_AS(randn({2}, kInt64), Contains("randn: expected a floating dtype"), Error);
  CHECK_THROWS_WITH_AS(t.at<double>({0, 0}), Contains("data: tensor has dtype float32, asked for float64"), Error);
}

TEST_CASE("errors: reshape to the wrong element count") {
  Tensor a = zeros({2, 3});
  CHECK_THROWS_AS(a.reshape({5}), Error);
  CHECK_THROWS_WITH_AS(a.reshape({5}), Contains("reshape: shape [5] is invalid for input of size 6"), Error);
  CHECK_THROWS_WITH_AS(a.view({4, -1}), Contains("view: shape [4,-1] is invalid for input of size 6"), Error);
  CHECK_THROWS_WITH_AS(a.reshape({-1, -1}), Contains("reshape: only one dim can be -1, got [-1,-1]"), Error);
  CHECK_THROWS_WITH_AS(a.reshape({-2, 3}), Contains("reshape: invalid size -2 in shape [-2,3]"), Error);
  CHECK_THROWS_WITH_AS(a.t().view({6}), Contains("view: a tensor of shape [3,2] with strides [1,3] cannot be viewed as [6]"),
                       Error);
}

TEST_CASE("errors: factories given bad sizes or values") {
  CHECK_THROWS_WITH_AS(zeros({2, -1}), Contains("zeros: negative size in shape [2,-1]"), Error);
  CHECK_THROWS_WITH_AS(arange(0, 5, 0), Contains("arange: step must be non-zero"), Error);
  CHECK_THROWS_WITH_AS(arange(5, 0, 1), Contains("arange: range [5, 0) is empty going by step 1"), Error);
  CHECK_THROWS_WITH_AS(randint(3, 3, {2}), Contains("randint: empty range [3, 3)"), Error);
  CHECK_THROWS_WITH_AS(eye(-1), Contains("eye: negative size -1"), Error);
  CHECK_THROWS_WITH_AS(tensor(std::vector<float>{1, 2, 3}, {2, 2}),
                       Contains("tensor: 3 values do not fill shape [2,2] (4 elements)"), Error);
  CHECK_THROWS_WITH_AS(tensor({{1, 2}, {3}}), Contains("tensor: ragged nested list"), Error);
  CHECK_THROWS_WITH_AS(set_num_threads(0), Contains("set_num_threads: expected a positive thread count, got 0"), Error);
}

TEST_CASE("errors: misused views and values") {
  Tensor a = zeros({2, 3});
  CHECK_THROWS_WITH_AS(a.item<float>(), Contains("item: a tensor of shape [2,3] has 6 elements, expected exactly 1"),
                       Error);
  CHECK_THROWS_WITH_AS(a.slice(1, 0, 3, 0), Contains("slice: step must be positive, got 0"), Error);
  CHECK_THROWS_WITH_AS(scalar_tensor(1).select(0, 0), Contains("select: cannot select from a 0-d tensor"), Error);
  CHECK_THROWS_WITH_AS(a.split(std::vector<int64_t>{1, 1}, 1), Contains("split: sizes [1,1] add up to 2, but dim 1 has size 3"),
                       Error);
  CHECK_THROWS_WITH_AS(a.chunk(0), Contains("chunk: number of chunks must be positive, got 0"), Error);
  CHECK_THROWS_WITH_AS(zeros({0}).max(), Contains("max: cannot reduce an empty tensor of shape [0]"), Error);
  CHECK_THROWS_WITH_AS(scalar_tensor(1).matmul(zeros({1})), Contains("matmul: [] @ [1]: both arguments need at least 1 dim"),
                       Error);
  CHECK_THROWS_WITH_AS(Tensor().shape(), Contains("tensor: use of an undefined tensor"), Error);
}

TEST_CASE("errors: every error is a cppgrad::Error and a std::runtime_error") {
  CHECK_THROWS_AS(zeros({2}).reshape({3}), std::runtime_error);
  CHECK(error_message([] { zeros({2}).reshape({3}); }) == "reshape: shape [3] is invalid for input of size 2");
  CHECK(error_message([] { zeros({2}).reshape({2}); }) == "");
}
