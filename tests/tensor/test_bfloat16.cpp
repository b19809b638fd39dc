// The bfloat16 dtype: rounding float32 to it (ties to even, NaN kept, infinities, denormals),
// Tensor::to and back, factories, printing, and the errors of the ops that do not take it.
#include <bit>
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;
using namespace cppgrad::check;

namespace {
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint16_t bf16_bits(float f) { return float_to_bfloat16_bits(f); }
}  // namespace

TEST_CASE("bfloat16: a float32 with nothing in its low half converts exactly, and back") {
  for (float x : {0.0f, -0.0f, 1.0f, -2.0f, 0.5f, 3.0f, 1.5f, -96.0f, 1e30f - 1e30f}) {
    CHECK(bfloat16_bits_to_float(bf16_bits(x)) == x);
    CHECK(std::signbit(round_to_bfloat16(x)) == std::signbit(x));
  }
  CHECK(bf16_bits(1.0f) == 0x3f80);
  CHECK(bf16_bits(-2.0f) == 0xc000);
}

TEST_CASE("bfloat16: rounds to nearest, ties to even") {
  // 1 + 2^-8 lies halfway between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81): to the even one, 1.
  CHECK(bf16_bits(from_bits(0x3f808000)) == 0x3f80);
  // 1 + 3·2^-8 lies halfway between 0x3f81 (odd) and 0x3f82 (even): up, to 0x3f82.
  CHECK(bf16_bits(from_bits(0x3f818000)) == 0x3f82);
  // Just past halfway rounds up, just short of it down, whatever the parity.
  CHECK(bf16_bits(from_bits(0x3f808001)) == 0x3f81);
  CHECK(bf16_bits(from_bits(0x3f807fff)) == 0x3f80);
  CHECK(bf16_bits(from_bits(0x3f818001)) == 0x3f82);
  CHECK(bf16_bits(from_bits(0x3f817fff)) == 0x3f81);
  // Negative values round by magnitude, the same way.
  CHECK(bf16_bits(from_bits(0xbf808000)) == 0xbf80);
  CHECK(bf16_bits(from_bits(0xbf818000)) == 0xbf82);
  // A carry out of the mantissa moves to the next binade: 2 - 2^-9 rounds to 2.
  CHECK(bf16_bits(from_bits(0x3fffc000)) == 0x4000);
  // π to 8 bits: 3.140625 (0x4049), the nearest.
  CHECK(round_to_bfloat16(3.14159265f) == 3.140625f);
}

TEST_CASE("bfloat16: infinities stay, overflow rounds to infinity, NaN stays NaN") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(bf16_bits(inf) == 0x7f80);
  CHECK(bf16_bits(-inf) == 0xff80);
  // The largest float32 is past the largest bfloat16 (0x7f7f) by more than half a step: infinity.
  CHECK(bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(bf16_bits(from_bits(0x7f7f7fff)) == 0x7f7f);  // below the halfway point: the largest finite
  // NaNs: a quiet one, a signalling one, and one whose payload lies only in the low half (which
  // dropping the low half would turn into infinity).
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fa00000u, 0x7fffffffu}) {
    const float back = bfloat16_bits_to_float(bf16_bits(from_bits(nan)));
    CHECK(std::isnan(back));
    CHECK(std::signbit(back) == std::signbit(from_bits(nan)));
  }
}

TEST_CASE("bfloat16: denormals round like any other value") {
  // The smallest float32 denormal (2^-149) is far below half the smallest bfloat16 denormal (2^-133): zero.
  CHECK(bf16_bits(from_bits(0x00000001)) == 0x0000);
  CHECK(bf16_bits(from_bits(0x80000001)) == 0x8000);  // minus zero
  // A bfloat16 denormal converts exactly, and halfway between two rounds to the even one.
  CHECK(bf16_bits(from_bits(0x00010000)) == 0x0001);
  CHECK(bf16_bits(from_bits(0x00018000)) == 0x0002);
  CHECK(bf16_bits(from_bits(0x00008000)) == 0x0000);
  CHECK(bf16_bits(from_bits(0x00028000)) == 0x0002);
  // The largest denormals round up into the smallest normal.
  CHECK(bf16_bits(from_bits(0x007fffff)) == 0x0080);
}

TEST_CASE("bfloat16: the dtype's name, size, promotion and floating-ness") {
  CHECK(dtype_name(kBFloat16) == "bfloat16");
  CHECK(dtype_size(kBFloat16) == 2);
  CHECK(is_floating(kBFloat16));
  CHECK(promote(kBFloat16, kFloat32) == kFloat32);
  CHECK(promote(kInt64, kBFloat16) == kBFloat16);
  CHECK(promote(kBFloat16, kFloat64) == kFloat64);
}

