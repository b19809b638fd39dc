// MultiheadAttention: a 2-token, 2-head case worked out by hand, each mask kind on that case,
// the shapes of the returned weights, errors, and gradchecks (self- and cross-attention, with
// masks, and with kdim/vdim different from embed_dim).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using namespace nntest;  // the helpers of nn_helpers.h

namespace {

const double e = std::exp(1.0);
const double e4 = std::exp(4.0);

// embed_dim 2, 2 heads: head_dim 1, scale 1. W_Q = W_K = I, W_V swaps the two features,
// biases zero; out_proj W = [[1, 1], [0, 2]], b = [0.5, -1].
// Input: one batch of two tokens, x0 = [1, 0] and x1 = [0, 2].
//   head 0 reads feature 0: q = k = [1, 0] (per token), v = [0, 2]
//   head 1 reads feature 1: q = k = [0, 2],             v = [1, 0]
std::shared_ptr<MultiheadAttention> hand_mha() {
  auto mha = std::make_shared<MultiheadAttention>(2, 2);
  mha->to(kFloat64);
  set_values(mha->in_proj_weight, {1, 0, 0, 1,  /* W_Q */ 1, 0, 0, 1, /* W_K */ 0, 1, 1, 0 /* W_V */});
  set_values(mha->in_proj_bias, {0, 0, 0, 0, 0, 0});
  set_values(mha->out_proj->weight, {1, 1, 0, 2});
  set_values(mha->out_proj->bias, {0.5, -1});
  return mha;
}
Tensor hand_x() { return tensor({{{1, 0}, {0, 2}}}, kFloat64); }  // (1, 2, 2)

// out_proj applied to the concatenated head outputs [h0, h1].
std::vector<double> project(double h0, double h1) { return {h0 + h1 + 0.5, 2 * h1 - 1}; }

std::vector<double> join(std::vector<double> a, const std::vector<double>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("MultiheadAttention 2 tokens 2 heads by hand") {
  auto mha = hand_mha();
  Tensor x = hand_x();
  auto out = mha->forward(x, x, x);
  // head 0: token 0 scores [1, 0] -> weights [e, 1]/(e+1), output 2/(e+1);
  //         token 1 scores [0, 0] -> [1/2, 1/2], output 1.
  // head 1: token 0 scores [0, 0] -> [1/2, 1/2], output 1/2;
  //         token 1 scores [0, 4] -> [1, e⁴]/(1+e⁴), output 1/(1+e⁴).
  CHECK(out.output.shape() == Shape{1, 2, 2});
  check_values(out.output, join(project(2 / (e + 1), 0.5), project(1, 1 / (1 + e4))));
  // The weights, averaged over the heads by default: (B, T, S).
  CHECK(out.weights.shape() == Shape{1, 2, 2});
  check_values(out.weights, {(e / (e + 1) + 0.5) / 2, (1 / (e + 1) + 0.5) / 2,  //
                             (0.5 + 1 / (1 + e4)) / 2, (0.5 + e4 / (1 + e4)) / 2});
  // Per head: (B, H, T, S).
  auto per_head = mha->forward(x, x, x, {.average_attn_weights = false});
  CHECK(per_head.weights.shape() == Shape{1, 2, 2, 2});
  check_values(per_head.weights, {e / (e + 1), 1 / (e + 1), 0.5, 0.5, 0.5, 0.5, 1 / (1 + e4), e4 / (1 + e4)});
  // No weights when not asked for.
  CHECK_FALSE(mha->forward(x, x, x, {.need_weights = false}).weights.defined());
  // Unbatched (T, E) input: (T, E) output and (T, S) weights.
  auto unbatched = mha->forward(x.squeeze(0), x.squeeze(0), x.squeeze(0));
  CHECK(unbatched.output.shape() == Shape{2, 2});
  CHECK(unbatched.weights.shape() == Shape{2, 2});
  CHECK(max_abs_diff(unbatched.output, out.output.squeeze(0)) == 0.0);
}

TEST_CASE("MultiheadAttention store_attention keeps the last per-head weights") {
  auto mha = hand_mha();
  Tensor x = hand_x();
  CHECK_FALSE(mha->last_attention.defined());
  mha->forward(x, x, x, {.need_weights = false});
  CHECK_FALSE(mha->last_attention.defined());  // off by default
  mha->store_attention = true;
  auto out = mha->forward(x.clone().requires_grad_(), x, x, {.need_weights = false});
  CHECK_FALSE(out.weights.defined());  // need_weights still decides what forward returns
  REQUIRE(mha->last_attention.defined());
  CHECK(mha->last_attention.shape() == Shape{1, 2, 2, 2});
  CHECK_FALSE(mha->last_attention.requires_grad());
  check_values(mha->last_attention, {e / (e + 1), 1 / (e + 1), 0.5, 0.5, 0.5, 0.5, 1 / (1 + e4), e4 / (1 + e4)});
}

TEST_CASE("MultiheadAttention causal masks by hand") {
  auto mha = hand_mha();
  Tensor x = hand_x();
  // Token 0 sees only itself: head outputs v[0] = 0 and 1. Token 1 is unchanged.
  std::vector<double> expected = join(project(0, 1), project(1, 1 / (1 + e4)));
  check_values(mha->forward(x, x, x, {.is_causal = true}).output, expected);
  check_values(mha->forward(x, x, x, {.attn_mask = generate_square_subsequent_mask(2, kFloat64)}).output, expected);
  check_values(mha->forward(x, x, x, {.attn_mask = nntest::bool_mask({{0, 1}, {0, 0}})}).output, expected);
  auto weights = mha->forward(x, x, x, {.average_attn_weights = false, .is_causal = true}).weights;
  check_values(weights, {1, 0, 0.5, 0.5, 1, 0, 1 / (1 + e4), e4 / (1 + e4)});
}

TEST_CASE("MultiheadAttention key_padding_mask by hand") {
  auto mha = hand_mha();
  Tensor x = hand_x();
  // Key 1 ignored: every query sees key 0 only.
  auto out = mha->forward(x, x, x, {.key_padding_mask = nntest::bool_mask({{0, 1}})});
  check_values(out.output, join(project(0, 1), project(0, 1)));
  check_values(out.weights, {1, 0, 1, 0});
  // As a float mask: a large negative value is nearly the same, -inf exactly the same.
  const double inf = std::numeric_limits<double>::infinity();
  check_values(mha->forward(x, x, x, {.key_padding_mask = tensor({{0.0, -inf}}, kFloat64)}).output, values(out.output));
  // Batched: the mask applies to its own batch entry only.
  Tensor xx = cat({x, x}, 0);
  auto two = mha->forward(xx, xx, xx, {.key_padding_mask = nntest::bool_mask({{0, 0}, {0, 1}})});
  check_values(two.output, join(join(project(2 / (e + 1), 0.5), project(1, 1 / (1 + e4))), values(out.output)));
  std::string msg = error_message([&] { mha->forward(xx, xx, xx, {.key_padding_mask = nntest::bool_mask({{0, 1}})}); });
  CHECK(contains(msg, "key_padding_mask"));
  CHECK(contains(msg, "[1,2]"));
}

TEST_CASE("MultiheadAttention 3-D attn_mask is per batch and head") {
  auto mha = hand_mha();
  Tensor x = hand_x();
  // (B·H, T, S) = (2, 2, 2): head 0 hides key 1 from both queries, head 1 hides nothing.
  Tensor mask = tensor({{{0, 1}, {0, 1}}, {{0, 0}, {0, 0}}}, kFloat64).ne(zeros({}, kFloat64));
  auto out = mha->forward(x, x, x, {.attn_mask = mask, .average_attn_weights = false});
  // head 0 outputs v[0] = 0 for both tokens; head 1 as without a mask.
  check_values(out.output, join(project(0, 0.5), project(0, 1 / (1 + e4))));
  check_values(out.weights, {1, 0, 1, 0, 0.5, 0.5, 1 / (1 + e4), e4 / (1 + e4)});
  std::string msg = error_message([&] { mha->forward(x, x, x, {.attn_mask = zeros({3, 2, 2}, kBool)}); });
  CHECK(contains(msg, "attn_mask"));
  CHECK(contains(msg, "[3,2,2]"));
}

TEST_CASE("MultiheadAttention float mask is added to the scores by hand") {
  auto mha = hand_mha();
  Tensor x = hand_x();
  // Token 0's scores get + [0, ln 2]: head 0 weights ∝ [e, 2], output 4/(e+2);
  // head 1 weights [1/3, 2/3], output 1/3. Token 1 unchanged.
  Tensor mask = tensor({{0.0, std::log(2.0)}, {0.0, 0.0}}, kFloat64);
  auto out = mha->forward(x, x, x, {.attn_mask = mask});
  check_values(out.output, join(project(4 / (e + 2), 1.0 / 3), project(1, 1 / (1 + e4))));
  // A float mask together with a key_padding_mask: both apply.
  auto both = mha->forward(x, x, x, {.key_padding_mask = nntest::bool_mask({{0, 1}}), .attn_mask = mask});
  check_values(both.output, join(project(0, 1), project(0, 1)));
}

// What the README promises: a query that may see no key gets zero attention weights and a zero
// pre-projection output, so the layer returns out_proj.bias there (PyTorch returns NaN).
TEST_CASE("MultiheadAttention: a fully masked query gives zero weights and outputs out_proj.bias") {
  auto mha = hand_mha();
  Tensor x = hand_x();
  Tensor attn_mask = nntest::bool_mask({{1, 1}, {0, 0}});  // query 0 may see no key
  auto out = mha->forward(x, x, x, {.attn_mask = attn_mask});
  check_values(out.weights.select(1, 0), {0, 0});
  check_values(out.output.select(1, 0), {0.5, -1});  // out_proj.bias
  auto unmasked = mha->forward(x, x, x);
  CHECK(max_abs_diff(out.output.select(1, 1), unmasked.output.select(1, 1)) == 0.0);  // query 1 is untouched
  // The same through key_padding_mask: every key of the batch padded.
  auto padded = mha->forward(x, x, x, {.key_padding_mask = nntest::bool_mask({{1, 1}})});
  check_values(padded.output, {0.5, -1, 0.5, -1});
  check_values(padded.weights, {0, 0, 0, 0});
}

TEST_CASE("MultiheadAttention checks its options and inputs") {
  std::string msg = error_message([] { MultiheadAttention bad(10, 3); });
  CHECK(contains(msg, "MultiheadAttention"));
  CHECK(contains(msg, "embed_dim 10"));
  CHECK(contains(msg, "not divisible by num_heads 3"));
  CHECK(contains(error_message([] { MultiheadAttention bad(8, 0); }), "num_heads"));
  MultiheadAttention mha(4, 2);
  std::string shapes = error_message([&] { mha.forward(zeros({2, 3, 4}), zeros({2, 5, 3}), zeros({2, 5, 4})); });
  CHECK(contains(shapes, "MultiheadAttention"));
  CHECK(contains(shapes, "[2,5,3]"));
}

TEST_CASE("MultiheadAttention names its parameters as PyTorch") {
  std::vector<std::string> names;
  for (const auto& [name, t] : MultiheadAttention(8, 2).named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  names.clear();
  for (const auto& [name, t] : MultiheadAttention(MultiheadAttentionOptions(8, 2).kdim(3).vdim(5)).named_parameters())
    names.push_back(name);
  CHECK(names == std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                                          "out_proj.weight", "out_proj.bias"});
  CHECK(MultiheadAttention(MultiheadAttentionOptions(8, 2).bias(false)).parameters().size() == 2);
}

TEST_CASE("MultiheadAttention without bias and with unbatched masks") {
  auto mha = hand_mha();
  Tensor x = hand_x().squeeze(0);  // (T, E)
  // An unbatched key_padding_mask is (S).
  auto out = mha->forward(x, x, x, {.key_padding_mask = tensor({0.0, 1.0}, kFloat64).ne(zeros({}, kFloat64))});
  check_values(out.output, join(project(0, 1), project(0, 1)));
  CHECK(out.weights.shape() == Shape{2, 2});
  // bias=false: no in_proj_bias and no out_proj.bias; the projections alone.
  MultiheadAttention plain(MultiheadAttentionOptions(2, 2).bias(false));
  plain.to(kFloat64);
  CHECK_FALSE(plain.in_proj_bias.defined());
  CHECK_FALSE(plain.out_proj->bias.defined());
  set_values(plain.in_proj_weight, values(mha->in_proj_weight));
  set_values(plain.out_proj->weight, values(mha->out_proj->weight));
  auto no_bias = plain.forward(x, x, x);
  check_values(no_bias.output, {2 / (e + 1) + 0.5, 1, 1 + 1 / (1 + e4), 2 / (1 + e4)});  // project() without b
}

TEST_CASE("MultiheadAttention dropout acts only while training") {
  manual_seed(50);
  MultiheadAttention mha(MultiheadAttentionOptions(4, 2).dropout(0.5));
  mha.to(kFloat64);
  Tensor x = randn64({2, 6, 4}, 51);
  mha.eval();
  Tensor a = mha.forward(x, x, x).output;
  Tensor b = mha.forward(x, x, x).output;
  CHECK(max_abs_diff(a, b) == 0.0);
  MultiheadAttention plain(4, 2);
  plain.to(kFloat64);
  plain.load_state_dict(mha.state_dict());
  CHECK(max_abs_diff(plain.forward(x, x, x).output, a) == 0.0);
  mha.train();
  CHECK(max_abs_diff(mha.forward(x, x, x).output, a) > 1e-3);
}

TEST_CASE("gradcheck MultiheadAttention self-attention") {
  manual_seed(52);
  MultiheadAttention mha(4, 2);
  mha.to(kFloat64);
  {
    NoGradGuard no_grad;
    mha.in_proj_bias.copy_(randn64({12}, 53));  // nonzero biases, so their gradients matter
  }
  Tensor x = randn64({2, 3, 4}, 54, true);
  auto self = [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0]).output; };
  CHECK(gradcheck(self, {x, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj->weight}));
  // With a causal mask and a key_padding_mask, and the averaged weights as output.
  Tensor padding = nntest::bool_mask({{0, 0, 1}, {0, 0, 0}});
  CHECK(gradcheck(
      [&](const std::vector<Tensor>& in) {
        auto out = mha.forward(in[0], in[0], in[0], {.key_padding_mask = padding, .is_causal = true});
        return cat({out.output.flatten(), out.weights.flatten()});
      },
      {x, mha.in_proj_weight}));
}

