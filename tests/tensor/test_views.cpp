// Views share storage and copy nothing: each test checks the storage pointer and the strides.
#include <algorithm>

#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;

namespace {
// [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]] as float32
Tensor grid() { return arange(12).to(kFloat32).reshape({3, 4}); }
}  // namespace

TEST_CASE("views: a write through a view is seen by the base") {
  Tensor base = zeros({2, 3});
  Tensor row = base.select(0, 1);
  CHECK(shares_storage(row, base));
  row.at<float>({2}) = 5.0f;
  CHECK(base.at<float>({1, 2}) == 5.0f);
  row.fill_(7.0);
  CHECK(mismatch(base, {2, 3}, {0, 0, 0, 7, 7, 7}) == "");
  // And the other way round.
  base.at<float>({1, 0}) = -1.0f;
  CHECK(row.at<float>({0}) == -1.0f);
}

TEST_CASE("views: reshape and view of a contiguous tensor share storage") {
  Tensor a = grid();
  Tensor v = a.view({2, 6});
  CHECK(shares_storage(v, a));
  CHECK(v.shape() == Shape{2, 6});
  CHECK(v.strides() == Strides{6, 1});
  CHECK(v.at<float>({1, 0}) == 6.0f);

  Tensor r = a.reshape({-1});
  CHECK(shares_storage(r, a));
  CHECK(r.shape() == Shape{12});
  CHECK(r.at<float>({11}) == 11.0f);

  Tensor w = a.view({2, -1, 3});
  CHECK(w.shape() == Shape{2, 2, 3});
  CHECK(w.strides() == Strides{6, 3, 1});
}

TEST_CASE("views: view fails when the strides forbid it and reshape copies then") {
  Tensor a = grid();
  Tensor t = a.t();  // [4,3] with strides [1,4]
  CHECK_THROWS_AS(t.view({12}), Error);
  CHECK_THROWS_WITH_AS(t.view({12}), doctest::Contains("view: a tensor of shape [4,3] with strides [1,4]"), Error);
  Tensor r = t.reshape({12});
  CHECK_FALSE(shares_storage(r, a));
  CHECK(r.is_contiguous());
  CHECK(mismatch(r, {12}, {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}) == "");
  // A view of a transpose is possible when it only splits or joins compatible dims.
  Tensor split = t.view({2, 2, 3});
  CHECK(shares_storage(split, a));
  CHECK(split.strides() == Strides{2, 1, 4});
  CHECK(split.at<float>({1, 0, 2}) == 10.0f);
}

TEST_CASE("views: transpose and t swap strides") {
  Tensor a = grid();
  Tensor t = a.transpose(0, 1);
  CHECK(shares_storage(t, a));
  CHECK(t.shape() == Shape{4, 3});
  CHECK(t.strides() == Strides{1, 4});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.at<float>({3, 1}) == 7.0f);
  CHECK(mismatch_with(a.t(), t) == "");
  Tensor b = arange(24).reshape({2, 3, 4});
  Tensor bt = b.mT();
  CHECK(bt.shape() == Shape{2, 4, 3});
  CHECK(bt.strides() == Strides{12, 1, 4});
  CHECK(bt.transpose(-1, -2).is_contiguous());
}

TEST_CASE("views: permute reorders shape and strides") {
  Tensor a = arange(24).reshape({2, 3, 4});
  Tensor p = a.permute({2, 0, 1});
  CHECK(shares_storage(p, a));
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Strides{1, 12, 4});
  CHECK(p.at<int64_t>({3, 1, 2}) == 12 + 2 * 4 + 3);
  CHECK(p.permute({1, 2, 0}).is_contiguous());
  CHECK(a.permute({-1, -3, -2}).shape() == Shape{4, 2, 3});
}

TEST_CASE("views: squeeze and unsqueeze") {
  Tensor a = zeros({1, 3, 1, 2});
  Tensor s = a.squeeze();
  CHECK(shares_storage(s, a));
  CHECK(s.shape() == Shape{3, 2});
  CHECK(s.strides() == Strides{2, 1});
  CHECK(a.squeeze(2).shape() == Shape{1, 3, 2});
  CHECK(a.squeeze(-4).shape() == Shape{3, 1, 2});
  CHECK(a.squeeze(1).shape() == Shape{1, 3, 1, 2});  // not of size 1: unchanged, as in PyTorch

  Tensor b = grid();
  Tensor u0 = b.unsqueeze(0);
  CHECK(shares_storage(u0, b));
  CHECK(u0.shape() == Shape{1, 3, 4});
  CHECK(u0.is_contiguous());
  CHECK(b.unsqueeze(1).shape() == Shape{3, 1, 4});
  CHECK(b.unsqueeze(-1).shape() == Shape{3, 4, 1});
  CHECK(b.unsqueeze(-1).strides() == Strides{4, 1, 1});
  CHECK(scalar_tensor(2).unsqueeze(0).shape() == Shape{1});
}

