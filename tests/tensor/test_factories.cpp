// Factories and dtypes: tensors made from sizes, values and random draws.
#include <algorithm>
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;

TEST_CASE("dtype: sizes and names of the four dtypes") {
  CHECK(dtype_size(kFloat32) == 4);
  CHECK(dtype_size(kFloat64) == 8);
  CHECK(dtype_size(kInt64) == 8);
  CHECK(dtype_size(kBool) == 1);
  CHECK(dtype_name(kFloat32) == "float32");
  CHECK(dtype_name(kFloat64) == "float64");
  CHECK(dtype_name(kInt64) == "int64");
  CHECK(dtype_name(kBool) == "bool");
  CHECK(is_floating(kFloat32));
  CHECK(is_floating(kFloat64));
  CHECK_FALSE(is_floating(kInt64));
  CHECK_FALSE(is_floating(kBool));
}

TEST_CASE("dtype: promotion goes bool then int64 then float32 then float64") {
  CHECK(promote(kFloat32, kFloat64) == kFloat64);
  CHECK(promote(kFloat64, kFloat32) == kFloat64);
  CHECK(promote(kInt64, kFloat32) == kFloat32);
  CHECK(promote(kBool, kInt64) == kInt64);
  CHECK(promote(kBool, kBool) == kBool);
}

TEST_CASE("factories: float32 is the default dtype") {
  CHECK(zeros({2}).dtype() == kFloat32);
  CHECK(ones({2}).dtype() == kFloat32);
  CHECK(empty({2}).dtype() == kFloat32);
  CHECK(full({2}, 1.5).dtype() == kFloat32);
  CHECK(tensor({1, 2}).dtype() == kFloat32);
  CHECK(rand({2}).dtype() == kFloat32);
  CHECK(randn({2}).dtype() == kFloat32);
  CHECK(eye(2).dtype() == kFloat32);
  CHECK(arange(3).dtype() == kInt64);  // as torch.arange with integer arguments
}

TEST_CASE("factories: empty gives the shape and contiguous strides") {
  Tensor t = empty({2, 3, 4}, kFloat64);
  CHECK(t.shape() == Shape{2, 3, 4});
  CHECK(t.strides() == Strides{12, 4, 1});
  CHECK(t.numel() == 24);
  CHECK(t.dim() == 3);
  CHECK(t.dtype() == kFloat64);
  CHECK(t.is_contiguous());
  CHECK(t.storage()->nbytes == 24 * 8);
  CHECK(t.offset() == 0);
}