TEST_CASE("gradcheck MultiheadAttention cross-attention with key_padding_mask and attn_mask") {
  manual_seed(55);
  MultiheadAttention mha(4, 2);
  mha.to(kFloat64);
  Tensor q = randn64({2, 3, 4}, 56, true), k = randn64({2, 5, 4}, 57, true), v = randn64({2, 5, 4}, 58, true);
  Tensor padding = nntest::bool_mask({{0, 0, 0, 1, 1}, {0, 1, 0, 0, 0}});
  Tensor float_mask = randn64({3, 5}, 59);
  Tensor bool_mask = nntest::bool_mask({{1, 0, 0, 0, 0}, {0, 1, 0, 0, 1}, {0, 0, 0, 1, 0}});
  Tensor per_head = randn64({4, 3, 5}, 60);  // (B·H, T, S)
  for (const Tensor& mask : {float_mask, bool_mask, per_head}) {
    CHECK(gradcheck(
        [&](const std::vector<Tensor>& in) {
          return mha.forward(in[0], in[1], in[2], {.key_padding_mask = padding, .attn_mask = mask}).output;
        },
        {q, k, v, mha.in_proj_weight, mha.out_proj->bias}));
  }
}

TEST_CASE("gradcheck MultiheadAttention with kdim and vdim different from embed_dim") {
  manual_seed(61);
  MultiheadAttention mha(MultiheadAttentionOptions(4, 2).kdim(3).vdim(5));
  mha.to(kFloat64);
  CHECK_FALSE(mha.in_proj_weight.defined());
  CHECK(mha.k_proj_weight.shape() == Shape{4, 3});
  CHECK(mha.v_proj_weight.shape() == Shape{4, 5});
  Tensor q = randn64({2, 3, 4}, 62, true), k = randn64({2, 2, 3}, 63, true), v = randn64({2, 2, 5}, 64, true);
  Tensor padding = nntest::bool_mask({{0, 1}, {0, 0}});
  CHECK(gradcheck(
      [&](const std::vector<Tensor>& in) {
        return mha.forward(in[0], in[1], in[2], {.key_padding_mask = padding}).output;
      },
      {q, k, v, mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight}));
}

