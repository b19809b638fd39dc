// Joining and indexing: cat, stack, split, chunk, index_select, gather, scatter_add, index_add.
#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;

namespace {
Tensor indices(std::vector<int64_t> values, const Shape& shape) { return tensor(values, shape); }
Tensor indices(std::vector<int64_t> values) {
  const auto n = static_cast<int64_t>(values.size());
  return tensor(values, {n});
}
}  // namespace

TEST_CASE("cat: along the first and the last dim") {
  Tensor a = tensor({{1, 2}, {3, 4}});
  Tensor row = tensor({{5, 6}});
  Tensor col = tensor({5, 6}).reshape({2, 1});
  CHECK(mismatch(cat({a, row}, 0), {3, 2}, {1, 2, 3, 4, 5, 6}) == "");
  CHECK(mismatch(cat({a, col}, 1), {2, 3}, {1, 2, 5, 3, 4, 6}) == "");
  CHECK(mismatch(cat({col, a, col}, -1), {2, 4}, {5, 1, 2, 5, 6, 3, 4, 6}) == "");
  CHECK(mismatch(cat({tensor({1}), tensor({2, 3}), tensor({4, 5, 6})}), {6}, {1, 2, 3, 4, 5, 6}) == "");
  // A single tensor: a copy, not a view.
  Tensor one = cat({a}, 0);
  CHECK_FALSE(shares_storage(one, a));
  CHECK(mismatch_with(one, a) == "");
}

TEST_CASE("cat: non-contiguous inputs and mixed dtypes") {
  Tensor a = tensor({{1, 2}, {3, 4}});
  CHECK(mismatch(cat({a.t(), a}, 0), {4, 2}, {1, 3, 2, 4, 1, 2, 3, 4}) == "");
  CHECK(mismatch(cat({a.t(), a.select(1, 0).reshape({2, 1})}, 1), {2, 3}, {1, 3, 1, 2, 4, 3}) == "");
  Tensor mixed = cat({tensor({1, 2}, kInt64), tensor({0.5})}, 0);
  CHECK(mixed.dtype() == kFloat32);
  CHECK(mismatch(mixed, {3}, {1, 2, 0.5}) == "");
  CHECK(cat({tensor({1}, kFloat32), tensor({2}, kFloat64)}).dtype() == kFloat64);
  // 3-d, along the middle dim.
  Tensor x = arange(12).reshape({2, 3, 2}), y = arange(4).reshape({2, 1, 2}) + 100.0;
  Tensor z = cat({x, y}, 1);
  CHECK(z.shape() == Shape{2, 4, 2});
  CHECK(z.dtype() == kInt64);
  CHECK(z.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 100, 101, 6, 7, 8, 9, 10, 11, 102, 103});
}

TEST_CASE("stack: a new dim at any place") {
  Tensor a = tensor({1, 2, 3}), b = tensor({4, 5, 6});
  CHECK(mismatch(stack({a, b}), {2, 3}, {1, 2, 3, 4, 5, 6}) == "");
  CHECK(mismatch(stack({a, b}, 1), {3, 2}, {1, 4, 2, 5, 3, 6}) == "");
  CHECK(mismatch(stack({a, b}, -1), {3, 2}, {1, 4, 2, 5, 3, 6}) == "");
  Tensor m = tensor({{1, 2}, {3, 4}});
  Tensor s = stack({m, m.t(), m * 10.0}, 1);
  CHECK(s.shape() == Shape{2, 3, 2});
  CHECK(mismatch(s, {2, 3, 2}, {1, 2, 1, 3, 10, 20, 3, 4, 2, 4, 30, 40}) == "");
  CHECK(mismatch(stack({scalar_tensor(1), scalar_tensor(2)}), {2}, {1, 2}) == "");
}

TEST_CASE("split: views of equal size and the rest") {
  Tensor x = arange(5);
  std::vector<Tensor> parts = x.split(2);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(parts[1].to_vector<int64_t>() == std::vector<int64_t>{2, 3});
  CHECK(parts[2].to_vector<int64_t>() == std::vector<int64_t>{4});
  for (const Tensor& p : parts) CHECK(shares_storage(p, x));
  CHECK(parts[2].offset() == 4);

  std::vector<Tensor> sized = x.split(std::vector<int64_t>{1, 3, 1});
  REQUIRE(sized.size() == 3);
  CHECK(sized[1].to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});

  Tensor m = arange(12).reshape({3, 4});
  std::vector<Tensor> cols = m.split(3, 1);
  REQUIRE(cols.size() == 2);
  CHECK(cols[0].shape() == Shape{3, 3});
  CHECK(cols[1].to_vector<int64_t>() == std::vector<int64_t>{3, 7, 11});
  CHECK(cols[0].strides() == Strides{4, 1});
}

