// The Transformer: PyTorch's parameter names, the causal mask, the sinusoidal positions, the
// layers' structure (post-norm and norm_first) rebuilt from their parts, causality, and
// gradchecks of the encoder and decoder layers and of the whole model.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using namespace nntest;  // the helpers of nn_helpers.h

namespace {

// Small float64 layers with dropout 0.
TransformerLayerOptions small_layer(Activation act, bool norm_first) {
  return TransformerLayerOptions(4, 2).dim_feedforward(6).dropout(0.0).activation(act).norm_first(norm_first);
}

template <class M>
std::shared_ptr<M> float64(std::shared_ptr<M> m) {
  m->to(kFloat64);
  return m;
}

Tensor self_attend(MultiheadAttention& attn, const Tensor& x) { return attn.forward(x, x, x).output; }

}  // namespace

TEST_CASE("Transformer parameter names are exactly PyTorch's") {
  Transformer model(TransformerOptions(8, 2).num_encoder_layers(1).num_decoder_layers(1).dim_feedforward(16));
  std::vector<std::string> names;
  for (const auto& [name, t] : model.named_parameters()) names.push_back(name);
  const std::vector<std::string> expected{
      "encoder.layers.0.self_attn.in_proj_weight",
      "encoder.layers.0.self_attn.in_proj_bias",
      "encoder.layers.0.self_attn.out_proj.weight",
      "encoder.layers.0.self_attn.out_proj.bias",
      "encoder.layers.0.linear1.weight",
      "encoder.layers.0.linear1.bias",
      "encoder.layers.0.linear2.weight",
      "encoder.layers.0.linear2.bias",
      "encoder.layers.0.norm1.weight",
      "encoder.layers.0.norm1.bias",
      "encoder.layers.0.norm2.weight",
      "encoder.layers.0.norm2.bias",
      "encoder.norm.weight",
      "encoder.norm.bias",
      "decoder.layers.0.self_attn.in_proj_weight",
      "decoder.layers.0.self_attn.in_proj_bias",
      "decoder.layers.0.self_attn.out_proj.weight",
      "decoder.layers.0.self_attn.out_proj.bias",
      "decoder.layers.0.multihead_attn.in_proj_weight",
      "decoder.layers.0.multihead_attn.in_proj_bias",
      "decoder.layers.0.multihead_attn.out_proj.weight",
      "decoder.layers.0.multihead_attn.out_proj.bias",
      "decoder.layers.0.linear1.weight",
      "decoder.layers.0.linear1.bias",
      "decoder.layers.0.linear2.weight",
      "decoder.layers.0.linear2.bias",
      "decoder.layers.0.norm1.weight",
      "decoder.layers.0.norm1.bias",
      "decoder.layers.0.norm2.weight",
      "decoder.layers.0.norm2.bias",
      "decoder.layers.0.norm3.weight",
      "decoder.layers.0.norm3.bias",
      "decoder.norm.weight",
      "decoder.norm.bias",
  };
  CHECK(names == expected);
  // The state_dict has the same keys (there are no persistent buffers).
  CHECK(model.state_dict().size() == expected.size());
  // attention 24·8 + 24 + 8·8 + 8 = 288, linear1 16·8 + 16 = 144, linear2 8·16 + 8 = 136, a norm 16:
  // the encoder layer has one attention and two norms, the decoder layer two and three.
  CHECK(model.parameter_count() == (288 + 144 + 136 + 2 * 16) + (2 * 288 + 144 + 136 + 3 * 16) + 2 * 16);
}

TEST_CASE("Transformer initialises matrices with xavier and keeps biases as PyTorch") {
  manual_seed(90);
  Transformer model(TransformerOptions(16, 2).num_encoder_layers(1).num_decoder_layers(1).dim_feedforward(32));
  auto& layer = *(*model.encoder->layers)[0];
  const double in_proj_bound = std::sqrt(6.0 / (16 + 48));
  for (double w : values(layer.self_attn->in_proj_weight)) CHECK(std::abs(w) <= in_proj_bound);
  const double linear1_bound = std::sqrt(6.0 / (16 + 32));  // xavier, not Linear's 1/√16
  double largest = 0.0;
  for (double w : values(layer.linear1->weight)) {
    REQUIRE(std::isfinite(w));  // std::max would drop a NaN
    largest = std::max(largest, std::abs(w));
  }
  CHECK(largest <= linear1_bound);
  CHECK(largest > 0.25);  // beyond Linear's own bound of 0.25: xavier was applied
  CHECK(values(layer.self_attn->in_proj_bias) == std::vector<double>(48, 0.0));
  for (double b : values(layer.linear1->bias)) CHECK(std::abs(b) <= 0.25);  // Linear's bias init stays
  CHECK(values(model.decoder->norm->weight) == std::vector<double>(16, 1.0));
}