TEST_CASE("dtype: every dtype's name, size and promotion rank, and a number no dtype has") {
  // The table in tensor/dtype.h is in the enum's order: a row out of place shows here.
  CHECK(dtype_name(kFloat32) == "float32");
  CHECK(dtype_size(kFloat32) == sizeof(float));
  CHECK(dtype_name(kFloat64) == "float64");
  CHECK(dtype_size(kFloat64) == sizeof(double));
  CHECK(dtype_name(kInt64) == "int64");
  CHECK(dtype_size(kInt64) == sizeof(int64_t));
  CHECK(dtype_name(kBool) == "bool");
  CHECK(dtype_size(kBool) == sizeof(bool));
  CHECK(dtype_size(kBFloat16) == sizeof(bfloat16));
  CHECK(promotion_rank(kBool) < promotion_rank(kInt64));
  CHECK(promotion_rank(kInt64) < promotion_rank(kBFloat16));
  CHECK(promotion_rank(kBFloat16) < promotion_rank(kFloat32));
  CHECK(promotion_rank(kFloat32) < promotion_rank(kFloat64));
  // A DType made from a file's number (distributed/zero.cpp reads one) may be none of them.
  const auto stray = static_cast<DType>(5);
  CHECK(dtype_name(stray) == "?");
  CHECK(dtype_size(stray) == 0);
}

TEST_CASE("bfloat16: Tensor::to rounds every element, and back to float32 is exact") {
  Generator gen(7);
  Tensor x = randn({3, 50}, kFloat32, gen) * 100.0;
  Tensor b = x.to(kBFloat16);
  CHECK(b.dtype() == kBFloat16);
  CHECK(b.storage()->nbytes >= 150 * 2);
  Tensor back = b.to(kFloat32);
  const std::vector<float> xs = x.to_vector<float>(), bs = back.to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    CHECK(bs[i] == round_to_bfloat16(xs[i]));
    // Within half a step of 8 significant bits: a step is 2^-7 of the binade's lowest value, so
    // |x - r(x)| <= 2^-8 |x|.
    CHECK(std::abs(bs[i] - xs[i]) <= std::ldexp(std::abs(xs[i]), -8));
  }
  CHECK(back.to(kBFloat16).to(kFloat32).to_vector<float>() == bs);  // rounding twice changes nothing
  // From float64, int64 and bool; to float64 exactly.
  CHECK(tensor({1.0, -3.0, 0.25}, kFloat64).to(kBFloat16).to(kFloat64).to_vector<double>() ==
        std::vector<double>{1.0, -3.0, 0.25});
  CHECK(tensor(std::vector<int64_t>{257, 3}, {2}).to(kBFloat16).to(kInt64).to_vector<int64_t>() ==
        std::vector<int64_t>{256, 3});  // 257 needs 9 bits: ties to even, 256
  CHECK(tensor({0.0, 2.0}, kBFloat16).to(kBool).to_vector<bool>() == std::vector<bool>{false, true});
}

TEST_CASE("bfloat16: factories, views, copies and indexing") {
  CHECK(zeros({2, 3}, kBFloat16).to(kFloat32).sum().item() == 0.0);
  CHECK(ones({4}, kBFloat16).to(kFloat32).to_vector<float>() == std::vector<float>{1, 1, 1, 1});
  CHECK(full({2}, 1.0 / 3.0, kBFloat16).to(kFloat32).to_vector<float>()[0] == round_to_bfloat16(1.0f / 3.0f));
  CHECK(arange(0, 4, 1, kBFloat16).to(kFloat32).to_vector<float>() == std::vector<float>{0, 1, 2, 3});
  CHECK(eye(2, kBFloat16).to(kFloat32).to_vector<float>() == std::vector<float>{1, 0, 0, 1});
  Tensor t = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}, kBFloat16);
  CHECK(t.transpose(0, 1).contiguous().to(kFloat32).to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(t.select(1, 2).to(kFloat32).to_vector<float>() == std::vector<float>{3, 6});
  CHECK(t.at<bfloat16>({1, 0}) == 4.0f);
  CHECK(tensor({2.5}, kBFloat16).item() == 2.5);
  // Random draws: the float64 draw rounded; rand stays below 1.
  Generator g1(3), g2(3), g3(3);
  Tensor r = rand({1000}, kBFloat16, g1);
  CHECK(r.dtype() == kBFloat16);
  CHECK(r.to(kFloat32).max().item() < 1.0);
  CHECK(randn({4}, kBFloat16, g2).to(kFloat32).to_vector<float>() ==
        randn({4}, kFloat32, g3).to(kBFloat16).to(kFloat32).to_vector<float>());
}

TEST_CASE("bfloat16: printing names the dtype") {
  const std::string s = fmt::format("{}", tensor({1.0, 2.5}, kBFloat16));
  CHECK(contains(s, "1.0"));
  CHECK(contains(s, "2.5"));
  CHECK(contains(s, "dtype=bfloat16"));
}

TEST_CASE("bfloat16: arithmetic says to convert first, naming the op") {
  Tensor b = ones({2, 2}, kBFloat16);
  for (auto op : std::vector<std::function<Tensor()>>{[&] { return b + b; }, [&] { return b.sum(); },
                                                        [&] { return b.exp(); }, [&] { return b.softmax(-1); },
                                                        [&] { return b * 2.0; }}) {
    const std::string what = error_message(op);
    CHECK(contains(what, "bfloat16"));
    CHECK(contains(what, ".to(kFloat32)"));
  }
  CHECK(contains(error_message([&] { return b.matmul(b); }), "matmul"));
  CHECK(contains(error_message([&] { return b.matmul(b); }), "bfloat16"));
  CHECK(contains(error_message([&] { return b.sum(); }), "sum:"));
}