TEST_CASE("views: flatten merges a range of dims") {
  Tensor a = arange(24).reshape({2, 3, 4});
  Tensor f = a.flatten();
  CHECK(shares_storage(f, a));
  CHECK(f.shape() == Shape{24});
  CHECK(a.flatten(1).shape() == Shape{2, 12});
  CHECK(a.flatten(0, 1).shape() == Shape{6, 4});
  CHECK(a.flatten(0, 1).at<int64_t>({5, 3}) == 23);
  CHECK(scalar_tensor(1).flatten().shape() == Shape{1});
  // A transposed tensor cannot be flattened in place: flatten copies, as reshape does.
  Tensor ft = a.transpose(1, 2).flatten(1);
  CHECK_FALSE(shares_storage(ft, a));
  CHECK(ft.shape() == Shape{2, 12});
  CHECK(ft.at<int64_t>({0, 1}) == 4);
}

TEST_CASE("views: narrow and slice with a step") {
  Tensor a = grid();
  Tensor n = a.narrow(1, 1, 2);
  CHECK(shares_storage(n, a));
  CHECK(n.shape() == Shape{3, 2});
  CHECK(n.strides() == Strides{4, 1});
  CHECK(n.offset() == 1);
  CHECK(mismatch(n, {3, 2}, {1, 2, 5, 6, 9, 10}) == "");

  Tensor s = a.slice(1, 0, 4, 2);  // columns 0 and 2
  CHECK(shares_storage(s, a));
  CHECK(s.strides() == Strides{4, 2});
  CHECK(mismatch(s, {3, 2}, {0, 2, 4, 6, 8, 10}) == "");

  Tensor r = a.slice(0, 1, 100);  // the end is clamped, as in Python
  CHECK(mismatch(r, {2, 4}, {4, 5, 6, 7, 8, 9, 10, 11}) == "");
  CHECK(r.offset() == 4);
  CHECK(mismatch(a.slice(1, -2, 4), {3, 2}, {2, 3, 6, 7, 10, 11}) == "");
  CHECK(a.slice(0, 2, 1).shape() == Shape{0, 4});  // empty, not an error
  CHECK(mismatch(arange(10).slice(0, 1, 10, 3), {3}, {1, 4, 7}) == "");
  CHECK(mismatch(a.narrow(0, -1, 1), {1, 4}, {8, 9, 10, 11}) == "");
  // As in PyTorch, a step however large selects the first element (its arithmetic does not overflow).
  CHECK(mismatch(a.slice(1, 0, 3, INT64_MAX), {3, 1}, {0, 4, 8}) == "");
  CHECK(mismatch(a.slice(1, 2, 4, INT64_MAX), {3, 1}, {2, 6, 10}) == "");
  CHECK(a.slice(1, 4, 4, INT64_MAX).shape() == Shape{3, 0});
}

TEST_CASE("views: select removes a dim") {
  Tensor a = grid();
  Tensor c = a.select(1, 2);
  CHECK(shares_storage(c, a));
  CHECK(c.shape() == Shape{3});
  CHECK(c.strides() == Strides{4});
  CHECK(c.offset() == 2);
  CHECK(mismatch(c, {3}, {2, 6, 10}) == "");
  CHECK(mismatch(a.select(0, -1), {4}, {8, 9, 10, 11}) == "");
  CHECK(a.select(0, 1).select(0, 3).item<float>() == 7.0f);
}

TEST_CASE("views: expand broadcasts with zero strides") {
  Tensor col = tensor({1, 2, 3}).reshape({3, 1});
  Tensor e = col.expand({3, 4});
  CHECK(shares_storage(e, col));
  CHECK(e.strides() == Strides{1, 0});
  CHECK(mismatch(e, {3, 4}, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}) == "");
  Tensor row = tensor({5, 6});
  Tensor e2 = row.expand({2, 3, -1});
  CHECK(e2.shape() == Shape{2, 3, 2});
  CHECK(e2.strides() == Strides{0, 0, 1});
  CHECK(e2.at<float>({1, 2, 1}) == 6.0f);
  CHECK(mismatch(row.expand_as(zeros({2, 2})), {2, 2}, {5, 6, 5, 6}) == "");
}

