// matmul against hand-worked values and a naive triple loop, on dense and strided operands.
#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;

namespace {

// C[i][j] = Σ_k A[i][k] B[k][j] for 2-d A and B, by the definition, in double.
Tensor naive_matmul(const Tensor& a, const Tensor& b) {
  REQUIRE(a.dim() == 2);
  REQUIRE(b.dim() == 2);
  REQUIRE(a.size(1) == b.size(0));
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  Tensor a64 = a.to(kFloat64), b64 = b.to(kFloat64);
  Tensor c = zeros({m, n}, kFloat64);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double total = 0;
      for (int64_t p = 0; p < k; ++p) total += a64.at<double>({i, p}) * b64.at<double>({p, j});
      c.at<double>({i, j}) = total;
    }
  return c;
}

// The naive product of every matrix of a [batch, m, k] and a [batch, k, n] tensor.
Tensor naive_bmm(const Tensor& a, const Tensor& b) {
  std::vector<Tensor> parts;
  for (int64_t i = 0; i < a.size(0); ++i) parts.push_back(naive_matmul(a.select(0, i), b.select(0, i)));
  return stack(parts, 0);
}

// Tolerance for a sum of k products of N(0,1) values in float32 or float64.
double tol(DType dtype) { return dtype == kFloat32 ? 1e-5 : 1e-12; }

}  // namespace

TEST_CASE("matmul: 1-d times 1-d is a dot product") {
  Tensor c = tensor({1, 2, 3}).matmul(tensor({4, 5, 6}));
  CHECK(c.dim() == 0);
  CHECK(c.item<float>() == 32.0f);
  CHECK(matmul(tensor({0.5, -1}, kFloat64), tensor({4, 2}, kFloat64)).item<double>() == 0.0);
}

TEST_CASE("matmul: 1-d times 2-d and 2-d times 1-d") {
  Tensor m = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(mismatch(tensor({1, 2}).matmul(m), {3}, {9, 12, 15}) == "");
  CHECK(mismatch(m.matmul(tensor({1, 0, -1})), {2}, {-2, -2}) == "");
  // With a transposed matrix: [1, 0, -1] @ mᵀ
  CHECK(mismatch(tensor({1, 0, -1}).matmul(m.t()), {2}, {-2, -2}) == "");
  CHECK(mismatch(m.t().matmul(tensor({1, 2})), {3}, {9, 12, 15}) == "");
}

TEST_CASE("matmul: 2-d by hand") {
  Tensor a = tensor({{1, 2}, {3, 4}}), b = tensor({{5, 6}, {7, 8}});
  CHECK(mismatch(a.matmul(b), {2, 2}, {19, 22, 43, 50}) == "");
  CHECK(mismatch(b.matmul(a), {2, 2}, {23, 34, 31, 46}) == "");
  CHECK(mismatch_with(a.matmul(eye(2)), a) == "");
  Tensor r = tensor({{1, 2, 3}}, kFloat64).matmul(ones({3, 1}, kFloat64));
  CHECK(mismatch(r, {1, 1}, {6}) == "");
  CHECK(r.dtype() == kFloat64);
}

TEST_CASE("matmul: 2-d random against the naive loop in float32 and float64") {
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dtype));
    Generator gen(31);
    Tensor a = randn({5, 7}, dtype, gen), b = randn({7, 3}, dtype, gen);
    Tensor c = a.matmul(b);
    CHECK(c.dtype() == dtype);
    CHECK(mismatch_with(c, naive_matmul(a, b), tol(dtype)) == "");
    // A larger square product.
    Tensor x = randn({64, 48}, dtype, gen), y = randn({48, 80}, dtype, gen);
    CHECK(mismatch_with(x.matmul(y), naive_matmul(x, y), tol(dtype)) == "");
  }
}

TEST_CASE("matmul: transposed views go to BLAS and give the right product") {
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dtype));
    Generator gen(41);
    Tensor a = randn({7, 5}, dtype, gen);  // used as aᵀ: [5, 7]
    Tensor b = randn({3, 7}, dtype, gen);  // used as bᵀ: [7, 3]
    Tensor at = a.t(), bt = b.t();
    REQUIRE_FALSE(at.is_contiguous());
    Tensor expected = naive_matmul(at, bt);
    CHECK(mismatch_with(at.matmul(bt), expected, tol(dtype)) == "");
    CHECK(mismatch_with(at.matmul(bt.contiguous()), expected, tol(dtype)) == "");
    CHECK(mismatch_with(at.contiguous().matmul(bt), expected, tol(dtype)) == "");
    // The operands are read in place, not changed.
    CHECK(at.strides() == Strides{1, 5});
  }
}

