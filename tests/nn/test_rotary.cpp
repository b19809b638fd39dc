// Rotary position embeddings: values by hand, the two layouts as one rotation on permuted
// features, norms kept, a position offset for cached decoding, scores that depend only on
// m − n, gradcheck and gradgradcheck in float64, bad arguments.
#include <doctest/doctest.h>

#include <cmath>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
namespace F = cppgrad::nn::functional;
using namespace nntest;  // the helpers of nn_helpers.h

TEST_CASE("apply_rotary turns each pair by position times theta_i") {
  // d = 4: θ_0 = 1, θ_1 = base^(−1/2) = 0.01 for base 10⁴. Position 2 (offset 2, one row).
  Tensor x = tensor({{1, 0, 0, 1}}, kFloat64);
  // Halves, the default, pairs feature i with feature i + 2: (1, 0) and (0, 1).
  check_values(F::apply_rotary(x, 2), {std::cos(2.0), -std::sin(0.02), std::sin(2.0), std::cos(0.02)});
  // Interleaved pairs adjacent features: (1, 0) and (0, 1) again, in the other places.
  check_values(F::apply_rotary(x, 2, 10000.0, RotaryLayout::Interleaved),
               {std::cos(2.0), std::sin(2.0), -std::sin(0.02), std::cos(0.02)});
  // Position 0 is the identity; the angles are m·θ_i.
  check_values(F::apply_rotary(x, 0), {1, 0, 0, 1});
  check_values(F::rotary_angles(2, 4, 3, 100.0), {3, 0.3, 4, 0.4});
}

TEST_CASE("the two layouts are the same rotation of features in another order, and keep norms") {
  Tensor x = randn64({2, 5, 6}, 7201);
  // interleaved pairs (0,1), (2,3), (4,5) are halves pairs (0,3), (1,4), (2,5) after this order
  Tensor to_halves = tensor(std::vector<int64_t>{0, 2, 4, 1, 3, 5}, Shape{6});
  Tensor back = tensor(std::vector<int64_t>{0, 3, 1, 4, 2, 5}, Shape{6});
  Tensor interleaved = F::apply_rotary(x, 3, 500.0, RotaryLayout::Interleaved);
  Tensor halves = F::apply_rotary(x.index_select(-1, to_halves), 3, 500.0).index_select(-1, back);
  CHECK(max_abs_diff(interleaved, halves) < 1e-14);
  CHECK(max_abs_diff((interleaved * interleaved).sum({-1}), (x * x).sum({-1})) < 1e-12);
  RotaryEmbedding rope(RotaryEmbeddingOptions(6).base(500.0));  // Halves, as apply_rotary's default
  CHECK(max_abs_diff(rope.forward(x, 3), F::apply_rotary(x, 3, 500.0, RotaryLayout::Halves)) == 0.0);
  CHECK(rope.named_parameters().empty());
  CHECK(rope.extra_repr() == "dim=6, base=500, layout=halves");
  RotaryEmbedding meta(RotaryEmbeddingOptions(6).base(500.0).layout(RotaryLayout::Interleaved));
  CHECK(max_abs_diff(meta.forward(x, 3), interleaved) == 0.0);
  CHECK(meta.extra_repr() == "dim=6, base=500, layout=interleaved");
}

TEST_CASE("a position offset rotates a suffix as the whole sequence does: cached decoding") {
  Tensor x = randn64({2, 3, 7, 8}, 7202);  // (B, H, T, d)
  for (RotaryLayout layout : {RotaryLayout::Interleaved, RotaryLayout::Halves}) {
    Tensor whole = F::apply_rotary(x, 0, 10000.0, layout);
    Tensor tail = F::apply_rotary(x.narrow(2, 4, 3), 4, 10000.0, layout);
    CHECK(max_abs_diff(whole.narrow(2, 4, 3), tail) == 0.0);  // the same angles, the same products
  }
}

TEST_CASE("with RoPE the score of query m and key n depends only on m - n") {
  const int64_t d = 16;
  Tensor q = randn64({1, d}, 7203), k = randn64({1, d}, 7204);
  for (RotaryLayout layout : {RotaryLayout::Interleaved, RotaryLayout::Halves}) {
    auto score = [&](int64_t m, int64_t n) {
      return (F::apply_rotary(q, m, 10000.0, layout) * F::apply_rotary(k, n, 10000.0, layout)).sum().item<double>();
    };
    for (auto [m, n] : {std::pair<int64_t, int64_t>{5, 2}, {2, 5}, {9, 9}, {0, 7}}) {
      // Shifting both positions by 1, 100 and 10000 moves the score only by rounding: the
      // angles reach 10⁴ radians, whose float64 cos and sin are good to ~1e-12.
      for (int64_t shift : {1, 100, 10000}) CHECK(std::abs(score(m + shift, n + shift) - score(m, n)) < 1e-10);
    }
    CHECK(std::abs(score(5, 2) - score(2, 5)) > 1e-3);  // the offset's sign matters, as it should
    CHECK(std::abs(score(5, 2) - score(5, 3)) > 1e-3);
  }
}

TEST_CASE("gradcheck and gradgradcheck apply_rotary in both layouts") {
  Tensor x = randn64({2, 3, 4}, 7205, true);
  for (RotaryLayout layout : {RotaryLayout::Interleaved, RotaryLayout::Halves}) {
    auto f = [&](const std::vector<Tensor>& in) { return F::apply_rotary(in[0], 1, 10.0, layout); };
    CHECK(gradcheck(f, {x}));
    CHECK(gradgradcheck(f, {x}));
  }
  // A non-contiguous input (a transposed view) rotates as its contiguous copy.
  Tensor xt = randn64({4, 3}, 7206).t();
  CHECK(max_abs_diff(F::apply_rotary(xt, 1), F::apply_rotary(xt.contiguous(), 1)) == 0.0);
}

TEST_CASE("rotary refuses an odd dim, a negative offset, a bad base and a wrong width") {
  std::string msg = error_message([] { F::apply_rotary(zeros({3, 5}, kFloat64)); });
  CHECK(contains(msg, "apply_rotary"));
  CHECK(contains(msg, "5"));
  CHECK(contains(msg, "even"));
  CHECK(contains(error_message([] { F::apply_rotary(zeros({3, 4}), -1); }), "position_offset -1"));
  CHECK(contains(error_message([] { F::apply_rotary(zeros({3, 4}), INT64_MAX); }),
                 "position_offset 9223372036854775807 + length 3 passes 2^53"));
  CHECK(contains(error_message([] { F::apply_rotary(zeros({3, 4}), 0, 0.0); }), "base 0"));
  CHECK(contains(error_message([] { RotaryEmbedding(RotaryEmbeddingOptions(7)); }), "RotaryEmbedding: dim 7"));
  CHECK(contains(error_message([] { RotaryEmbedding(RotaryEmbeddingOptions(8)).forward(zeros({2, 6})); }),
                 "[2,6]"));
  CHECK(contains(error_message([] { F::apply_rotary(zeros({4}, kFloat64)); }), "apply_rotary"));
}
