// Dropout keyed by example (tensor/keyed_dropout.h): a batch split 1, 2 or 4 ways, rank r of N
// holding global rows r, r + N, ..., draws each example's mask as the whole batch does, in every
// dropout path (dropout, relu_dropout, the attention weights fused and materialised), fast and
// reference alike, and a sequence padded to another length keeps its masks; outside a scope
// dropout draws as it always did.
#include <doctest/doctest.h>

#include <vector>

#include "cppgrad.h"
#include "nn_helpers.h"
#include "tensor/kernels.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;
using nntest::contains;
using nntest::error_message;
using nntest::max_abs_diff;

namespace {

constexpr uint64_t kSeed = 11;
constexpr int64_t kStep = 5;

// Rank r's global positions when `world` ranks share a batch of `batch`: r, r + world, ...
std::vector<int64_t> share(int64_t batch, int64_t world, int64_t rank) {
  std::vector<int64_t> rows;
  for (int64_t g = rank; g < batch; g += world) rows.push_back(g);
  return rows;
}

Tensor rows_of(const Tensor& t, const std::vector<int64_t>& rows) { return t.index_select(0, tensor(rows, {static_cast<int64_t>(rows.size())})); }

// f's output on the whole batch in one scope, and each rank's output on its share, put back in
// the global order: they must agree for every split.
template <class Fn>
void check_split_invariant(const Tensor& x, Fn f, double tolerance) {
  const int64_t batch = x.size(0);
  Tensor whole;
  {
    std::vector<int64_t> all = share(batch, 1, 0);
    KeyedDropout scope(kSeed, kStep, all);
    whole = f(x);
  }
  for (const int64_t world : {2, 4}) {
    for (int64_t rank = 0; rank < world; ++rank) {
      INFO("rank ", rank, " of ", world);
      const std::vector<int64_t> rows = share(batch, world, rank);
      KeyedDropout scope(kSeed, kStep, rows);
      Tensor part = f(rows_of(x, rows));
      CHECK(max_abs_diff(part, rows_of(whole, rows)) <= tolerance);
    }
  }
}

}  // namespace

TEST_CASE("keyed dropout: dropout and relu_dropout draw each example's mask whatever the split, fast and reference") {
  const Tensor x = nntest::randn64({8, 3, 5}, 1);
  for (const bool reference : {false, true}) {
    INFO("reference mode ", reference);
    ReferenceModeGuard mode(reference);
    // Masks are integers compared with a threshold, and x ⊙ mask one rounding of the same
    // numbers: the parts equal the whole exactly.
    check_split_invariant(x, [](const Tensor& t) { return F::dropout(t, 0.4, true); }, 0.0);
    check_split_invariant(x, [](const Tensor& t) { return F::relu_dropout(t, 0.4, true); }, 0.0);
    // Two calls in a scope draw two masks, and the call count keeps them apart on every rank.
    check_split_invariant(x, [](const Tensor& t) { return F::dropout(F::dropout(t, 0.3, true), 0.3, true); }, 0.0);
  }
  // The fast and reference forms draw the same mask in a scope too.
  Tensor fast, slow;
  for (const bool reference : {false, true}) {
    ReferenceModeGuard mode(reference);
    KeyedDropout scope(kSeed, kStep, {3, 0, 6});
    (reference ? slow : fast) = F::relu_dropout(x.narrow(0, 0, 3), 0.4, true);
  }
  CHECK(max_abs_diff(fast, slow) == 0.0);
  // Another step, seed or example draws another mask.
  Tensor ones = full({1, 400}, 1.0, kFloat64), base, other_step, other_seed, other_example;
  {
    KeyedDropout scope(kSeed, kStep, {2});
    base = F::dropout(ones, 0.5, true);
  }
  {
    KeyedDropout scope(kSeed, kStep + 1, {2});
    other_step = F::dropout(ones, 0.5, true);
  }
  {
    KeyedDropout scope(kSeed + 1, kStep, {2});
    other_seed = F::dropout(ones, 0.5, true);
  }
  {
    KeyedDropout scope(kSeed, kStep, {3});
    other_example = F::dropout(ones, 0.5, true);
  }
  CHECK(max_abs_diff(base, other_step) > 0.0);
  CHECK(max_abs_diff(base, other_seed) > 0.0);
  CHECK(max_abs_diff(base, other_example) > 0.0);
  // About half of 400 elements dropped (binomial: σ = 10).
  const double kept = ones.mul(base).gt(full({}, 0.0, kFloat64)).to(kFloat64).sum().item();
  CHECK(kept > 150);
  CHECK(kept < 250);
}