TEST_CASE("generate_square_subsequent_mask has minus infinity above the diagonal") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor m = generate_square_subsequent_mask(3);
  CHECK(m.dtype() == kFloat32);
  CHECK(values(m) == std::vector<double>{0, -inf, -inf, 0, 0, -inf, 0, 0, 0});
  Tensor m64 = generate_square_subsequent_mask(2, kFloat64);
  CHECK(m64.dtype() == kFloat64);
  CHECK(values(m64) == std::vector<double>{0, -inf, 0, 0});
  CHECK(values(generate_square_subsequent_mask(1)) == std::vector<double>{0});
  // -inf has no int64 or bool value: such a mask is refused (it held INT64_MIN).
  CHECK(contains(error_message([] { generate_square_subsequent_mask(2, kInt64); }),
                 "generate_square_subsequent_mask: dtype int64 is not floating"));
  CHECK(contains(error_message([] { additive_mask(tensor({0, 1}, kBool), kInt64); }),
                 "additive_mask: dtype int64 is not floating"));
  CHECK(contains(error_message([] { additive_mask(zeros({2}), kBool); }), "additive_mask: dtype bool is not floating"));
}

TEST_CASE("PositionalEncoding follows the sinusoid formula") {
  const int64_t d = 6;
  PositionalEncoding pos(d, 0.0, 50);
  CHECK(pos.pe.shape() == Shape{50, d});
  auto formula = [&](int64_t p, int64_t j) {
    double angle = static_cast<double>(p) / std::pow(10000.0, static_cast<double>(j - j % 2) / d);
    return j % 2 == 0 ? std::sin(angle) : std::cos(angle);
  };
  CHECK(values(pos.pe.select(0, 0)) == std::vector<double>{0, 1, 0, 1, 0, 1});
  for (int64_t p : {1, 2, 7, 49})
    for (int64_t j = 0; j < d; ++j) CHECK(pos.pe.at<float>({p, j}) == doctest::Approx(formula(p, j)).epsilon(1e-6));
  // pos 1, dim 2: sin(1 / 10000^(2/6))
  CHECK(pos.pe.at<float>({1, 2}) == doctest::Approx(std::sin(1.0 / std::cbrt(10000.0))).epsilon(1e-6));
  // forward adds the first T rows; in float64 too.
  Tensor x = randn64({2, 3, d}, 91);
  Tensor y = pos.forward(x);
  CHECK(y.dtype() == kFloat64);
  CHECK(max_abs_diff(y - x, pos.pe.narrow(0, 0, 3).to(kFloat64).unsqueeze(0).expand({2, 3, d})) < 1e-15);
  // The table is a non-persistent buffer: not in the state_dict.
  CHECK(pos.state_dict().empty());
  CHECK(pos.named_buffers().size() == 1);
  // An odd d_model has a last sine column only.
  PositionalEncoding odd(5, 0.0, 4);
  CHECK(odd.pe.at<float>({3, 4}) == doctest::Approx(std::sin(3.0 / std::pow(10000.0, 4.0 / 5))).epsilon(1e-6));
  CHECK(contains(error_message([&] { pos.forward(zeros({1, 51, d})); }), "PositionalEncoding"));
}