TEST_CASE("views: contiguous returns the same tensor when already contiguous") {
  Tensor a = grid();
  CHECK(a.contiguous().is_same(a));
  Tensor t = a.t();
  Tensor c = t.contiguous();
  CHECK_FALSE(c.is_same(t));
  CHECK_FALSE(shares_storage(c, a));
  CHECK(c.is_contiguous());
  CHECK(c.strides() == Strides{3, 1});
  CHECK(mismatch(c, {4, 3}, {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}) == "");
  // A slice of whole rows is contiguous though its offset is not 0.
  Tensor rows = a.slice(0, 1, 3);
  CHECK(rows.is_contiguous());
  CHECK(rows.contiguous().is_same(rows));
  // Of an expanded tensor: a dense copy.
  Tensor e = tensor({1, 2}).expand({3, 2}).contiguous();
  CHECK(e.strides() == Strides{2, 1});
  CHECK(mismatch(e, {3, 2}, {1, 2, 1, 2, 1, 2}) == "");
}

TEST_CASE("views: clone copies the data") {
  Tensor a = grid();
  Tensor c = a.clone();
  CHECK_FALSE(shares_storage(c, a));
  CHECK(mismatch_with(c, a) == "");
  c.at<float>({0, 0}) = 100.0f;
  CHECK(a.at<float>({0, 0}) == 0.0f);
  Tensor ct = a.t().clone();
  CHECK(ct.is_contiguous());
  CHECK(mismatch_with(ct, a.t()) == "");
}

TEST_CASE("views: to converts dtypes and returns itself for the same dtype") {
  Tensor f = tensor({-1.5, 0, 2.75});
  CHECK(f.to(kFloat32).is_same(f));
  Tensor d = f.to(kFloat64);
  CHECK(d.dtype() == kFloat64);
  CHECK(d.to_vector<double>() == std::vector<double>{-1.5, 0, 2.75});
  CHECK(f.to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{-1, 0, 2});  // truncates toward 0
  CHECK(f.to(kBool).to_vector<bool>() == std::vector<bool>{true, false, true});
  CHECK(tensor({1, 0}, kBool).to(kFloat32).to_vector<float>() == std::vector<float>{1, 0});
  // Of a strided view: the values in the view's order.
  CHECK(mismatch(grid().t().to(kFloat64), {4, 3}, {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}) == "");
}

TEST_CASE("views: item and at") {
  CHECK(scalar_tensor(4.25, kFloat64).item<double>() == 4.25);
  CHECK(scalar_tensor(4.25).item() == 4.25);
  CHECK(tensor({3}, kInt64).reshape({1, 1}).item<int64_t>() == 3);
  CHECK(tensor({1}, kBool).item<bool>());
  CHECK(grid().select(0, 2).narrow(0, 3, 1).item<float>() == 11.0f);

  Tensor a = grid();
  CHECK(a.at<float>({2, 3}) == 11.0f);
  CHECK(a.at<float>({-1, -1}) == 11.0f);
  Tensor t = a.t();
  CHECK(t.at<float>({2, 1}) == 6.0f);
  t.at<float>({2, 1}) = 60.0f;  // writes through the view
  CHECK(a.at<float>({1, 2}) == 60.0f);
  CHECK_THROWS_AS(a.at<float>({3, 0}), Error);
  CHECK_THROWS_AS(a.at<double>({0, 0}), Error);  // wrong dtype
  CHECK_THROWS_AS(a.item<float>(), Error);      // 12 elements
}

TEST_CASE("views: the version counter counts writes through any view") {
  Tensor a = zeros({4});
  const uint64_t v0 = a.version();
  Tensor part = a.narrow(0, 1, 2);
  part.fill_(1.0);
  CHECK(a.version() > v0);
  CHECK(mismatch(a, {4}, {0, 1, 1, 0}) == "");
}