TEST_CASE("factories: zeros and ones in every dtype") {
  CHECK(mismatch(zeros({2, 2}), {2, 2}, {0, 0, 0, 0}) == "");
  CHECK(mismatch(ones({3}, kFloat64), {3}, {1, 1, 1}) == "");
  CHECK(ones({2}, kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(ones({2}, kBool).to_vector<bool>() == std::vector<bool>{true, true});
  CHECK(zeros({2}, kBool).to_vector<bool>() == std::vector<bool>{false, false});
  CHECK(zeros({0, 3}).numel() == 0);
}

TEST_CASE("factories: full and scalar_tensor") {
  CHECK(mismatch(full({2, 3}, 2.5), {2, 3}, {2.5, 2.5, 2.5, 2.5, 2.5, 2.5}) == "");
  CHECK(full({2}, 7, kInt64).to_vector<int64_t>() == std::vector<int64_t>{7, 7});
  CHECK(full({1}, -0.125, kFloat64).item<double>() == -0.125);
  Tensor s = scalar_tensor(3.5);
  CHECK(s.dim() == 0);
  CHECK(s.shape() == Shape{});
  CHECK(s.numel() == 1);
  CHECK(s.item<float>() == 3.5f);
}

TEST_CASE("factories: a value no int64 holds is refused, not made INT64_MIN, as PyTorch") {
  using doctest::Contains;
  CHECK_THROWS_WITH_AS(full({2}, NAN, kInt64), Contains("full: value nan cannot be converted to int64"), Error);
  CHECK_THROWS_WITH_AS(full({2}, -INFINITY, kInt64), Contains("full: value -inf cannot be converted to int64"), Error);
  CHECK_THROWS_WITH_AS(full({2}, 0x1p63, kInt64),
                       Contains("full: value 9.223372036854776e+18 cannot be converted to int64"), Error);
  CHECK_THROWS_WITH_AS(scalar_tensor(INFINITY, kInt64), Contains("scalar_tensor: value inf cannot be converted"), Error);
  CHECK_THROWS_WITH_AS(tensor({1.0, NAN}, kInt64), Contains("tensor: value nan cannot be converted to int64"), Error);
  CHECK_THROWS_WITH_AS(arange(0x1p62, 0x1p63 + 0x1p62, 0x1p62, kInt64),
                       Contains("arange: value 9.223372036854776e+18 cannot be converted to int64"), Error);
  // The edges of the range, a fraction (dropped, as PyTorch's full drops it) and bool (NaN is true).
  CHECK(full({1}, -0x1p63, kInt64).item<int64_t>() == INT64_MIN);
  CHECK(full({1}, 2.5, kInt64).item<int64_t>() == 2);
  CHECK(full({1}, NAN, kBool).item<bool>());
  CHECK(std::isnan(full({1}, NAN, kFloat32).item<float>()));
}

TEST_CASE("factories: a finite fill beyond float32's or bfloat16's range is refused, as PyTorch") {
  using doctest::Contains;
  CHECK_THROWS_WITH_AS(full({2}, 1e300, kFloat32), Contains("full: value 1e+300 cannot be converted to float32 without overflow"),
                       Error);
  CHECK_THROWS_WITH_AS(full({2}, -3.4028235e38, kFloat32), Contains("cannot be converted to float32"), Error);  // past -FLT_MAX
  CHECK_THROWS_WITH_AS(scalar_tensor(3.39e38, kBFloat16), Contains("scalar_tensor: value 3.39e+38 cannot be converted to bfloat16"),
                       Error);
  Tensor t = zeros({2});
  CHECK_THROWS_WITH_AS(t.fill_(1e39), Contains("fill_: value 1e+39 cannot be converted to float32"), Error);
  CHECK_THROWS_WITH_AS(t.masked_fill(tensor({1, 0}, kBool), -1e39), Contains("masked_fill: value -1e+39"), Error);
  CHECK_THROWS_WITH_AS(t.masked_fill_(tensor({1, 0}, kBool), 1e39), Contains("masked_fill_: value 1e+39"), Error);
  CHECK_THROWS_WITH_AS(nn::init::constant_(t, 1e39), Contains("constant_: value 1e+39"), Error);
  CHECK(t.to_vector<float>() == std::vector<float>{0, 0});
  // The largest floats themselves, ±inf and NaN fill; float64 takes any double; a tensor's listed
  // values and arange's go to inf instead, as torch.tensor and torch.arange do.
  CHECK(full({1}, 0x1.fffffep127, kFloat32).item<float>() == std::numeric_limits<float>::max());
  CHECK(full({1}, -INFINITY, kFloat32).item<float>() == -INFINITY);
  CHECK(std::isnan(full({1}, NAN, kBFloat16).to(kFloat32).item<float>()));
  CHECK(full({1}, 1e300, kFloat64).item<double>() == 1e300);
  CHECK(tensor({1e300}, kFloat32).item<float>() == INFINITY);
  CHECK(arange(0, 1e300, 5e299, kFloat32).to_vector<float>() == std::vector<float>{0, INFINITY});
  // So do the numbers an op takes beside a tensor, as PyTorch's scalar operands.
  const Tensor two = full({2}, 2.0, kFloat32);
  CHECK((two * 1e300).to_vector<float>() == std::vector<float>{INFINITY, INFINITY});
  CHECK((two < 1e300).to_vector<bool>() == std::vector<bool>{true, true});
  CHECK(two.clamp(-1e300, 1e300).to_vector<float>() == std::vector<float>{2, 2});
  CHECK(two.clone().add_(-1e300).to_vector<float>() == std::vector<float>{-INFINITY, -INFINITY});
}

TEST_CASE("factories: arange with a step of any sign") {
  CHECK(arange(5).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(2, 6).to_vector<int64_t>() == std::vector<int64_t>{2, 3, 4, 5});
  CHECK(arange(5, 0, -2).to_vector<int64_t>() == std::vector<int64_t>{5, 3, 1});
  CHECK(mismatch(arange(1, 2, 0.25, kFloat32), {4}, {1, 1.25, 1.5, 1.75}) == "");
  CHECK(mismatch(arange(0, 1, 0.3, kFloat64), {4}, {0, 0.3, 0.6, 0.9}, 1e-12) == "");
  CHECK(arange(3, 3).numel() == 0);
}

TEST_CASE("factories: arange takes its dtype from its bounds, as torch.arange does") {
  // Integers throughout: int64. A floating bound or step anywhere: float32 (the default dtype).
  CHECK(arange(4).dtype() == kInt64);
  CHECK(arange(int64_t{2}, int64_t{6}).dtype() == kInt64);
  CHECK(arange(4.0).dtype() == kFloat32);
  CHECK(arange(0.0, 4).dtype() == kFloat32);
  CHECK(arange(0, 4.0).dtype() == kFloat32);
  CHECK(arange(0, 4, 1.0).dtype() == kFloat32);
  CHECK(mismatch(arange(0, 1, 0.25), {4}, {0, 0.25, 0.5, 0.75}) == "");  // was int64 [0, 0, 0, 0]
  CHECK(mismatch(arange(2.5), {3}, {0, 1, 2}) == "");
  // An explicit dtype wins either way.
  CHECK(arange(4, kFloat64).dtype() == kFloat64);
  CHECK(arange(0, 1, 0.25, kFloat64).dtype() == kFloat64);
  CHECK(arange(0.0, 3.0, 1.0, kInt64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
  CHECK(arange(0, 3, 1, TensorOptions(kFloat64).requires_grad()).requires_grad());
}

TEST_CASE("factories: eye") {
  CHECK(mismatch(eye(3), {3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1}) == "");
  Tensor e = eye(2, kInt64);
  CHECK(e.dtype() == kInt64);
  CHECK(e.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 1});
  CHECK(eye(0).shape() == Shape{0, 0});
}

TEST_CASE("factories: tensor from nested initializer lists") {
  Tensor v = tensor({1.5, -2, 3});
  CHECK(mismatch(v, {3}, {1.5, -2, 3}) == "");

  Tensor m = tensor({{1, 2, 3}, {4, 5, 6}}, kFloat64);
  CHECK(m.dtype() == kFloat64);
  CHECK(mismatch(m, {2, 3}, {1, 2, 3, 4, 5, 6}) == "");
  CHECK(m.at<double>({1, 0}) == 4.0);

  Tensor c = tensor({{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}, {{9, 10}, {11, 12}}});
  CHECK(mismatch(c, {3, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}) == "");
  CHECK(c.at<float>({2, 1, 0}) == 11.0f);

  Tensor i = tensor({{3, -1}}, kInt64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{3, -1});
  Tensor b = tensor({1, 0, 2}, kBool);
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, false, true});
}

TEST_CASE("factories: tensor from a std::vector takes its dtype from the element type") {
  Tensor f = tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(f.dtype() == kFloat32);
  CHECK(f.shape() == Shape{2, 3});
  CHECK(f.at<float>({1, 2}) == 6.0f);

  Tensor d = tensor(std::vector<double>{0.1, 0.2}, {2});
  CHECK(d.dtype() == kFloat64);
  CHECK(d.to_vector<double>() == std::vector<double>{0.1, 0.2});

  Tensor i = tensor(std::vector<int64_t>{4, 5, 6, 7}, {2, 2});
  CHECK(i.dtype() == kInt64);
  CHECK(i.at<int64_t>({1, 0}) == 6);

  Tensor b = tensor(std::vector<bool>{true, false, false, true}, {4});
  CHECK(b.dtype() == kBool);
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, false, false, true});

  Tensor s = tensor(std::vector<double>{2.5}, {});
  CHECK(s.dim() == 0);
  CHECK(s.item<double>() == 2.5);
}