TEST_CASE("keyed dropout: a sequence padded to another length keeps its elements' masks") {
  // Each rank pads its share of a batch to its own longest sequence: an element's mask must not
  // depend on how far the tensor is padded, in (B, T, E) and in attention's (B, H, T, S).
  for (const bool reference : {false, true}) {
    INFO("reference mode ", reference);
    ReferenceModeGuard mode(reference);
    Tensor short_mask, long_mask;
    {
      KeyedDropout scope(kSeed, kStep, {4, 1});
      short_mask = F::dropout(full({2, 5, 3}, 1.0, kFloat64), 0.5, true);
      long_mask = F::dropout(full({2, 9, 3}, 1.0, kFloat64), 0.5, true);  // the next call: another mask
    }
    {
      KeyedDropout scope(kSeed, kStep, {4, 1});
      long_mask = F::dropout(full({2, 9, 3}, 1.0, kFloat64), 0.5, true);  // the same call, padded to 9
    }
    CHECK(max_abs_diff(long_mask.narrow(1, 0, 5), short_mask) == 0.0);
  }
  // Attention over T queries and S keys, padded to T + 2 and S + 3 (the padded keys hidden): the
  // real queries' outputs are those of the unpadded batch, fused and materialised.
  const Tensor q = nntest::randn64({2, 2, 4, 3}, 9), k = nntest::randn64({2, 2, 5, 3}, 10), v = nntest::randn64({2, 2, 5, 3}, 11);
  auto pad = [](const Tensor& t, int64_t extra) {
    Shape shape = t.shape();
    shape[2] = extra;
    return cat({t, zeros(shape, kFloat64)}, 2);
  };
  Tensor hidden = cat({zeros({5}, kBool), full({3}, 1.0, kFloat64).to(kBool)}, 0);  // the padded keys
  for (const auto backend : {F::AttentionBackend::Fused, F::AttentionBackend::Materialize}) {
    INFO("backend ", static_cast<int>(backend));
    nntest::AttentionBackendGuard guard(backend);
    Tensor plain, padded;
    {
      KeyedDropout scope(kSeed, kStep, {0, 3});
      plain = F::scaled_dot_product_attention(q, k, v, F::AttentionOptions().dropout_p(0.4)).output;
    }
    {
      KeyedDropout scope(kSeed, kStep, {0, 3});
      padded = F::scaled_dot_product_attention(pad(q, 2), pad(k, 3), pad(v, 3),
                                               F::AttentionOptions().dropout_p(0.4).attn_mask(hidden)).output;
    }
    // the same products, the padded keys' weights exact zeros: float64 rounding at most
    CHECK(max_abs_diff(padded.narrow(2, 0, 4), plain) <= 1e-12);
  }
}

TEST_CASE("keyed dropout: attention's weights, fused and materialised, (B, H, T, S) and grouped heads") {
  const Tensor q = nntest::randn64({4, 2, 6, 3}, 2), k = nntest::randn64({4, 2, 7, 3}, 3);
  const Tensor v = nntest::randn64({4, 2, 7, 3}, 4);
  const Tensor qkv = cat({q.reshape({4, -1}), k.reshape({4, -1}), v.reshape({4, -1})}, 1);  // one row an example
  auto attend = [](const Tensor& packed) {
    const int64_t b = packed.size(0);
    Tensor q = packed.narrow(1, 0, 36).reshape({b, 2, 6, 3}), k = packed.narrow(1, 36, 42).reshape({b, 2, 7, 3});
    Tensor v = packed.narrow(1, 78, 42).reshape({b, 2, 7, 3});
    return F::scaled_dot_product_attention(q, k, v, F::AttentionOptions().dropout_p(0.3)).output;
  };
  Tensor fused_whole, materialised_whole;
  for (const auto backend : {F::AttentionBackend::Fused, F::AttentionBackend::Materialize}) {
    for (const bool reference : {false, true}) {
      INFO("backend ", static_cast<int>(backend), ", reference mode ", reference);
      nntest::AttentionBackendGuard guard(backend);
      ReferenceModeGuard mode(reference);
      // Each example's rows are computed from its own numbers alone, but a product over 2 or 4
      // examples may be summed in another order than over 1: float64 rounding, far under 1e-12.
      check_split_invariant(qkv, attend, 1e-12);
    }
    nntest::AttentionBackendGuard guard(backend);
    KeyedDropout scope(kSeed, kStep, share(4, 1, 0));
    (backend == F::AttentionBackend::Fused ? fused_whole : materialised_whole) = attend(qkv);
  }
  // The fused kernel regenerates the very mask the materialised weights are multiplied by.
  CHECK(max_abs_diff(fused_whole, materialised_whole) <= 1e-12);
  // Grouped query heads: 4 query heads reading 2 key/value heads, weights (B, g, r, T, S).
  auto grouped = [](const Tensor& packed) {
    const int64_t b = packed.size(0);
    Tensor q = packed.narrow(1, 0, 72).reshape({b, 4, 6, 3}), k = packed.narrow(1, 72, 42).reshape({b, 2, 7, 3});
    Tensor v = packed.narrow(1, 114, 42).reshape({b, 2, 7, 3});
    return F::scaled_dot_product_attention(q, k, v, F::AttentionOptions().dropout_p(0.3).enable_gqa(true)).output;
  };
  const Tensor packed = nntest::randn64({4, 156}, 5);
  for (const auto backend : {F::AttentionBackend::Fused, F::AttentionBackend::Materialize}) {
    nntest::AttentionBackendGuard guard(backend);
    check_split_invariant(packed, grouped, 1e-12);
  }
}