// Batch-first self-attention without padding, grouped heads, positions or returned weights takes
// the paper's path (nn/attention.cpp, "self-attention as the paper draws it"): the numbers and
// gradients of the general path, which returning the weights takes.
TEST_CASE("MultiheadAttention: plain self-attention equals the general path, with gradients") {
  manual_seed(64);
  MultiheadAttention mha(MultiheadAttentionOptions(4, 2).batch_first(true).dropout(0.3));
  mha.to(kFloat64);
  {
    NoGradGuard no_grad;
    mha.in_proj_bias.copy_(randn64({12}, 65));
  }
  const Tensor x0 = randn64({2, 3, 4}, 66);
  const Tensor float_mask = randn64({3, 3}, 67), per_head = nntest::bool_mask({{0, 1, 0}, {0, 0, 1}, {0, 0, 0}});
  for (bool training : {false, true})
    for (int c = 0; c < 4; ++c) {
      CAPTURE(training);
      CAPTURE(c);
      mha.train(training);
      const AttentionArgs args{.attn_mask = c == 1 ? float_mask : c == 2 ? per_head : Tensor(), .is_causal = c == 3};
      auto run = [&](bool weights) {
        Tensor x = x0.detach().requires_grad_();
        mha.zero_grad();
        AttentionArgs a = args;
        a.need_weights = weights;
        manual_seed(68);  // the same dropout mask both ways
        AttentionOutput out = mha.forward(x, x, x, a);
        CHECK(out.weights.defined() == weights);
        (out.output * out.output).sum().backward();
        return std::vector<Tensor>{out.output.detach(), x.grad(), mha.in_proj_weight.grad(), mha.out_proj->bias.grad()};
      };
      std::vector<Tensor> plain = run(false), general = run(true);
      for (size_t i = 0; i < plain.size(); ++i) CHECK(max_abs_diff(plain[i], general[i]) < 1e-12);
    }
  mha.eval();
  Tensor x = randn64({2, 3, 4}, 69, true);
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0], {.need_weights = false, .is_causal = true}).output; },
                  {x, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj->weight}));
  CHECK(gradcheck(
      [&](const std::vector<Tensor>& in) {
        return mha.forward(in[0], in[0], in[0], {.need_weights = false, .attn_mask = float_mask}).output;
      },
      {x, mha.in_proj_weight}));
}