TEST_CASE("factories: like factories keep shape and dtype") {
  Tensor base = tensor({{1, 2, 3}, {4, 5, 6}}, kFloat64);
  for (const Tensor& t : {empty_like(base), zeros_like(base), ones_like(base), full_like(base, 4),
                          rand_like(base), randn_like(base)}) {
    CHECK(t.shape() == Shape{2, 3});
    CHECK(t.dtype() == kFloat64);
    CHECK_FALSE(testing::shares_storage(t, base));
  }
  CHECK(mismatch(zeros_like(base), {2, 3}, {0, 0, 0, 0, 0, 0}) == "");
  CHECK(mismatch(ones_like(base), {2, 3}, {1, 1, 1, 1, 1, 1}) == "");
  CHECK(mismatch(full_like(base, 4), {2, 3}, {4, 4, 4, 4, 4, 4}) == "");
  Tensor ints = arange(4);
  CHECK(full_like(ints, 9).dtype() == kInt64);
  CHECK(full_like(ints, 9).to_vector<int64_t>() == std::vector<int64_t>{9, 9, 9, 9});
  // Of a strided view: a fresh dense tensor of the view's shape.
  Tensor like_t = zeros_like(base.t());
  CHECK(like_t.shape() == Shape{3, 2});
  CHECK(like_t.is_contiguous());
}