TEST_CASE("chunk: as torch.chunk sizes its pieces") {
  auto sizes = [](const std::vector<Tensor>& parts) {
    std::vector<int64_t> s;
    for (const Tensor& p : parts) s.push_back(p.size(0));
    return s;
  };
  CHECK(sizes(arange(6).chunk(3)) == std::vector<int64_t>{2, 2, 2});
  CHECK(sizes(arange(5).chunk(3)) == std::vector<int64_t>{2, 2, 1});
  CHECK(sizes(arange(6).chunk(4)) == std::vector<int64_t>{2, 2, 2});  // ceil(6/4) = 2 each
  CHECK(sizes(arange(2).chunk(5)) == std::vector<int64_t>{1, 1});
  Tensor m = arange(12).reshape({2, 6});
  std::vector<Tensor> parts = m.chunk(3, -1);
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].to_vector<int64_t>() == std::vector<int64_t>{4, 5, 10, 11});
  CHECK(shares_storage(parts[1], m));
}

TEST_CASE("index_select: rows and columns with repeats and a negative dim") {
  Tensor t = tensor({{1, 2}, {3, 4}, {5, 6}});
  CHECK(mismatch(t.index_select(0, indices({2, 0, 2})), {3, 2}, {5, 6, 1, 2, 5, 6}) == "");
  CHECK(mismatch(t.index_select(1, indices({1, 0})), {3, 2}, {2, 1, 4, 3, 6, 5}) == "");
  CHECK(mismatch(t.index_select(-2, indices({2})), {1, 2}, {5, 6}) == "");
  CHECK(mismatch(t.index_select(0, tensor(std::vector<int64_t>{1}, {})), {1, 2}, {3, 4}) == "");  // 0-d index
  CHECK(t.index_select(0, indices({})).shape() == Shape{0, 2});
  // int64 tables too.
  CHECK(arange(6).reshape({3, 2}).index_select(0, indices({1})).to_vector<int64_t>() == std::vector<int64_t>{2, 3});
}

TEST_CASE("index_select: strided tables and strided indices") {
  Tensor t = tensor({{1, 2}, {3, 4}, {5, 6}});
  // Rows of the transpose [[1, 3, 5], [2, 4, 6]].
  CHECK(mismatch(t.t().index_select(0, indices({1})), {1, 3}, {2, 4, 6}) == "");
  CHECK(mismatch(t.t().index_select(1, indices({2, 0})), {2, 2}, {5, 1, 6, 2}) == "");
  // A block of whole rows, contiguous but at an offset.
  Tensor rows = t.narrow(0, 1, 2);
  CHECK(mismatch(rows.index_select(0, indices({1, 0})), {2, 2}, {5, 6, 3, 4}) == "");
  // An index tensor that is itself a strided view: every other entry of [2, 9, 0, 9, 1].
  Tensor idx = indices({2, 9, 0, 9, 1}).slice(0, 0, 5, 2);
  CHECK(mismatch(t.index_select(0, idx), {3, 2}, {5, 6, 1, 2, 3, 4}) == "");
}

TEST_CASE("index_select: a large embedding lookup") {
  Generator gen(13);
  Tensor table = randn({500, 64}, kFloat32, gen);
  Tensor idx = randint(0, 500, {2000}, gen);
  Tensor out = table.index_select(0, idx);
  CHECK(out.shape() == Shape{2000, 64});
  int64_t wrong = 0;
  for (int64_t i = 0; i < 2000; i += 7) {
    const int64_t row = idx.at<int64_t>({i});
    for (int64_t j = 0; j < 64; ++j)
      if (out.at<float>({i, j}) != table.at<float>({row, j})) ++wrong;
  }
  CHECK(wrong == 0);
}

TEST_CASE("gather: along dim 1 and dim 0") {
  Tensor t = tensor({{1, 2}, {3, 4}});
  // out[i][j] = t[i][index[i][j]]
  CHECK(mismatch(t.gather(1, indices({0, 0, 1, 0}, {2, 2})), {2, 2}, {1, 1, 4, 3}) == "");
  // out[i][j] = t[index[i][j]][j]
  CHECK(mismatch(t.gather(0, indices({0, 1, 1, 0}, {2, 2})), {2, 2}, {1, 4, 3, 2}) == "");
  CHECK(mismatch(t.gather(-1, indices({1, 0}, {2, 1})), {2, 1}, {2, 3}) == "");
  // The index may be smaller than the tensor in the other dims.
  Tensor big = arange(9).to(kFloat64).reshape({3, 3});
  CHECK(mismatch(big.gather(1, indices({2, 0}, {2, 1})), {2, 1}, {2, 3}) == "");
  // The cross-entropy pattern: pick one class per row.
  Tensor logits = tensor({{0.1, 0.7, 0.2}, {0.5, 0.3, 0.2}});
  CHECK(mismatch(logits.gather(1, indices({1, 0}).unsqueeze(1)), {2, 1}, {0.7, 0.5}) == "");
}

