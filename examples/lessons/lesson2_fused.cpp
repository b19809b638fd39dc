// Lesson 2: why 3 Linear(d_model, d_model) layers for Q, K, V, and not 3·h Linear(d_model, d_k)?
//
// Because they are the same thing. Stacking the h matrices W_i (d_model, d_k) side by side
// gives one (d_model, h·d_k) matrix, and one product with it computes all h products at once:
//
//   x · [W_0  W_1 ... W_{h-1}] = [x·W_0  x·W_1 ... x·W_{h-1}]
//
// So nn::MultiheadAttention (one fused projection) and nn::PerHeadAttention (3·h small Linear
// layers, the paper's drawing) given the same weights compute the same outputs and the same
// gradients. The fused form only does it in fewer, larger matrix products.
#include <fmt/core.h>

#include "lessons/lessons.h"
#include "lessons/measure.h"

using namespace cppgrad;

namespace lessons {

namespace {
// Weight matrices (2-d parameters) of a module; the biases are the 1-d ones.
int64_t weight_matrices(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.dim() == 2;
  return n;
}
}  // namespace

Lesson2 run_lesson2() {
  Lesson2 r;
  const int64_t E = r.d_model, H = r.heads, d_k = E / H, B = 2, T = 6;
  Generator gen(2);

  // ---- the stacking identity, on plain matrices --------------------------------------------
  Tensor x = randn({T, E}, kFloat64, gen);
  std::vector<Tensor> W, products;
  for (int64_t i = 0; i < H; ++i) {
    W.push_back(randn({E, d_k}, kFloat64, gen));  // head i's W_i: (d_model, d_k)
    products.push_back(x.matmul(W.back()));        // (T, d_k)
  }
  Tensor stacked = cat(W, 1);                                        // (d_model, h·d_k)
  r.stacking_identity = max_abs_diff(x.matmul(stacked), cat(products, 1));  // (T, h·d_k) both

  // ---- the two layers, with the same weights -----------------------------------------------
  manual_seed(2);
  nn::MultiheadAttention fused(E, H);
  nn::PerHeadAttention per_head(E, H);
  fused.to(kFloat64);
  per_head.to(kFloat64);
  {
    // PyTorch's initialisation zeroes the biases; random ones make their gradients a real test.
    NoGradGuard no_grad;
    fused.in_proj_bias.copy_(randn({3 * E}, kFloat64, gen));
    fused.out_proj->bias.copy_(randn({E}, kFloat64, gen));
  }
  per_head.load_from(fused);  // head i's Linear gets rows [i·d_k, (i+1)·d_k) of each projection
  r.fused_parameters = fused.parameter_count();
  r.per_head_parameters = per_head.parameter_count();
  r.fused_weight_matrices = weight_matrices(fused);
  r.per_head_weight_matrices = weight_matrices(per_head);

  // Self-attention on the same input; each layer gets its own copy so the input gradients
  // do not add up.
  Tensor input = randn({B, T, E}, kFloat64, gen);
  Tensor x_fused = input.clone().requires_grad_(), x_heads = input.clone().requires_grad_();
  auto out_fused = fused.forward(x_fused, x_fused, x_fused, {}, {}, true, /*average_attn_weights=*/false);
  auto out_heads = per_head.forward(x_heads, x_heads, x_heads, {}, {}, true, /*average_attn_weights=*/false);
  Tensor G = randn({B, T, E}, kFloat64, gen);  // a random direction to backpropagate
  (out_fused.output * G).sum().backward();
  (out_heads.output * G).sum().backward();

  r.differences = {
      {"output", max_abs_diff(out_fused.output, out_heads.output)},
      {"attention weights (every head)", max_abs_diff(out_fused.weights, out_heads.weights)},
      {"gradient of the input", max_abs_diff(x_fused.grad(), x_heads.grad())},
      {"gradient of W_Q, W_K, W_V (stacked)",
       max_abs_diff(fused.in_proj_weight.grad(), per_head.stacked_in_proj_weight(/*gradients=*/true))},
      {"gradient of their biases",
       max_abs_diff(fused.in_proj_bias.grad(), per_head.stacked_in_proj_bias(/*gradients=*/true))},
      {"gradient of W_O", max_abs_diff(fused.out_proj->weight.grad(), per_head.out_proj->weight.grad())},
      {"gradient of W_O's bias", max_abs_diff(fused.out_proj->bias.grad(), per_head.out_proj->bias.grad())},
  };
  return r;
}

void print(const Lesson2& r) {
  const int64_t d_k = r.d_model / r.heads;
  fmt::print("Lesson 2: 3 Linear layers for Q, K, V, or 3·h of them?\n\n");
  fmt::print("The stacking identity, with h = {} random matrices W_i of shape ({}, {}):\n", r.heads, r.d_model, d_k);
  fmt::print("  max |x · [W_0 ... W_{}] - [x·W_0 ... x·W_{}]| = {:.1e}\n\n", r.heads - 1, r.heads - 1,
             r.stacking_identity);

  fmt::print("Two layers, d_model = {}, h = {}, float64, the same weights:\n", r.d_model, r.heads);
  fmt::print("  MultiheadAttention: {:>2} weight matrices (a fused (3·d_model, d_model) one + W_O), {} parameters\n",
             r.fused_weight_matrices, r.fused_parameters);
  fmt::print("  PerHeadAttention:   {:>2} weight matrices (3·h Linear(d_model, d_k) + W_O),         {} parameters\n\n",
             r.per_head_weight_matrices, r.per_head_parameters);
  fmt::print("Largest difference between the two, after one forward and backward:\n");
  for (const auto& [what, diff] : r.differences) fmt::print("  {:<38} {:.1e}\n", what, diff);
  fmt::print("\nAnswer: both are right. Differences at the 1e-15 level are float64 rounding (the two do\n");
  fmt::print("their sums in different orders). The fused layer is the same maths in fewer, larger matrix\n");
  fmt::print("products, which is faster; gradients flow exactly as they do through 3·h separate layers.\n");
}

}  // namespace lessons
