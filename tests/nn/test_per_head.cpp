// PerHeadAttention (one small Linear per head, as the paper draws it) loaded from a fused
// MultiheadAttention gives the same outputs, weights and gradients, in float64, to ~1e-12.
#include <doctest/doctest.h>

#include <algorithm>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using namespace nntest;  // the helpers of nn_helpers.h

namespace {

constexpr double kTol = 1e-12;

struct Pair {
  std::shared_ptr<MultiheadAttention> fused;
  std::shared_ptr<PerHeadAttention> split;
};

// A fused layer with nonzero biases, and a per-head layer loaded from it; both float64.
Pair make_pair(int64_t embed_dim, int64_t heads, uint64_t seed) {
  manual_seed(seed);
  Pair p{std::make_shared<MultiheadAttention>(embed_dim, heads), std::make_shared<PerHeadAttention>(embed_dim, heads)};
  p.fused->to(kFloat64);
  p.split->to(kFloat64);
  {
    NoGradGuard no_grad;
    p.fused->in_proj_bias.copy_(randn64({3 * embed_dim}, seed + 1));
    p.fused->out_proj->bias.copy_(randn64({embed_dim}, seed + 2));
  }
  p.split->load_from(*p.fused);
  return p;
}

struct Inputs {
  Tensor q, k, v;
};
Inputs fresh(const Inputs& in) {
  return {in.q.detach().clone().requires_grad_(), in.k.detach().clone().requires_grad_(),
          in.v.detach().clone().requires_grad_()};
}

// Runs both layers on copies of the inputs, backpropagates sum(output * G) and compares every
// output and gradient. Returns the largest difference seen.
double compare(Pair& p, const Inputs& in, const Tensor& padding, const Tensor& mask, bool causal) {
  p.fused->zero_grad();
  p.split->zero_grad();
  Inputs a = fresh(in), b = fresh(in);
  auto fused = p.fused->forward(
      a.q, a.k, a.v,
      {.key_padding_mask = padding, .attn_mask = mask, .average_attn_weights = false, .is_causal = causal});
  auto split = p.split->forward(
      b.q, b.k, b.v,
      {.key_padding_mask = padding, .attn_mask = mask, .average_attn_weights = false, .is_causal = causal});
  Tensor G = randn64(fused.output.shape(), 99);
  (fused.output * G).sum().backward();
  (split.output * G).sum().backward();
  std::vector<std::pair<Tensor, Tensor>> pairs{
      {fused.output, split.output},
      {fused.weights, split.weights},
      {a.q.grad(), b.q.grad()},
      {a.k.grad(), b.k.grad()},
      {a.v.grad(), b.v.grad()},
      {p.fused->in_proj_weight.grad(), p.split->stacked_in_proj_weight(true)},
      {p.fused->in_proj_bias.grad(), p.split->stacked_in_proj_bias(true)},
      {p.fused->out_proj->weight.grad(), p.split->out_proj->weight.grad()},
      {p.fused->out_proj->bias.grad(), p.split->out_proj->bias.grad()},
  };
  double worst = 0.0;
  for (auto& [x, y] : pairs) {
    REQUIRE(x.defined());
    REQUIRE(y.defined());
    worst = std::max(worst, max_abs_diff(x, y));
  }
  return worst;
}

}  // namespace

TEST_CASE("PerHeadAttention load_from copies each head's rows of the fused weights") {
  Pair p = make_pair(6, 3, 70);
  // Re-stacking gives back the fused layout exactly.
  CHECK(max_abs_diff(p.split->stacked_in_proj_weight(), p.fused->in_proj_weight) == 0.0);
  CHECK(max_abs_diff(p.split->stacked_in_proj_bias(), p.fused->in_proj_bias) == 0.0);
  CHECK(max_abs_diff(p.split->out_proj->weight, p.fused->out_proj->weight) == 0.0);
  // Head 1 of K is rows [E + 2, E + 4) of in_proj_weight.
  CHECK(max_abs_diff((*p.split->k_heads)[1]->weight, p.fused->in_proj_weight.narrow(0, 6 + 2, 2)) == 0.0);
  CHECK((*p.split->q_heads)[0]->weight.shape() == Shape{2, 6});
  std::vector<std::string> names;
  for (const auto& [name, t] : p.split->named_parameters()) names.push_back(name);
  CHECK(names.size() == 3 * 3 * 2 + 2);
  CHECK(names.front() == "q_heads.0.weight");
  CHECK(names.back() == "out_proj.bias");
  // Loading from a layer of another size is an error.
  MultiheadAttention other(8, 2);
  CHECK(nntest::contains(nntest::error_message([&] { p.split->load_from(other); }), "load_from"));
}