TEST_CASE("gather: strided tensors and indices and a 3-d tensor") {
  Tensor t = tensor({{1, 2}, {3, 4}});
  // The transpose [[1, 3], [2, 4]]
  CHECK(mismatch(t.t().gather(1, indices({1, 1, 0, 1}, {2, 2})), {2, 2}, {3, 3, 2, 4}) == "");
  Tensor idx_t = indices({0, 1, 1, 0}, {2, 2}).t();  // [[0, 1], [1, 0]]
  CHECK(mismatch(t.gather(1, idx_t), {2, 2}, {1, 2, 4, 3}) == "");
  Generator gen(17);
  Tensor x = randn({2, 4, 3}, kFloat64, gen);
  Tensor idx = randint(0, 4, {2, 5, 3}, gen);
  Tensor g = x.gather(1, idx);
  CHECK(g.shape() == Shape{2, 5, 3});
  int64_t wrong = 0;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 5; ++j)
      for (int64_t k = 0; k < 3; ++k)
        if (g.at<double>({i, j, k}) != x.at<double>({i, idx.at<int64_t>({i, j, k}), k})) ++wrong;
  CHECK(wrong == 0);
}

TEST_CASE("scatter_add: accumulates repeated indices") {
  // out[index[i][j]][j] += src[i][j] along dim 0
  Tensor index = indices({0, 1, 2, 0, 0, 1, 2, 0, 0, 0}, {2, 5});
  Tensor out = scatter_add(zeros({3, 5}), 0, index, ones({2, 5}));
  CHECK(mismatch(out, {3, 5}, {1, 0, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0}) == "");
  // out[i][index[i][j]] += src[i][j] along dim 1, onto a non-zero base that is left unchanged.
  Tensor base = full({2, 3}, 10);
  Tensor src = tensor({{1, 2, 3}, {4, 5, 6}});
  Tensor r = scatter_add(base, 1, indices({2, 2, 0, 1, 1, 1}, {2, 3}), src);
  CHECK(mismatch(r, {2, 3}, {13, 10, 13, 10, 25, 10}) == "");
  CHECK(mismatch_with(base, full({2, 3}, 10)) == "");
  // A strided source.
  Tensor rt = scatter_add(zeros({2, 2}), 1, indices({0, 0, 1, 1}, {2, 2}), tensor({{1, 2}, {3, 4}}).t());
  CHECK(mismatch(rt, {2, 2}, {4, 0, 0, 6}) == "");
  CHECK(mismatch(kernels::scatter_add(zeros({3}), 0, indices({2, 2}), tensor({1, 2})), {3}, {0, 0, 3}) == "");
}

TEST_CASE("index_add: adds whole slices at the indexed positions") {
  Tensor src = tensor({{1, 2}, {3, 4}, {5, 6}});
  Tensor r = index_add(zeros({3, 2}), 0, indices({0, 2, 0}), src);
  CHECK(mismatch(r, {3, 2}, {6, 8, 0, 0, 3, 4}) == "");
  Tensor c = index_add(ones({3, 3}), 1, indices({2, 0}), tensor({{1, 2}, {3, 4}, {5, 6}}));
  CHECK(mismatch(c, {3, 3}, {3, 1, 2, 5, 1, 4, 7, 1, 6}) == "");
  // A transposed source: rows [1, 3, 5] and [2, 4, 6].
  Tensor t = index_add(zeros({2, 3}), 0, indices({1, 1}), src.t());
  CHECK(mismatch(t, {2, 3}, {0, 0, 0, 3, 7, 11}) == "");
  CHECK(mismatch(kernels::index_add(zeros({2}), 0, indices({1}), tensor({5})), {2}, {0, 5}) == "");
}