TEST_CASE("matmul: column slices and row slices of a wider matrix") {
  Generator gen(43);
  Tensor wide = randn({6, 10}, kFloat32, gen);
  Tensor cols = wide.narrow(1, 2, 4);  // [6, 4], rows 10 apart: BLAS reads it with ld = 10
  REQUIRE_FALSE(cols.is_contiguous());
  Tensor right = randn({4, 3}, kFloat32, gen);
  CHECK(mismatch_with(cols.matmul(right), naive_matmul(cols, right), 1e-5) == "");
  // A column slice on the right: [6, 10] sliced to [6, 4] is the right operand of [2, 6] @ [6, 4].
  Tensor left = randn({2, 6}, kFloat32, gen);
  CHECK(mismatch_with(left.matmul(cols), naive_matmul(left, cols), 1e-5) == "");
  // The transpose of a column slice: [4, 6] with strides [1, 10].
  CHECK(mismatch_with(cols.t().matmul(cols), naive_matmul(cols.t(), cols), 1e-5) == "");
  // Every other column, every other row: no BLAS layout, so a copy first; still right.
  Tensor stepped = wide.slice(1, 0, 10, 2).slice(0, 0, 6, 2);  // [3, 5]
  Tensor r5 = randn({5, 2}, kFloat32, gen);
  CHECK(mismatch_with(stepped.matmul(r5), naive_matmul(stepped, r5), 1e-5) == "");
  CHECK(mismatch_with(r5.t().matmul(stepped.t()), naive_matmul(r5.t(), stepped.t()), 1e-5) == "");
  // An expanded row (stride 0) is copied too.
  Tensor expanded = tensor({1, 2, 3, 4}).expand({3, 4});
  CHECK(mismatch_with(expanded.matmul(right), naive_matmul(expanded, right), 1e-5) == "");
}

TEST_CASE("matmul: batched with equal batch dims") {
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dtype));
    Generator gen(51);
    Tensor a = randn({4, 3, 5}, dtype, gen), b = randn({4, 5, 2}, dtype, gen);
    Tensor c = a.matmul(b);
    CHECK(c.shape() == Shape{4, 3, 2});
    CHECK(mismatch_with(c, naive_bmm(a, b), tol(dtype)) == "");
    // With the last two dims transposed on both sides.
    Tensor at = randn({4, 5, 3}, dtype, gen).mT(), bt = randn({4, 2, 5}, dtype, gen).mT();
    CHECK(mismatch_with(at.matmul(bt), naive_bmm(at, bt), tol(dtype)) == "");
  }
}

TEST_CASE("matmul: batch dims broadcast") {
  Generator gen(61);
  // [2, 1, 3, 4] @ [5, 4, 2] -> [2, 5, 3, 2]
  Tensor a = randn({2, 1, 3, 4}, kFloat64, gen), b = randn({5, 4, 2}, kFloat64, gen);
  Tensor c = a.matmul(b);
  CHECK(c.shape() == Shape{2, 5, 3, 2});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      CAPTURE(i);
      CAPTURE(j);
      Tensor expected = naive_matmul(a.select(0, i).select(0, 0), b.select(0, j));
      CHECK(mismatch_with(c.select(0, i).select(0, j), expected, 1e-12) == "");
    }
  // A 2-d left operand broadcast against a batch: [3, 4] @ [2, 4, 5]
  Tensor m = randn({3, 4}, kFloat64, gen), batch = randn({2, 4, 5}, kFloat64, gen);
  Tensor mb = m.matmul(batch);
  CHECK(mb.shape() == Shape{2, 3, 5});
  CHECK(mismatch_with(mb, naive_bmm(m.expand({2, 3, 4}), batch), 1e-12) == "");
  // A 1-d operand with a batch on the other side.
  Tensor v = randn({4}, kFloat64, gen);
  Tensor vb = v.matmul(batch);  // [4] @ [2, 4, 5] -> [2, 5]
  CHECK(mismatch_with(vb, naive_bmm(v.reshape({1, 1, 4}).expand({2, 1, 4}), batch).reshape({2, 5}), 1e-12) == "");
  Tensor bv = batch.mT().matmul(v);  // [2, 5, 4] @ [4] -> [2, 5]
  CHECK(mismatch_with(bv, vb, 1e-12) == "");
}