TEST_CASE("PerHeadAttention and MultiheadAttention agree on self-attention") {
  Pair p = make_pair(6, 3, 71);
  Tensor x = randn64({2, 4, 6}, 72);
  // Self-attention: the fused layer takes its single-GEMM path when query, key and value are
  // one tensor.
  p.fused->zero_grad();
  p.split->zero_grad();
  Tensor xa = x.clone().requires_grad_(), xb = x.clone().requires_grad_();
  auto fused = p.fused->forward(xa, xa, xa);
  auto split = p.split->forward(xb, xb, xb);
  Tensor G = randn64({2, 4, 6}, 73);
  (fused.output * G).sum().backward();
  (split.output * G).sum().backward();
  CHECK(max_abs_diff(fused.output, split.output) < kTol);
  CHECK(max_abs_diff(fused.weights, split.weights) < kTol);
  CHECK(max_abs_diff(xa.grad(), xb.grad()) < kTol);
  CHECK(max_abs_diff(p.fused->in_proj_weight.grad(), p.split->stacked_in_proj_weight(true)) < kTol);
  CHECK(max_abs_diff(p.fused->in_proj_bias.grad(), p.split->stacked_in_proj_bias(true)) < kTol);
  CHECK(max_abs_diff(p.fused->out_proj->weight.grad(), p.split->out_proj->weight.grad()) < kTol);
  // The outputs are not trivially small: the comparison means something.
  CHECK(max_abs_diff(fused.output, zeros_like(fused.output)) > 0.1);
}

TEST_CASE("PerHeadAttention and MultiheadAttention agree on cross-attention with every mask") {
  Pair p = make_pair(8, 2, 74);
  Inputs in{randn64({2, 3, 8}, 75), randn64({2, 5, 8}, 76), randn64({2, 5, 8}, 77)};
  Tensor padding = nntest::bool_mask({{0, 0, 0, 1, 1}, {0, 1, 0, 0, 0}});
  Tensor bool_mask = nntest::bool_mask({{1, 0, 0, 0, 0}, {0, 1, 0, 0, 1}, {1, 1, 1, 1, 1}});  // row 2: fully masked
  Tensor float_mask = randn64({3, 5}, 78);
  Tensor per_head = randn64({4, 3, 5}, 79);  // (B·H, T, S)
  CHECK(compare(p, in, {}, {}, false) < kTol);
  CHECK(compare(p, in, padding, {}, false) < kTol);
  CHECK(compare(p, in, {}, bool_mask, false) < kTol);
  CHECK(compare(p, in, padding, float_mask, false) < kTol);
  CHECK(compare(p, in, {}, per_head, false) < kTol);
  CHECK(compare(p, in, padding, {}, true) < kTol);
}

TEST_CASE("PerHeadAttention weights have the same shapes as the fused ones") {
  Pair p = make_pair(4, 2, 80);
  Tensor x = randn64({3, 4}, 81);  // unbatched
  auto fused = p.fused->forward(x, x, x);
  auto split = p.split->forward(x, x, x);
  CHECK(split.output.shape() == Shape{3, 4});
  CHECK(split.weights.shape() == fused.weights.shape());
  CHECK(max_abs_diff(split.output, fused.output) < kTol);
  Tensor xb = x.unsqueeze(0);
  CHECK(p.split->forward(xb, xb, xb, {.average_attn_weights = false}).weights.shape() == Shape{1, 2, 3, 3});
  CHECK_FALSE(p.split->forward(xb, xb, xb, {.need_weights = false}).weights.defined());
}
