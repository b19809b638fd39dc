// batch_first(false): MultiheadAttention and the Transformer modules take and give sequence-first
// tensors, (T, B, E), PyTorch's default layout. Each is checked against the batch-first path
// with the same weights: the outputs agree once transposed, and so do all the gradients.
#include <doctest/doctest.h>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using namespace nntest;  // the helpers of nn_helpers.h

namespace {

// The same computation with the operands in another memory order: BLAS may sum in another
// order, so the results agree to float64 rounding (a few ulps of values of order 1), not bit for bit.
constexpr double kTol = 1e-12;

// Every parameter's gradient of `a` equals the one of the same name in `b`.
void check_same_gradients(const Module& a, const Module& b) {
  NamedTensors pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].first);
    REQUIRE(pa[i].first == pb[i].first);
    REQUIRE(pa[i].second.grad().defined());
    CHECK(max_abs_diff(pa[i].second.grad(), pb[i].second.grad()) < kTol);
  }
}

}  // namespace

TEST_CASE("MultiheadAttention batch_first(false) matches the batch-first layer on (T, B, E) inputs") {
  manual_seed(31);
  MultiheadAttention batch_major(MultiheadAttentionOptions(6, 2));
  MultiheadAttention seq_major(MultiheadAttentionOptions(6, 2).batch_first(false));
  batch_major.to(kFloat64);
  seq_major.to(kFloat64);
  seq_major.load_state_dict(batch_major.state_dict());

  Tensor query = randn64({2, 3, 6}, 32, true), memory = randn64({2, 4, 6}, 33, true);  // (B, T, E), (B, S, E)
  Tensor padding = nntest::bool_mask({{0, 0, 0, 1}, {0, 1, 0, 0}});                   // (B, S)
  Tensor causal = generate_square_subsequent_mask(4, kFloat64).narrow(0, 0, 3);       // (T, S)

  AttentionOutput a = batch_major.forward(query, memory, memory, {.key_padding_mask = padding, .attn_mask = causal});
  Tensor query_t = query.detach().transpose(0, 1).contiguous().requires_grad_();  // (T, B, E)
  Tensor memory_t = memory.detach().transpose(0, 1).contiguous().requires_grad_();
  AttentionOutput b =
      seq_major.forward(query_t, memory_t, memory_t, {.key_padding_mask = padding, .attn_mask = causal});
  CHECK(b.output.shape() == Shape{3, 2, 6});
  CHECK(max_abs_diff(b.output.transpose(0, 1), a.output) < kTol);
  CHECK(b.weights.shape() == Shape{2, 3, 4});  // (B, T, S) in both layouts, as PyTorch
  CHECK(max_abs_diff(b.weights, a.weights) < kTol);

  Tensor g = randn64({2, 3, 6}, 34);
  a.output.backward(g);
  b.output.backward(g.transpose(0, 1).contiguous());
  check_same_gradients(batch_major, seq_major);
  CHECK(max_abs_diff(query_t.grad().transpose(0, 1), query.grad()) < kTol);
  CHECK(max_abs_diff(memory_t.grad().transpose(0, 1), memory.grad()) < kTol);

  SUBCASE("unbatched (T, E) inputs are the same in both layouts") {
    Tensor x = randn64({3, 6}, 35);
    CHECK(max_abs_diff(seq_major.forward(x, x, x).output, batch_major.forward(x, x, x).output) < kTol);
  }
}