TEST_CASE("index_add and scatter_add check the source's shape and dtype, and gather and scatter_add take 0-d tensors") {
  // Only the source's length in dim was checked: a wider one wrote past the base (ASan), a
  // narrower one into the wrong elements.
  for (const Shape& wrong : {Shape{1, 400}, Shape{1, 5}, Shape{1, 2}, Shape{1, 4, 1}}) {
    std::string e = error_message([&] { index_add(zeros({3, 4}), 0, indices({2}), ones(wrong)); });
    CHECK(contains(e, "index_add: base [3,4], index [1], source " + shape_str(wrong) + ": the source must be of shape [1,4]"));
  }
  CHECK(contains(error_message([&] { index_add(zeros({3, 4}), 0, indices({2}), ones({1, 4}, kFloat64)); }),
                 "index_add: base float32 and source float64 must have the same dtype"));
  CHECK(contains(error_message([&] { scatter_add(zeros({3}), 0, indices({0}), ones({1}, kFloat64)); }),
                 "scatter_add: base float32 and source float64 must have the same dtype"));
  // A 0-d tensor is the one-element vector it holds (dim 0 or -1), as in PyTorch.
  Tensor five = scalar_tensor(5.0);
  Tensor g = five.gather(0, scalar_tensor(0, kInt64));
  CHECK(g.dim() == 0);
  CHECK(g.item<float>() == 5.0f);
  CHECK(five.gather(-1, scalar_tensor(0, kInt64)).item<float>() == 5.0f);
  CHECK(contains(error_message([&] { five.gather(0, scalar_tensor(1, kInt64)); }), "gather: index 1 out of range"));
  Tensor s = scatter_add(five, 0, scalar_tensor(0, kInt64), scalar_tensor(2.0));
  CHECK(s.dim() == 0);
  CHECK(s.item<float>() == 7.0f);
}

// PyTorch refuses a negative index in these ops (only dims count from the end): a padding id of
// -1 or -100 that wrapped would silently read or write a real row.
TEST_CASE("indexing ops refuse negative and too-large indices, naming the op, the index and the size") {
  Tensor t = tensor({{1, 2}, {3, 4}, {5, 6}});  // [3, 2]
  std::string e = error_message([&] { t.index_select(0, indices({0, -1})); });
  CHECK(contains(e, "index_select: index -1 out of range for dim 0 of size 3"));
  CHECK(contains(e, "negative indices are not wrapped"));
  CHECK(contains(error_message([&] { t.index_select(1, indices({-100})); }), "index_select: index -100"));
  CHECK(contains(error_message([&] { t.index_select(0, indices({3})); }), "index_select: index 3 out of range for dim 0 of size 3"));
  // The strided path (dim 1 of a non-contiguous table) checks too.
  CHECK(contains(error_message([&] { t.t().index_select(1, indices({-1})); }), "index_select: index -1"));
  e = error_message([&] { t.gather(1, indices({0, -1, 1, 0, 0, 0}, {3, 2})); });
  CHECK(contains(e, "gather: index -1 out of range for dim 1 of size 2"));
  CHECK(contains(error_message([&] { t.gather(0, indices({3, 0}, {1, 2})); }), "gather: index 3 out of range for dim 0 of size 3"));
  e = error_message([&] { scatter_add(zeros({3, 2}), 0, indices({-1, 0}, {1, 2}), ones({1, 2})); });
  CHECK(contains(e, "scatter_add: index -1 out of range for dim 0 of size 3"));
  e = error_message([&] { index_add(zeros({3, 2}), 0, indices({-2}), ones({1, 2})); });
  CHECK(contains(e, "index_add: index -2 out of range for dim 0 of size 3"));
  e = error_message([&] { index_add(zeros({2, 3}), 1, indices({-1}), ones({2, 1})); });  // the strided path
  CHECK(contains(e, "index_add: index -1 out of range for dim 1 of size 3"));
  // Nothing was written on the way: the inputs are unchanged.
  CHECK(mismatch(t, {3, 2}, {1, 2, 3, 4, 5, 6}) == "");
}

TEST_CASE("slice_scatter: writes a slice into zeros") {
  CHECK(mismatch(slice_scatter(tensor({7, 8}), {5}, 0, 1, 2), {5}, {0, 7, 0, 8, 0}) == "");
  CHECK(mismatch(slice_scatter(tensor({{1, 2}, {3, 4}}), {2, 3}, 1, 1, 1), {2, 3}, {0, 1, 2, 0, 3, 4}) == "");
  // One element is at the start whatever the step; more than fit are refused, the step never multiplied.
  CHECK(mismatch(slice_scatter(tensor({5, 6}).reshape({2, 1}), {2, 3}, 1, 2, INT64_MAX), {2, 3}, {0, 0, 5, 0, 0, 6}) == "");
  CHECK_THROWS_WITH_AS(slice_scatter(ones({3, 2}), {3, 4}, 1, 0, INT64_MAX),
                       doctest::Contains("slice_scatter: 2 elements from start 0 by step 9223372036854775807 do not fit "
                                         "in dim 1 of size 4 (shape [3,4])"),
                       Error);
  CHECK_THROWS_WITH_AS(slice_scatter(ones({2}), {3}, 0, 3, 1),
                       doctest::Contains("slice_scatter: 2 elements from start 3 by step 1 do not fit"), Error);
  CHECK_THROWS_WITH_AS(slice_scatter(ones({2}), {3, 4}, 1, 0, 1),
                       doctest::Contains("slice_scatter: a source of shape [2] cannot fill a slice of shape [3,4]"), Error);
}