TEST_CASE("views: copy_ broadcasts the source and converts its dtype") {
  Tensor dst = zeros({2, 3});
  dst.copy_(tensor({1, 2, 3}, kInt64));
  CHECK(mismatch(dst, {2, 3}, {1, 2, 3, 1, 2, 3}) == "");
  CHECK(dst.dtype() == kFloat32);
  Tensor ints = zeros({2, 2}, kInt64);
  kernels::copy_(ints, tensor({{1.9, -1.9}, {2.5, 0}}, kFloat64));
  CHECK(ints.to_vector<int64_t>() == std::vector<int64_t>{1, -1, 2, 0});
  // Into a transposed view of the destination.
  Tensor base = zeros({2, 3});
  base.t().copy_(tensor({{1, 2}, {3, 4}, {5, 6}}));
  CHECK(mismatch(base, {2, 3}, {1, 3, 5, 2, 4, 6}) == "");
  CHECK_THROWS_AS(base.copy_(zeros({4})), Error);
}

TEST_CASE("views: detach alias and as_strided share storage") {
  Tensor a = grid();
  Tensor d = a.detach();
  CHECK(shares_storage(d, a));
  CHECK_FALSE(d.is_same(a));
  CHECK(d.shape() == a.shape());
  CHECK(shares_storage(kernels::alias(a), a));
  // Overlapping windows of 3 over [0, 1, ..., 11] stepping by 2: a strided view copies nothing.
  Tensor windows = kernels::as_strided(a, {5, 3}, {2, 1}, 0);
  CHECK(shares_storage(windows, a));
  CHECK(mismatch(windows, {5, 3}, {0, 1, 2, 2, 3, 4, 4, 5, 6, 6, 7, 8, 8, 9, 10}) == "");
  CHECK(mismatch(windows.sum({1}), {5}, {3, 9, 15, 21, 27}) == "");
}

TEST_CASE("views: data points at the first element of the view") {
  Tensor a = grid();
  Tensor s = a.slice(0, 1, 3).narrow(1, 2, 2);
  CHECK(s.data<float>() == a.data<float>() + 6);
  CHECK(*s.data<float>() == 6.0f);
  CHECK(s.to_vector<float>() == std::vector<float>{6, 7, 10, 11});
  CHECK(s.to_vector<int64_t>() == std::vector<int64_t>{6, 7, 10, 11});
}

TEST_CASE("views: tensors are freed when their last handle goes") {
  const int64_t before = live_tensor_count();
  {
    Tensor a = grid();
    Tensor v = a.t().reshape({12}).narrow(0, 2, 5);
    Tensor w = (v * 2.0).sum();
    CHECK(live_tensor_count() > before);
  }
  CHECK(live_tensor_count() == before);
}

TEST_CASE("views: reshape of any strided layout keeps row-major order") {
  // Every permutation of a [2,3,4] tensor, plain, with a size-1 dim inserted, and sliced; each
  // reshaped to many shapes. A reshape must list the elements in the view's row-major order,
  // share storage exactly when view() succeeds, and view() must fail only when reshape copies.
  const Tensor base = arange(48).to(kFloat32).reshape({2, 3, 8});
  std::vector<Tensor> layouts;
  std::vector<int64_t> perm = {0, 1, 2};
  do {
    Tensor p = base.narrow(2, 0, 4).permute(perm);  // rows 8 apart: never contiguous
    layouts.push_back(p);
    layouts.push_back(base.slice(2, 0, 8, 2).permute(perm));
    layouts.push_back(p.contiguous());
    layouts.push_back(p.contiguous().unsqueeze(1));
    layouts.push_back(p.unsqueeze(3));
  } while (std::next_permutation(perm.begin(), perm.end()));
  const std::vector<Shape> targets = {{24}, {2, 12}, {12, 2}, {4, 6},    {6, 4},       {2, 3, 4},
                                      {4, 3, 2}, {3, 8}, {2, 2, 6}, {1, 24}, {24, 1}, {2, 1, 12}, {3, 2, 2, 2}};
  int64_t views = 0, copies = 0;
  for (const Tensor& t : layouts) {
    const std::vector<float> order = t.to_vector<float>();
    for (const Shape& shape : targets) {
      CAPTURE(shape_str(t.shape()));
      CAPTURE(shape_str(t.strides()));
      CAPTURE(shape_str(shape));
      Tensor r = t.reshape(shape);
      CHECK(r.shape() == shape);
      CHECK(r.to_vector<float>() == order);
      bool viewed = false;
      try {
        Tensor v = t.view(shape);
        viewed = true;
        CHECK(v.to_vector<float>() == order);
      } catch (const Error&) {
      }
      CHECK(viewed == shares_storage(r, t));
      (viewed ? views : copies) += 1;
    }
  }
  // Both paths were taken many times.
  CHECK(views > 100);
  CHECK(copies > 100);
}
