// Lesson 2: why 3 Linear(d_model, d_model) layers for Q, K, V, and not 3·h Linear(d_model, d_k)?
//
// Because they are the same thing. Stacking the h matrices W_i (d_model, d_k) side by side
// gives one (d_model, h·d_k) matrix, and one product with it computes all h products at once:
//
//   x · [W_0  W_1 ... W_{h-1}] = [x·W_0  x·W_1 ... x·W_{h-1}]
//
// The same identity makes three Linear(d_model, d_model) for Q, K, V one Linear(d_model,
// 3·d_model), which is what nn::MultiheadAttention stores (in_proj_weight).
//
// So nn::MultiheadAttention (one fused projection) and nn::PerHeadAttention (3·h small Linear
// layers, the paper's drawing) given the same weights compute the same outputs and the same
// gradients, with the same number of multiply-adds. The fused form does them in fewer, larger
// matrix products: fewer BLAS calls, each with more work to amortise its overhead. The lesson
// counts the calls and times both (the time is printed, not tested: speed is measured).
#include <fmt/core.h>

#include <algorithm>
#include <chrono>

#include "lessons/lessons.h"
#include "lessons/measure.h"

using namespace cppgrad;

namespace lessons {

namespace {

// BLAS calls ("blas gemm" and "blas gemm, small" in the profile) made by `run`.
template <class Run>
int64_t gemm_calls(Run run) {
  profile::reset();
  profile::set_enabled(true);
  run();
  profile::set_enabled(false);
  int64_t calls = 0;
  for (const auto& e : profile::entries())
    if (e.name.rfind("blas gemm", 0) == 0) calls += e.calls;
  return calls;
}

// The median of `reps` timings of `run`, in ms, alternating with `other` so both see the same
// machine (other helpers' load varies from one second to the next).
template <class Run, class Other>
std::pair<double, double> median_ms_side_by_side(Run run, Other other, int reps) {
  std::vector<double> a, b;
  auto time = [](auto f) {
    auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  run(), other();  // warm-up: the allocator's cache, BLAS's buffers
  for (int i = 0; i < reps; ++i) {
    a.push_back(time(run));
    b.push_back(time(other));
  }
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return {a[a.size() / 2], b[b.size() / 2]};
}

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
  auto out_fused = fused.forward(x_fused, x_fused, x_fused, {.average_attn_weights = false});
  auto out_heads = per_head.forward(x_heads, x_heads, x_heads, {.average_attn_weights = false});
  Tensor G = randn({B, T, E}, kFloat64, gen);  // a random direction to backpropagate
  (out_fused.output * G).sum().backward();
  (out_heads.output * G).sum().backward();

  // ---- three Linear(E, E) for Q, K, V are one Linear(E, 3E) ------------------------------------
  {
    Tensor w_q = randn({E, E}, kFloat64, gen), w_k = randn({E, E}, kFloat64, gen), w_v = randn({E, E}, kFloat64, gen);
    Tensor fused_qkv = x.matmul(cat({w_q, w_k, w_v}, 1));  // (T, 3E)
    r.three_linear_identity = max_abs_diff(fused_qkv, cat({x.matmul(w_q), x.matmul(w_k), x.matmul(w_v)}, 1));
  }
  // Multiply-adds of the projections, from the weights' shapes: each (out, in) weight applied to
  // B·T tokens costs B·T·out·in.
  for (const auto& [name, p] : fused.named_parameters())
    if (name == "in_proj_weight") r.fused_projection_macs += B * T * p.size(0) * p.size(1);
  for (const auto& [name, p] : per_head.named_parameters())
    if (p.dim() == 2 && name.rfind("out_proj", 0) != 0) r.per_head_projection_macs += B * T * p.size(0) * p.size(1);

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

  // ---- the cost: BLAS calls and time, float32, a larger layer ----------------------------------
  {
    const int64_t E2 = r.timed_d_model, H2 = r.timed_heads;
    manual_seed(2);
    nn::MultiheadAttention big_fused(E2, H2);
    nn::PerHeadAttention big_per_head(E2, H2);
    // Before load_from: each layer's own default initialisation, at d_model 512.
    {
      manual_seed(2);
      nn::MultiheadAttention fused_default(r.init_d_model, 8);
      nn::PerHeadAttention per_head_default(r.init_d_model, 8);
      auto std_of = [](const Tensor& w) { return std::sqrt(w.detach().to(kFloat64).var().item()); };
      r.fused_init_weight_std = std_of(fused_default.in_proj_weight.narrow(0, 0, r.init_d_model));
      r.fused_init_bias_max = fused_default.in_proj_bias.narrow(0, 0, r.init_d_model).abs().max().item();
      r.per_head_init_weight_std = std_of((*per_head_default.q_heads)[0]->weight);
      for (int64_t i = 0; i < 8; ++i)
        r.per_head_init_bias_max =
            std::max(r.per_head_init_bias_max, (*per_head_default.q_heads)[static_cast<size_t>(i)]->bias.abs().max().item());
    }
    big_per_head.load_from(big_fused);
    Tensor xb = randn({8, 32, E2}, kFloat32, gen).requires_grad_();
    auto step = [&](auto& layer) {
      return [&] {
        layer.zero_grad();
        xb.zero_grad();
        layer.forward(xb, xb, xb, {.need_weights = false}).output.sum().backward();
      };
    };
    auto run_fused = step(big_fused);
    auto run_per_head = step(big_per_head);
    r.fused_gemm_calls = gemm_calls(run_fused);
    r.per_head_gemm_calls = gemm_calls(run_per_head);
    std::tie(r.fused_ms, r.per_head_ms) = median_ms_side_by_side(run_fused, run_per_head, 15);
  }
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
  fmt::print("\nThe same identity, one level up: three Linear(d_model, d_model) for Q, K and V are one\n");
  fmt::print("Linear(d_model, 3·d_model): max |x·[W_Q W_K W_V] - [x·W_Q x·W_K x·W_V]| = {:.1e}.\n",
             r.three_linear_identity);
  fmt::print("Multiply-adds of the Q, K, V projections (batch 2 of 6 tokens): fused {}, per head {}: the same.\n\n",
             r.fused_projection_macs, r.per_head_projection_macs);
  fmt::print("The cost, float32, d_model {}, {} heads, batch 8 of 32 tokens, one forward and backward:\n",
             r.timed_d_model, r.timed_heads);
  fmt::print("  MultiheadAttention: {:>3} BLAS calls, {:>6.2f} ms (median of 15)\n", r.fused_gemm_calls, r.fused_ms);
  fmt::print("  PerHeadAttention:   {:>3} BLAS calls, {:>6.2f} ms (median of 15, timed alternately)\n",
             r.per_head_gemm_calls, r.per_head_ms);
  fmt::print("  In the forward, the Q, K, V projections are 1 BLAS call against 3·h = {}; most of the other\n",
             3 * r.timed_heads);
  fmt::print("  calls, in both layers, are attention's own products, one per (sequence, head) pair. The\n");
  fmt::print("  times are this machine's at this moment (other programs share its 2 cores).\n");
  fmt::print("\nAnswer: both are right. Differences at the 1e-15 level are float64 rounding (the two do\n");
  fmt::print("their sums in different orders). The fused layer is the same maths, with the same number of\n");
  fmt::print("multiply-adds, in fewer and larger matrix products; {}. Gradients\n",
             r.per_head_ms > 1.1 * r.fused_ms
                 ? fmt::format("here that made it {:.1f}x faster", r.per_head_ms / r.fused_ms)
                 : std::string("this time the two took about as long, or the fused one longer (run it again)"));
  fmt::print("flow exactly as they do through 3·h separate layers. One time decides little: the times move\n");
  fmt::print("from run to run. The call counts move with the thread count (a batch of products is cut into\n");
  fmt::print("one call per thread's share), but at any count the fused layer makes at least 3·h - 1 fewer.\n");
  fmt::print("\nBut \"the same\" means the same weights. Left to their own defaults (d_model {}, 8 heads) the two\n",
             r.init_d_model);
  fmt::print("layers start differently, as PyTorch's do: MultiheadAttention draws its fused projection\n");
  fmt::print("Xavier-uniform with zero biases, each small Linear(d_model, d_k) draws Linear's default:\n");
  fmt::print("  query weights' standard deviation: fused {:.4f}, per head {:.4f}\n", r.fused_init_weight_std,
             r.per_head_init_weight_std);
  fmt::print("  largest |query bias|:              fused {:.3f},  per head {:.3f}\n", r.fused_init_bias_max,
             r.per_head_init_bias_max);
  fmt::print("A hand-written per-head layer that trains differently from nn.MultiheadAttention may differ\n");
  fmt::print("only there: copy the weights (load_from) to compare the maths.\n");
}

}  // namespace lessons