TEST_CASE("TransformerEncoderLayer is post-norm or pre-norm as asked") {
  Tensor x = randn64({2, 3, 4}, 92);
  manual_seed(93);
  auto post = float64(std::make_shared<TransformerEncoderLayer>(small_layer(Activation::ReLU, false)));
  Tensor h = post->norm1->forward(x + self_attend(*post->self_attn, x));
  Tensor expected = post->norm2->forward(h + post->linear2->forward(post->linear1->forward(h).relu()));
  CHECK(max_abs_diff(post->forward(x), expected) < 1e-14);

  auto pre = float64(std::make_shared<TransformerEncoderLayer>(small_layer(Activation::GELU, true)));
  Tensor n1 = pre->norm1->forward(x);
  Tensor g = x + self_attend(*pre->self_attn, n1);
  Tensor expected_pre = g + pre->linear2->forward(pre->linear1->forward(pre->norm2->forward(g)).gelu());
  CHECK(max_abs_diff(pre->forward(x), expected_pre) < 1e-14);

  // Activation::GELUTanh: the feed-forward block runs GELU's tanh approximation.
  auto tanh_layer = float64(std::make_shared<TransformerEncoderLayer>(small_layer(Activation::GELUTanh, false)));
  Tensor t1 = tanh_layer->norm1->forward(x + self_attend(*tanh_layer->self_attn, x));
  Tensor expected_tanh =
      tanh_layer->norm2->forward(t1 + tanh_layer->linear2->forward(tanh_layer->linear1->forward(t1).gelu("tanh")));
  CHECK(max_abs_diff(tanh_layer->forward(x), expected_tanh) < 1e-14);
  Tensor expected_exact =
      tanh_layer->norm2->forward(t1 + tanh_layer->linear2->forward(tanh_layer->linear1->forward(t1).gelu()));
  CHECK(max_abs_diff(tanh_layer->forward(x), expected_exact) > 1e-8);  // not the exact GELU
}

TEST_CASE("TransformerDecoderLayer is post-norm or pre-norm as asked") {
  Tensor x = randn64({2, 2, 4}, 94), memory = randn64({2, 3, 4}, 95);
  manual_seed(96);
  auto post = float64(std::make_shared<TransformerDecoderLayer>(small_layer(Activation::GELU, false)));
  Tensor a = post->norm1->forward(x + self_attend(*post->self_attn, x));
  Tensor b = post->norm2->forward(a + post->multihead_attn->forward(a, memory, memory).output);
  Tensor expected = post->norm3->forward(b + post->linear2->forward(post->linear1->forward(b).gelu()));
  CHECK(max_abs_diff(post->forward(x, memory), expected) < 1e-14);

  auto pre = float64(std::make_shared<TransformerDecoderLayer>(small_layer(Activation::ReLU, true)));
  Tensor p = x + self_attend(*pre->self_attn, pre->norm1->forward(x));
  Tensor n2 = pre->norm2->forward(p);
  Tensor q = p + pre->multihead_attn->forward(n2, memory, memory).output;
  Tensor expected_pre = q + pre->linear2->forward(pre->linear1->forward(pre->norm3->forward(q)).relu());
  CHECK(max_abs_diff(pre->forward(x, memory), expected_pre) < 1e-14);
}

TEST_CASE("Transformer decoder with a causal mask ignores later target positions") {
  manual_seed(97);
  auto model = float64(std::make_shared<Transformer>(
      TransformerOptions(8, 2).num_encoder_layers(1).num_decoder_layers(2).dim_feedforward(16).dropout(0.0)));
  Tensor src = randn64({2, 5, 8}, 98), tgt = randn64({2, 4, 8}, 99);
  Tensor mask = generate_square_subsequent_mask(4, kFloat64);
  Tensor out = model->forward(src, tgt, {}, mask);
  // tgt_is_causal gives the same.
  Tensor causal = model->forward(src, tgt, {}, {}, {}, {}, {}, {}, false, /*tgt_is_causal=*/true);
  CHECK(max_abs_diff(out, causal) == 0.0);
  // Changing the last target token changes only the last output position.
  Tensor changed_tgt = tgt.clone();
  {
    NoGradGuard no_grad;
    changed_tgt.select(1, 3).fill_(5.0);
  }
  Tensor changed = model->forward(src, changed_tgt, {}, mask);
  CHECK(max_abs_diff(changed.narrow(1, 0, 3), out.narrow(1, 0, 3)) < 1e-14);
  CHECK(max_abs_diff(changed.select(1, 3), out.select(1, 3)) > 1e-3);
  // Without the mask, it changes every position.
  Tensor free = model->forward(src, tgt), free_changed = model->forward(src, changed_tgt);
  CHECK(max_abs_diff(free.select(1, 0), free_changed.select(1, 0)) > 1e-6);
  // A padded source key is ignored: changing it changes nothing.
  Tensor padding = nntest::bool_mask({{0, 0, 0, 0, 1}, {0, 0, 0, 0, 0}});
  Tensor changed_src = src.clone();
  {
    NoGradGuard no_grad;
    changed_src.select(0, 0).select(0, 4).fill_(-3.0);
  }
  Tensor base = model->forward(src, tgt, {}, {}, {}, padding, {}, padding);
  Tensor moved = model->forward(changed_src, tgt, {}, {}, {}, padding, {}, padding);
  CHECK(max_abs_diff(base, moved) < 1e-14);
  std::string msg = error_message([&] { model->forward(src, randn64({3, 4, 8}, 1)); });
  CHECK(contains(msg, "Transformer"));
  CHECK(contains(msg, "[3,4,8]"));
}