TEST_CASE("matmul: strided 1-d operands and expanded batches") {
  Generator gen(67);
  Tensor m = randn({5, 4}, kFloat64, gen);
  Tensor col = m.select(1, 2);  // [5] with stride 4
  Tensor row = m.select(0, 1);  // [4] with stride 1 at an offset
  Tensor sq = randn({5, 5}, kFloat64, gen);
  CHECK(mismatch_with(col.matmul(sq), naive_matmul(col.reshape({1, 5}), sq).reshape({5}), 1e-12) == "");
  CHECK(mismatch_with(sq.matmul(col), naive_matmul(sq, col.reshape({5, 1})).reshape({5}), 1e-12) == "");
  CHECK(mismatch_with(m.matmul(row), naive_matmul(m, row.reshape({4, 1})).reshape({5}), 1e-12) == "");
  double dot = 0;
  for (int64_t i = 0; i < 5; ++i) dot += m.at<double>({i, 2}) * m.at<double>({i, 2});
  CHECK(col.matmul(col).item<double>() == doctest::Approx(dot).epsilon(1e-12));
  // A batch dim of stride 0 on either side.
  Tensor a = randn({3, 4}, kFloat64, gen).expand({2, 3, 4});
  Tensor b = randn({2, 4, 5}, kFloat64, gen);
  CHECK(mismatch_with(a.matmul(b), naive_bmm(a, b), 1e-12) == "");
  Tensor bx = randn({4, 5}, kFloat64, gen).expand({2, 4, 5});
  Tensor bt = b.mT();  // [2, 5, 4]
  CHECK(mismatch_with(bt.matmul(bx), naive_bmm(bt, bx), 1e-12) == "");
}

TEST_CASE("matmul: a batch times one shared matrix") {
  Generator gen(71);
  Tensor w = randn({4, 6}, kFloat32, gen);
  // Contiguous: the batch folds into the rows of one GEMM.
  Tensor x = randn({2, 3, 4}, kFloat32, gen);
  CHECK(mismatch_with(x.matmul(w), naive_bmm(x, w.expand({2, 4, 6})), 1e-5) == "");
  // With a transposed weight, as a linear layer uses it.
  Tensor wt = randn({6, 4}, kFloat32, gen).t();
  CHECK(mismatch_with(x.matmul(wt), naive_bmm(x, wt.expand({2, 4, 6})), 1e-5) == "");
  // A head sliced from a wider projection: rows 8 apart, still foldable.
  Tensor proj = randn({2, 3, 8}, kFloat32, gen);
  Tensor head = proj.narrow(2, 4, 4);
  CHECK(mismatch_with(head.matmul(w), naive_bmm(head, w.expand({2, 4, 6})), 1e-5) == "");
  // A permuted batch that cannot fold: [3, 2, 4] viewed from [2, 3, 4].
  Tensor perm = x.transpose(0, 1);
  CHECK(mismatch_with(perm.matmul(w), naive_bmm(perm, w.expand({3, 4, 6})), 1e-5) == "");
}

TEST_CASE("matmul: a larger batch split across threads") {
  SmallParallelGrain threaded;
  Generator gen(81);
  Tensor a = randn({8, 32, 24}, kFloat64, gen), b = randn({8, 24, 16}, kFloat64, gen);
  CHECK(mismatch_with(a.matmul(b), naive_bmm(a, b), 1e-12) == "");
}

TEST_CASE("matmul: empty dims") {
  // An empty inner dim gives zeros.
  CHECK(mismatch(zeros({2, 0}).matmul(zeros({0, 3})), {2, 3}, {0, 0, 0, 0, 0, 0}) == "");
  CHECK(zeros({0, 4}).matmul(ones({4, 3})).shape() == Shape{0, 3});
  CHECK(ones({2, 4}).matmul(ones({4, 0})).shape() == Shape{2, 0});
  CHECK(ones({0, 2, 4}).matmul(ones({4, 3})).shape() == Shape{0, 2, 3});
}

TEST_CASE("matmul: the graph-free kernel gives the same result") {
  Tensor a = tensor({{1, 2}, {3, 4}}), b = tensor({{5, 6}, {7, 8}});
  CHECK(mismatch(kernels::matmul(a, b), {2, 2}, {19, 22, 43, 50}) == "");
  CHECK(mismatch(kernels::matmul(tensor({1, 2}), tensor({3, 4})), {}, {11}) == "");
  CHECK(mismatch(kernels::matmul(a.t(), b.t()), {2, 2}, {23, 31, 34, 46}) == "");
}