TEST_CASE("keyed dropout: a Transformer layer's output and input gradient do not depend on the split") {
  manual_seed(3);
  nn::TransformerEncoderLayer layer(nn::TransformerLayerOptions(8, 2).dim_feedforward(16).dropout(0.2));
  layer.to(kFloat64);
  layer.train();
  const Tensor x = nntest::randn64({4, 5, 8}, 6);
  // The output and dL/dx of L = Σ out ⊙ W, W fixed: both row by row, so the parts must agree.
  const Tensor weights = nntest::randn64({4, 5, 8}, 7);
  auto out_and_grad = [&](const Tensor& rows_x, const std::vector<int64_t>& rows) {
    Tensor leaf = rows_x.detach().requires_grad_();
    Tensor out = layer.forward(leaf);
    (out * rows_of(weights, rows)).sum().backward();
    return cat({out.detach().reshape({static_cast<int64_t>(rows.size()), -1}), leaf.grad().reshape({static_cast<int64_t>(rows.size()), -1})}, 1);
  };
  Tensor whole;
  {
    KeyedDropout scope(kSeed, kStep, share(4, 1, 0));
    whole = out_and_grad(x, share(4, 1, 0));
  }
  for (const int64_t world : {2, 4})
    for (int64_t rank = 0; rank < world; ++rank) {
      const std::vector<int64_t> rows = share(4, world, rank);
      KeyedDropout scope(kSeed, kStep, rows);
      // GEMMs over fewer rows: float64 rounding of order-1 values, far under 1e-12.
      CHECK(max_abs_diff(out_and_grad(rows_of(x, rows), rows), rows_of(whole, rows)) <= 1e-12);
    }
}

TEST_CASE("keyed dropout: gradcheck, activation checkpointing replays the masks, and outside a scope nothing changes") {
  // gradcheck evaluates the function many times: a scope in it gives every evaluation the same masks.
  const Tensor x = nntest::randn64({4, 3}, 8, true);
  CHECK(gradcheck([](const std::vector<Tensor>& in) {
                    KeyedDropout scope(kSeed, kStep, {7, 1});
                    return F::relu_dropout(F::dropout(in[0], 0.3, true), 0.3, true);
                  },
                  {x}));
  CHECK(gradgradcheck([](const std::vector<Tensor>& in) {
                        KeyedDropout scope(kSeed, kStep, {7, 1});
                        return F::dropout(in[0] * in[0], 0.3, true);
                      },
                      {x}));
  // A checkpointed block recomputes its forward in the backward: the same masks, the same gradient.
  auto grad_of = [&](bool checkpointed) {
    Tensor leaf = x.detach().requires_grad_();
    KeyedDropout scope(kSeed, kStep, {0, 1, 2, 3});
    auto block = [](const std::vector<Tensor>& in) { return F::dropout(in[0].tanh(), 0.5, true); };
    Tensor y = checkpointed ? autograd::checkpoint(block, {leaf}) : block({leaf});
    (F::dropout(y, 0.5, true) * y).sum().backward();  // a call after the block: the count must go on
    return leaf.grad();
  };
  CHECK(max_abs_diff(grad_of(true), grad_of(false)) == 0.0);
  // Outside a scope, the default generator's one key, as dropout always drew.
  manual_seed(42);
  Tensor plain = F::dropout(full({3, 4}, 1.0, kFloat64), 0.5, true);
  Generator same(42);
  CHECK(max_abs_diff(plain, kernels::dropout_mask({3, 4}, kFloat64, 0.5, same.next_u64())) == 0.0);
  // A generator of one's own keeps its stream inside a scope.
  Generator own(9), copy(9);
  {
    KeyedDropout scope(kSeed, kStep, {0, 1, 2});
    plain = F::dropout(full({3, 4}, 1.0, kFloat64), 0.5, true, own);
  }
  CHECK(max_abs_diff(plain, kernels::dropout_mask({3, 4}, kFloat64, 0.5, copy.next_u64())) == 0.0);
}

TEST_CASE("keyed dropout: refusals name the op and the shape") {
  KeyedDropout scope(kSeed, kStep, {0, 1, 2});
  const std::string message = error_message([] { F::dropout(full({4, 2}, 1.0, kFloat64), 0.5, true); });
  CHECK(contains(message, "dropout"));
  CHECK(contains(message, "[4,2]"));
  CHECK(contains(message, "multiple of 3"));
  CHECK(contains(error_message([] { F::dropout(full({3, 2, (1 << 20) + 1}, 1.0, kFloat32), 0.5, true); }),
                 "beyond the per-example fields"));
  CHECK(contains(error_message([] { KeyedDropout twice(kSeed, kStep, {1, 4, 1}); }), "position 1 is given twice"));
  CHECK(contains(error_message([] { KeyedDropout none(kSeed, kStep, {}); }), "no examples"));
  CHECK(contains(error_message([] { KeyedDropout negative(kSeed, -1, {0}); }), "step -1"));
  CHECK(contains(error_message([] { kernels::example_dropout_mask("op", {5}, kFloat64, 0.5, {1, 2}); }),
                 "op: keyed by 2 examples, a tensor [5] must be batch first"));
}