TEST_CASE("Transformer accepts unbatched inputs of different lengths") {
  manual_seed(108);
  Transformer model(TransformerOptions(8, 2).num_encoder_layers(1).num_decoder_layers(1).dim_feedforward(16).dropout(0.0));
  model.to(kFloat64);
  Tensor src = randn64({5, 8}, 109), tgt = randn64({3, 8}, 110);
  Tensor batched = model.forward(src.unsqueeze(0), tgt.unsqueeze(0));
  Tensor unbatched = model.forward(src, tgt);
  CHECK(unbatched.shape() == Shape{3, 8});
  CHECK(max_abs_diff(unbatched, batched.squeeze(0)) < 1e-14);
}

TEST_CASE("gradcheck TransformerEncoderLayer post-norm and norm_first with relu, gelu and gelu tanh") {
  Tensor x = randn64({2, 3, 4}, 100, true);
  Tensor padding = nntest::bool_mask({{0, 0, 1}, {0, 0, 0}});
  for (bool norm_first : {false, true}) {
    for (Activation act : {Activation::ReLU, Activation::GELU, Activation::GELUTanh}) {
      manual_seed(101);
      auto layer = float64(std::make_shared<TransformerEncoderLayer>(small_layer(act, norm_first)));
      CAPTURE(norm_first);
      CHECK(gradcheck([&](const std::vector<Tensor>& in) { return layer->forward(in[0]); },
                      {x, layer->self_attn->in_proj_weight, layer->linear1->weight, layer->norm2->bias}));
      CHECK(gradcheck([&](const std::vector<Tensor>& in) { return layer->forward(in[0], {}, padding, true); }, {x}));
    }
  }
}

TEST_CASE("gradcheck TransformerDecoderLayer post-norm and norm_first with relu, gelu and gelu tanh") {
  Tensor x = randn64({2, 3, 4}, 102, true), memory = randn64({2, 2, 4}, 103, true);
  Tensor memory_padding = nntest::bool_mask({{0, 1}, {0, 0}});
  Tensor tgt_mask = generate_square_subsequent_mask(3, kFloat64);
  for (bool norm_first : {false, true}) {
    for (Activation act : {Activation::ReLU, Activation::GELU, Activation::GELUTanh}) {
      manual_seed(104);
      auto layer = float64(std::make_shared<TransformerDecoderLayer>(small_layer(act, norm_first)));
      CAPTURE(norm_first);
      CHECK(gradcheck([&](const std::vector<Tensor>& in) { return layer->forward(in[0], in[1]); },
                      {x, memory, layer->multihead_attn->in_proj_weight, layer->norm1->weight}));
      CHECK(gradcheck(
          [&](const std::vector<Tensor>& in) {
            return layer->forward(in[0], in[1], tgt_mask, {}, {}, memory_padding);
          },
          {x, memory}));
    }
  }
}

TEST_CASE("gradcheck the whole Transformer") {
  manual_seed(105);
  auto model = float64(std::make_shared<Transformer>(
      TransformerOptions(4, 2).num_encoder_layers(2).num_decoder_layers(1).dim_feedforward(6).dropout(0.0)));
  Tensor src = randn64({2, 3, 4}, 106, true), tgt = randn64({2, 2, 4}, 107, true);
  const auto& enc0 = *(*model->encoder->layers)[0];
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return model->forward(in[0], in[1]); },
                  {src, tgt, enc0.self_attn->in_proj_weight, model->decoder->norm->bias}));
  // With masks, in fast mode (random projections).
  Tensor padding = nntest::bool_mask({{0, 0, 1}, {0, 0, 0}});
  for (uint64_t seed : {1, 2, 3})
    CHECK(gradcheck(
        [&](const std::vector<Tensor>& in) {
          return model->forward(in[0], in[1], {}, {}, {}, padding, {}, padding, false, true);
        },
        {src, tgt, enc0.linear2->weight}, nntest::fast(seed)));
}