TEST_CASE("Transformer, encoder and decoder layers with batch_first(false) match the batch-first ones") {
  auto options = [](bool batch_first) {
    return TransformerOptions(4, 2)
        .num_encoder_layers(2)
        .num_decoder_layers(2)
        .dim_feedforward(8)
        .dropout(0.0)
        .batch_first(batch_first);
  };
  manual_seed(41);
  Transformer batch_major(options(true));
  Transformer seq_major(options(false));
  batch_major.to(kFloat64);
  seq_major.to(kFloat64);
  seq_major.load_state_dict(batch_major.state_dict());
  CHECK_FALSE((*seq_major.encoder->layers)[0]->options.batch_first());

  Tensor src = randn64({2, 5, 4}, 42, true), tgt = randn64({2, 3, 4}, 43, true);  // (B, S, E), (B, T, E)
  Tensor src_padding = nntest::bool_mask({{0, 0, 0, 0, 1}, {0, 0, 1, 1, 1}});
  Tensor tgt_padding = nntest::bool_mask({{0, 0, 0}, {0, 0, 1}});
  Tensor tgt_mask = generate_square_subsequent_mask(3, kFloat64);

  Tensor a = batch_major.forward(src, tgt, {}, tgt_mask, {}, src_padding, tgt_padding, src_padding);
  Tensor src_t = src.detach().transpose(0, 1).contiguous().requires_grad_();  // (S, B, E)
  Tensor tgt_t = tgt.detach().transpose(0, 1).contiguous().requires_grad_();  // (T, B, E)
  Tensor b = seq_major.forward(src_t, tgt_t, {}, tgt_mask, {}, src_padding, tgt_padding, src_padding);
  CHECK(b.shape() == Shape{3, 2, 4});
  CHECK(max_abs_diff(b.transpose(0, 1), a) < kTol);

  Tensor g = randn64({2, 3, 4}, 44);
  a.backward(g);
  b.backward(g.transpose(0, 1).contiguous());
  check_same_gradients(batch_major, seq_major);
  CHECK(max_abs_diff(src_t.grad().transpose(0, 1), src.grad()) < kTol);
  CHECK(max_abs_diff(tgt_t.grad().transpose(0, 1), tgt.grad()) < kTol);

  SUBCASE("a sequence-first (S, B, E) pair whose batch sizes differ is an error naming the layout") {
    Tensor bad_tgt = randn64({3, 1, 4}, 45);
    CHECK(nntest::contains(nntest::error_message([&] { seq_major.forward(src_t, bad_tgt); }), "(S, B, d_model)"));
  }
}

TEST_CASE("a sequence-first encoder layer with norm_first matches the batch-first one") {
  manual_seed(51);
  auto options = TransformerLayerOptions(4, 2).dim_feedforward(6).dropout(0.0).norm_first(true);
  TransformerEncoderLayer batch_major(options);
  TransformerEncoderLayer seq_major(TransformerLayerOptions(options).batch_first(false));
  batch_major.to(kFloat64);
  seq_major.to(kFloat64);
  seq_major.load_state_dict(batch_major.state_dict());
  Tensor x = randn64({3, 4, 4}, 52);
  Tensor y = batch_major.forward(x, {}, {}, /*is_causal=*/true);
  Tensor y_t = seq_major.forward(x.transpose(0, 1), {}, {}, true);
  CHECK(max_abs_diff(y_t.transpose(0, 1), y) < kTol);
}

TEST_CASE("PositionalEncoding with batch_first false adds the positions along dim 0 of (T, B, E)") {
  PositionalEncoding batch_major(6, 0.0, 20), seq_major(6, 0.0, 20, /*batch_first=*/false);
  Tensor x = randn64({2, 5, 6}, 41);              // (B, T, E)
  Tensor x_seq = x.transpose(0, 1).contiguous();  // (T, B, E)
  // The same sums of the same numbers: equal to the last bit, from position 0 and from 3.
  CHECK(max_abs_diff(seq_major.forward(x_seq).transpose(0, 1), batch_major.forward(x)) == 0.0);
  CHECK(max_abs_diff(seq_major.forward(x_seq, 3).transpose(0, 1), batch_major.forward(x, 3)) == 0.0);
  // T = 5 rows of positions, not B = 2: a (T, B, E) input is not read as batch first.
  CHECK(max_abs_diff(seq_major.forward(x_seq).select(1, 0) - x_seq.select(1, 0), seq_major.pe.narrow(0, 0, 5).to(kFloat64)) < 1e-15);
  std::string msg = error_message([&] { seq_major.forward(zeros({21, 2, 6})); });
  CHECK(contains(msg, "(T, B, 6) (batch_first false)"));
  CHECK(contains(msg, "[21,2,6]"));
}