TEST_CASE("factories: rand lies between 0 and 1 and randn has mean 0 and variance 1") {
  Generator gen(7);
  Tensor u = rand({10000}, kFloat64, gen);
  std::vector<double> uv = u.to_vector<double>();
  CHECK(*std::min_element(uv.begin(), uv.end()) >= 0.0);
  CHECK(*std::max_element(uv.begin(), uv.end()) < 1.0);
  CHECK(u.mean().item<double>() == doctest::Approx(0.5).epsilon(0.02));

  Tensor n = randn({20000}, kFloat64, gen);
  CHECK(n.mean().item<double>() == doctest::Approx(0.0).epsilon(0.03));
  CHECK(n.var().item<double>() == doctest::Approx(1.0).epsilon(0.03));
  CHECK(n.dtype() == kFloat64);
}

TEST_CASE("factories: randint draws every value from low up to high and no other") {
  Generator gen(11);
  Tensor r = randint(-2, 3, {2000}, gen);
  CHECK(r.dtype() == kInt64);
  std::vector<int64_t> counts(5, 0);
  int64_t outside = 0;
  for (int64_t v : r.to_vector<int64_t>()) {
    if (v < -2 || v >= 3)
      ++outside;
    else
      ++counts[v + 2];
  }
  CHECK(outside == 0);
  for (int64_t c : counts) CHECK(c > 300);  // 400 expected for each of the five values
}

TEST_CASE("factories: randint over the whole int64 range, as PyTorch draws it") {
  // 2^64 - 1 values: each draw below UINT64_MAX is taken as it comes, shifted down by 2^63.
  Generator gen(12), same(12);
  for (int64_t v : randint(INT64_MIN, INT64_MAX, {6}, gen).to_vector<int64_t>())
    CHECK(v == static_cast<int64_t>(same.next_u64() - (uint64_t{1} << 63)));
  Generator wide(13);
  for (int64_t v : randint(-5, INT64_MAX, {100}, wide).to_vector<int64_t>()) CHECK(v >= -5);
}

TEST_CASE("factories: requires_grad option marks the tensor") {
  Tensor w = zeros({2}, TensorOptions(kFloat64).requires_grad());
  CHECK(w.requires_grad());
  CHECK(w.dtype() == kFloat64);
  CHECK_FALSE(zeros({2}).requires_grad());
}
