// Lesson 7: the backward pass of a Transformer encoder layer, written out by hand.
//
// Autograd is the chain rule applied op by op. Here it is applied by hand, in the style of
// llm.c: one encoder layer (self-attention with a key padding mask, residuals, LayerNorm, a
// ReLU feed-forward; post-norm, as nn::TransformerEncoderLayer by default) computed forward and
// then backward with plain tensor ops under NoGradGuard, in float64, each gradient's formula
// in a one-line comment and each tensor's shape beside it. The loss is L = Σ y ⊙ G for a random
// G, so the gradient arriving at the output y is G.
//
// Then the check: every parameter's gradient and the input's equal autograd's (the same layer,
// nn::TransformerEncoderLayer, with loss.backward()) to 1e-12. And the three classic mistakes,
// each made on purpose, to see which gradients each one spoils and by how much:
//   - dropping the softmax Jacobian's -p·(Σ dp·p) term (ds = p ⊙ dp);
//   - forgetting the 1/√d_k in the backward (dq = ds·k);
//   - dropping LayerNorm's mean terms (treating the mean and variance as constants).
// Last, one tiny MultiheadAttention (T 3, E 4, h 2) traced backward with every intermediate
// tensor printed, small enough to check by hand, and confirmed by gradcheck.
//
// docs/tour/04b-attention-backward.md derives the formulas and reads through this file.
#include <fmt/core.h>

#include <cmath>

#include "lessons/lessons.h"
#include "lessons/measure.h"

using namespace cppgrad;

namespace lessons {

namespace {

enum class Mistake { None, SoftmaxJacobian, ScaleInBackward, LayerNormMeans };

// The layer's parameters, as plain float64 tensors (no graph). Linear weights are stored
// (out, in), as nn::Linear and PyTorch store them: y = x·Wᵀ + b.
struct Weights {
  Tensor w_in, b_in;   // (3E, E), (3E): W_Q, W_K, W_V stacked
  Tensor w_o, b_o;     // (E, E), (E)
  Tensor w_1, b_1;     // (F, E), (F)
  Tensor w_2, b_2;     // (E, F), (E)
  Tensor g_1, beta_1;  // LayerNorm 1: (E), (E)
  Tensor g_2, beta_2;  // LayerNorm 2: (E), (E)
};

Weights weights_of(nn::TransformerEncoderLayer& layer) {
  auto d = [](const Tensor& p) { return p.detach(); };
  return {d(layer.self_attn->in_proj_weight), d(layer.self_attn->in_proj_bias), d(layer.self_attn->out_proj->weight),
          d(layer.self_attn->out_proj->bias),  d(layer.linear1->weight),        d(layer.linear1->bias),
          d(layer.linear2->weight),            d(layer.linear2->bias),          d(layer.norm1->weight),
          d(layer.norm1->bias),                d(layer.norm2->weight),          d(layer.norm2->bias)};
}

// (B, T, H·d) -> (B, H, T, d) and back: views, whose backward is the inverse view.
Tensor split_heads(const Tensor& x, int64_t H) {
  return x.reshape({x.size(0), x.size(1), H, x.size(2) / H}).transpose(1, 2);
}
Tensor merge_heads(const Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

// A Linear: x (B, T, In) · Wᵀ (In, Out) + b. And rows(): (B, T, n) as (B·T, n) for the weight gradients.
Tensor affine(const Tensor& x, const Tensor& w, const Tensor& b) { return x.matmul(w.t()) + b; }
Tensor rows(const Tensor& x) { return x.reshape({-1, x.size(-1)}); }  // (B, T, n) -> (B·T, n)

// What the forward keeps for the backward (the "activations" llm.c stores).
struct LayerNormSaved {
  Tensor x_hat, rstd;  // (B, T, E), (B, T, 1)
};
struct Forward {
  Tensor x;                // (B, T, E) the input
  Tensor q, k, v;          // (B, H, T, d) each
  Tensor p;                // (B, H, T, T) attention weights
  Tensor a;                // (B, T, E) heads' outputs side by side
  LayerNormSaved ln_1;     // of r_1 = x + attention(x)
  Tensor y_1;              // (B, T, E) LayerNorm 1's output
  Tensor h;                // (B, T, F) before the ReLU
  Tensor g;                // (B, T, F) after it
  LayerNormSaved ln_2;     // of r_2 = y_1 + feed_forward(y_1)
  Tensor y;                // (B, T, E) the layer's output
};

// y = γ ⊙ (x - mean) / √(var + eps) + β over the last dim (var with 1/E, as PyTorch).
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, LayerNormSaved& saved) {
  Tensor centred = x - x.mean({-1}, true);                                     // (B, T, E)
  saved.rstd = (centred.square().mean({-1}, true) + 1e-5).rsqrt();             // (B, T, 1)
  saved.x_hat = centred * saved.rstd;                                          // (B, T, E)
  return saved.x_hat * gamma + beta;
}

Forward forward(const Weights& w, const Tensor& x, const Tensor& key_padding_mask, int64_t H) {
  NoGradGuard no_grad;
  Forward f;
  const int64_t E = x.size(2), d = E / H;
  f.x = x;
  auto qkv = affine(x, w.w_in, w.b_in).chunk(3, -1);                           // 3 × (B, T, E)
  f.q = split_heads(qkv[0], H), f.k = split_heads(qkv[1], H), f.v = split_heads(qkv[2], H);  // (B, H, T, d)
  Tensor s = f.q.matmul(f.k.mT()) / std::sqrt(static_cast<double>(d));        // (B, H, T, T)
  Tensor masked = key_padding_mask.unsqueeze(1).unsqueeze(1);                  // (B, 1, 1, T): true = padding
  f.p = s.masked_fill(masked, -INFINITY).softmax(-1);                          // (B, H, T, T)
  f.a = merge_heads(f.p.matmul(f.v));                                          // (B, T, E)
  Tensor r_1 = x + affine(f.a, w.w_o, w.b_o);                                  // residual
  f.y_1 = layer_norm(r_1, w.g_1, w.beta_1, f.ln_1);
  f.h = affine(f.y_1, w.w_1, w.b_1);                                           // (B, T, F)
  f.g = f.h.relu();
  Tensor r_2 = f.y_1 + affine(f.g, w.w_2, w.b_2);                              // residual
  f.y = layer_norm(r_2, w.g_2, w.beta_2, f.ln_2);
  return f;
}

// LayerNorm's backward, given dy (B, T, E). With x̂ = (x - μ)·rstd and dx̂ = dy ⊙ γ:
//   dx = rstd ⊙ (dx̂ - mean(dx̂) - x̂ ⊙ mean(dx̂ ⊙ x̂))   (the two mean terms come from μ and σ²)
Tensor layer_norm_backward(const Tensor& dy, const Tensor& gamma, const LayerNormSaved& s, Tensor& d_gamma,
                           Tensor& d_beta, Mistake mistake) {
  d_gamma = (dy * s.x_hat).sum({0, 1});  // dγ = Σ_(b,t) dy ⊙ x̂   (E)
  d_beta = dy.sum({0, 1});               // dβ = Σ_(b,t) dy        (E)
  Tensor dx_hat = dy * gamma;            // (B, T, E)
  if (mistake == Mistake::LayerNormMeans) return dx_hat * s.rstd;  // wrong: μ and σ² as constants
  return s.rstd * (dx_hat - dx_hat.mean({-1}, true) - s.x_hat * (dx_hat * s.x_hat).mean({-1}, true));
}

// Every gradient, by name (the names of nn::TransformerEncoderLayer's parameters, and "x").
using Gradients = std::vector<std::pair<std::string, Tensor>>;

Gradients backward(const Weights& w, const Forward& f, const Tensor& dy, int64_t H, Mistake mistake) {
  NoGradGuard no_grad;
  const int64_t E = f.x.size(2), d = E / H;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Tensor d_g2, d_beta2, d_g1, d_beta1;
  // LayerNorm 2, then the residual r_2 = y_1 + FF(y_1): its gradient goes to both branches.
  Tensor dr_2 = layer_norm_backward(dy, w.g_2, f.ln_2, d_g2, d_beta2, mistake);  // (B, T, E)
  // Second Linear: f = g·W_2ᵀ + b_2.
  Tensor dw_2 = rows(dr_2).t().matmul(rows(f.g));  // dW_2 = dfᵀ·g          (E, F)
  Tensor db_2 = dr_2.sum({0, 1});                   // db_2 = Σ df            (E)
  Tensor dg = dr_2.matmul(w.w_2);                   // dg = df·W_2            (B, T, F)
  Tensor dh = dg * f.h.gt(zeros({}, kFloat64)).to(kFloat64);  // ReLU: dh = dg ⊙ [h > 0]
  // First Linear: h = y_1·W_1ᵀ + b_1.
  Tensor dw_1 = rows(dh).t().matmul(rows(f.y_1));  // dW_1 = dhᵀ·y_1         (F, E)
  Tensor db_1 = dh.sum({0, 1});                     // db_1 = Σ dh            (F)
  Tensor dy_1 = dr_2 + dh.matmul(w.w_1);            // residual + dh·W_1      (B, T, E)
  // LayerNorm 1, then the residual r_1 = x + attention(x).
  Tensor dr_1 = layer_norm_backward(dy_1, w.g_1, f.ln_1, d_g1, d_beta1, mistake);  // (B, T, E)
  // Output projection: o = a·W_Oᵀ + b_O.
  Tensor dw_o = rows(dr_1).t().matmul(rows(f.a));  // dW_O = doᵀ·a           (E, E)
  Tensor db_o = dr_1.sum({0, 1});                   // db_O = Σ do            (E)
  Tensor da = split_heads(dr_1.matmul(w.w_o), H);   // da = do·W_O, the merge's inverse view  (B, H, T, d)
  // a = p·v: the two VJPs of a matmul.
  Tensor dp = da.matmul(f.v.mT());  // dp = da·vᵀ   (B, H, T, T)
  Tensor dv = f.p.mT().matmul(da);  // dv = pᵀ·da   (B, H, T, d)
  // Softmax: ds = p ⊙ (dp - Σ_j dp_j p_j). Masked keys have p = 0, so they get ds = 0.
  Tensor ds = mistake == Mistake::SoftmaxJacobian ? f.p * dp  // wrong: only the diagonal of the Jacobian
                                                  : f.p * (dp - (dp * f.p).sum({-1}, true));
  // s = q·kᵀ / √d: the matmul's VJPs, times the scale.
  const double s_back = mistake == Mistake::ScaleInBackward ? 1.0 : scale;  // wrong: 1 instead of 1/√d
  Tensor dq = ds.matmul(f.k) * s_back;        // dq = ds·k / √d     (B, H, T, d)
  Tensor dk = ds.mT().matmul(f.q) * s_back;   // dk = dsᵀ·q / √d    (B, H, T, d)
  // The heads were a view of the projection's output: merge them back, Q, K, V side by side.
  Tensor dqkv = cat({merge_heads(dq), merge_heads(dk), merge_heads(dv)}, -1);  // (B, T, 3E)
  Tensor dw_in = rows(dqkv).t().matmul(rows(f.x));  // dW_in = dqkvᵀ·x      (3E, E)
  Tensor db_in = dqkv.sum({0, 1});                   // db_in = Σ dqkv       (3E)
  Tensor dx = dr_1 + dqkv.matmul(w.w_in);            // residual + dqkv·W_in (B, T, E)
  return {{"x", dx},
          {"W_Q (self_attn.in_proj_weight rows 0..E)", dw_in.narrow(0, 0, E)},
          {"W_K (rows E..2E)", dw_in.narrow(0, E, E)},
          {"W_V (rows 2E..3E)", dw_in.narrow(0, 2 * E, E)},
          {"b_Q", db_in.narrow(0, 0, E)},
          {"b_K", db_in.narrow(0, E, E)},
          {"b_V", db_in.narrow(0, 2 * E, E)},
          {"W_O (self_attn.out_proj.weight)", dw_o},
          {"b_O", db_o},
          {"norm1.weight (γ_1)", d_g1},
          {"norm1.bias (β_1)", d_beta1},
          {"linear1.weight (W_1)", dw_1},
          {"linear1.bias (b_1)", db_1},
          {"linear2.weight (W_2)", dw_2},
          {"linear2.bias (b_2)", db_2},
          {"norm2.weight (γ_2)", d_g2},
          {"norm2.bias (β_2)", d_beta2}};
}

// Autograd's gradients of the same layer, in the same order and split.
Gradients autograd_gradients(nn::TransformerEncoderLayer& layer, const Tensor& x) {
  const int64_t E = x.size(2);
  const Tensor& w_in = layer.self_attn->in_proj_weight.grad();
  const Tensor& b_in = layer.self_attn->in_proj_bias.grad();
  return {{"x", x.grad()},
          {"W_Q", w_in.narrow(0, 0, E)},
          {"W_K", w_in.narrow(0, E, E)},
          {"W_V", w_in.narrow(0, 2 * E, E)},
          {"b_Q", b_in.narrow(0, 0, E)},
          {"b_K", b_in.narrow(0, E, E)},
          {"b_V", b_in.narrow(0, 2 * E, E)},
          {"W_O", layer.self_attn->out_proj->weight.grad()},
          {"b_O", layer.self_attn->out_proj->bias.grad()},
          {"γ_1", layer.norm1->weight.grad()},
          {"β_1", layer.norm1->bias.grad()},
          {"W_1", layer.linear1->weight.grad()},
          {"b_1", layer.linear1->bias.grad()},
          {"W_2", layer.linear2->weight.grad()},
          {"b_2", layer.linear2->bias.grad()},
          {"γ_2", layer.norm2->weight.grad()},
          {"β_2", layer.norm2->bias.grad()}};
}

std::vector<Lesson7::Gradient> compare(const Gradients& hand, const Gradients& reference) {
  std::vector<Lesson7::Gradient> out;
  for (size_t i = 0; i < hand.size(); ++i)
    out.push_back({hand[i].first, max_abs_diff(hand[i].second, reference[i].second),
                   reference[i].second.abs().max().item()});
  return out;
}

// Rounds to one decimal, so the traced example's inputs can be typed into a calculator.
Tensor tenths(const Tensor& t) {
  std::vector<double> v = values(t);
  for (double& e : v) e = std::round(e * 10.0) / 10.0 + 0.0;  // + 0.0: no "-0.0"
  return tensor(v, t.shape());
}

// The tiny MultiheadAttention, traced: forward and backward by hand, every step kept.
void trace_tiny_attention(Lesson7& r) {
  const int64_t T = 3, E = 4, H = 2, d = E / H;
  Generator gen(7);
  manual_seed(7);
  nn::MultiheadAttention mha(E, H);
  mha.to(kFloat64);
  {
    NoGradGuard no_grad;
    mha.in_proj_weight.copy_(tenths(randn({3 * E, E}, kFloat64, gen)));
    mha.in_proj_bias.zero_();
    mha.out_proj->weight.copy_(tenths(randn({E, E}, kFloat64, gen)));
    mha.out_proj->bias.zero_();
  }
  Tensor x = tenths(randn({1, T, E}, kFloat64, gen)).requires_grad_();
  Tensor G = tenths(randn({1, T, E}, kFloat64, gen));  // dL/d(out), L = Σ out ⊙ G
  auto& steps = r.trace;
  {
    NoGradGuard no_grad;
    const Tensor w_in = mha.in_proj_weight.detach(), w_o = mha.out_proj->weight.detach(), x0 = x.detach();
    steps.push_back({"x (T, E)", x0.squeeze(0)});
    steps.push_back({"W_in = in_proj_weight (3E, E): rows W_Q, W_K, W_V", w_in});
    steps.push_back({"W_O = out_proj.weight (E, E)", w_o});
    auto qkv = x0.matmul(w_in.t()).chunk(3, -1);  // biases are zero here
    Tensor q = split_heads(qkv[0], H), k = split_heads(qkv[1], H), v = split_heads(qkv[2], H);  // (1, H, T, d)
    Tensor s = q.matmul(k.mT()) / std::sqrt(static_cast<double>(d));
    Tensor p = s.softmax(-1);
    Tensor a = merge_heads(p.matmul(v));
    Tensor out = a.matmul(w_o.t());
    for (int64_t i = 0; i < H; ++i) {
      const std::string h = fmt::format("head {}: ", i);
      steps.push_back({h + "q = x·W_Q_iᵀ (T, d)", q.select(1, i).squeeze(0)});
      steps.push_back({h + "k = x·W_K_iᵀ (T, d)", k.select(1, i).squeeze(0)});
      steps.push_back({h + "v = x·W_V_iᵀ (T, d)", v.select(1, i).squeeze(0)});
      steps.push_back({h + "s = q·kᵀ / √d (T, T)", s.select(1, i).squeeze(0)});
      steps.push_back({h + "p = softmax(s) (T, T)", p.select(1, i).squeeze(0)});
    }
    steps.push_back({"a = [p_0·v_0  p_1·v_1] (T, E)", a.squeeze(0)});
    steps.push_back({"out = a·W_Oᵀ (T, E)", out.squeeze(0)});
    steps.push_back({"backward. G = dL/d(out) (T, E)", G.squeeze(0)});
    steps.push_back({"dW_O = Gᵀ·a (E, E)", G.squeeze(0).t().matmul(a.squeeze(0))});
    Tensor da = split_heads(G.matmul(w_o), H);  // (1, H, T, d)
    steps.push_back({"da = G·W_O (T, E)", G.matmul(w_o).squeeze(0)});
    std::vector<Tensor> dq, dk, dv;
    for (int64_t i = 0; i < H; ++i) {
      const std::string h = fmt::format("head {}: ", i);
      Tensor da_i = da.select(1, i).squeeze(0), p_i = p.select(1, i).squeeze(0);
      Tensor q_i = q.select(1, i).squeeze(0), k_i = k.select(1, i).squeeze(0), v_i = v.select(1, i).squeeze(0);
      Tensor dp = da_i.matmul(v_i.t());
      Tensor row_dot = (dp * p_i).sum({-1}, true);
      Tensor ds = p_i * (dp - row_dot);
      dq.push_back(ds.matmul(k_i) / std::sqrt(static_cast<double>(d)));
      dk.push_back(ds.t().matmul(q_i) / std::sqrt(static_cast<double>(d)));
      dv.push_back(p_i.t().matmul(da_i));
      steps.push_back({h + "dp = da_i·vᵀ (T, T)", dp});
      steps.push_back({h + "Σ_j dp_j·p_j, one per row (T, 1)", row_dot});
      steps.push_back({h + "ds = p ⊙ (dp - Σ_j dp_j·p_j) (T, T)", ds});
      steps.push_back({h + "dq = ds·k / √d (T, d)", dq.back()});
      steps.push_back({h + "dk = dsᵀ·q / √d (T, d)", dk.back()});
      steps.push_back({h + "dv = pᵀ·da_i (T, d)", dv.back()});
    }
    Tensor dqkv = cat({cat(dq, 1), cat(dk, 1), cat(dv, 1)}, 1);  // (T, 3E)
    Tensor dx = dqkv.matmul(w_in);
    Tensor dw_in = dqkv.t().matmul(x0.squeeze(0));
    steps.push_back({"dqkv = [dq_0 dq_1 | dk_0 dk_1 | dv_0 dv_1] (T, 3E)", dqkv});
    steps.push_back({"dx = dqkv·W_in (T, E)", dx});
    steps.push_back({"dW_in = dqkvᵀ·x (3E, E)", dw_in});
    r.trace_hand = {dx, dw_in, G.squeeze(0).t().matmul(a.squeeze(0))};
  }
  // The same by autograd, and by finite differences (gradcheck perturbs x and the layer's
  // weights in place and compares every entry of the Jacobian).
  Tensor out = mha.forward(x, x, x).output;
  (out * G).sum().backward();
  r.trace_vs_autograd = worst_of(worst_of(max_abs_diff(r.trace_hand[0], x.grad().squeeze(0)),
                                          max_abs_diff(r.trace_hand[1], mha.in_proj_weight.grad())),
                                 max_abs_diff(r.trace_hand[2], mha.out_proj->weight.grad()));
  try {
    r.trace_gradcheck = gradcheck(
        [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0]).output; },
        {x, mha.in_proj_weight, mha.out_proj->weight});
  } catch (const Error& e) {
    r.trace_gradcheck_error = e.what();
  }
}

}  // namespace

Lesson7 run_lesson7() {
  Lesson7 r;
  const int64_t B = r.batch, T = r.tokens, E = r.d_model, H = r.heads;
  manual_seed(7);
  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(E, H).dim_feedforward(r.ff).dropout(0.0));
  layer.to(kFloat64);
  Generator gen(70);
  {
    // Random biases and LayerNorm affine parameters, so that their gradients are a real test.
    NoGradGuard no_grad;
    for (auto& [name, p] : layer.named_parameters())
      if (p.dim() == 1) p.copy_(randn(p.shape(), kFloat64, gen) * 0.5 + (name.find("norm") != std::string::npos ? 1.0 : 0.0));
  }
  Tensor x = randn({B, T, E}, kFloat64, gen).requires_grad_();
  Tensor padding = zeros({B, T}, kBool);
  {
    NoGradGuard no_grad;
    padding.narrow(0, 1, 1).narrow(1, T - 1, 1).fill_(1.0);  // sequence 1's last token is padding
  }
  Tensor G = randn({B, T, E}, kFloat64, gen);  // L = Σ y ⊙ G, so dL/dy = G

  // By hand.
  const Weights w = weights_of(layer);
  const Forward f = forward(w, x.detach(), padding, H);
  const Gradients hand = backward(w, f, G, H, Mistake::None);

  // By autograd.
  Tensor y = layer.forward(x, {}, padding);
  (y * G).sum().backward();
  const Gradients reference = autograd_gradients(layer, x);
  r.forward_diff = max_abs_diff(f.y, y);
  r.gradients = compare(hand, reference);

  // The mistakes, made on purpose.
  const std::pair<Mistake, const char*> mistakes[] = {
      {Mistake::SoftmaxJacobian, "softmax backward without the -p·(Σ dp·p) term: ds = p ⊙ dp"},
      {Mistake::ScaleInBackward, "the 1/√d_k forgotten in the backward: dq = ds·k, dk = dsᵀ·q"},
      {Mistake::LayerNormMeans, "LayerNorm's mean terms dropped: dx = rstd ⊙ dx̂"},
  };
  for (const auto& [mistake, what] : mistakes)
    r.mistakes.push_back({what, compare(backward(w, f, G, H, mistake), reference)});

  trace_tiny_attention(r);
  return r;
}

namespace {
void print_matrix(const std::string& title, const Tensor& t) {
  fmt::print("  {}\n", title);
  const Tensor m = t.dim() == 1 ? t.unsqueeze(0) : t;
  for (int64_t i = 0; i < m.size(0); ++i) {
    std::string line = "   ";
    for (double v : values(m.select(0, i))) line += fmt::format(" {:>8.4f}", v);
    fmt::print("{}\n", line);
  }
}
}  // namespace

void print(const Lesson7& r) {
  fmt::print("Lesson 7: the backward pass of an encoder layer, written out by hand\n\n");
  fmt::print("One nn::TransformerEncoderLayer (d_model {}, {} heads, feed-forward {}, post-norm, ReLU, no dropout),\n",
             r.d_model, r.heads, r.ff);
  fmt::print("float64, batch {} of {} tokens, the last token of sequence 1 masked as padding. Loss L = Σ y ⊙ G.\n",
             r.batch, r.tokens);
  fmt::print("Forward by hand against the layer's forward: max difference {:.1e}.\n\n", r.forward_diff);
  fmt::print("Gradients by hand (lesson7_backward.cpp, backward()) against autograd:\n");
  fmt::print("  {:<44} {:>14}   {:>12}\n", "", "max |hand - autograd|", "max |grad|");
  for (const auto& g : r.gradients) fmt::print("  {:<44} {:>14.1e}          {:>12.3g}\n", g.name, g.diff, g.size);

  fmt::print("\nThe classic mistakes, made on purpose: max |wrong - autograd| for each gradient\n");
  fmt::print("(0 means the mistake comes after it in the backward order and cannot reach it).\n");
  fmt::print("  {:<44}", "");
  for (size_t m = 0; m < r.mistakes.size(); ++m) fmt::print(" {:>12}", fmt::format("mistake {}", m + 1));
  fmt::print("\n");
  for (size_t i = 0; i < r.gradients.size(); ++i) {
    fmt::print("  {:<44}", r.gradients[i].name);
    for (const auto& m : r.mistakes) fmt::print(" {:>12.2e}", m.errors[i].diff);
    fmt::print("\n");
  }
  for (size_t m = 0; m < r.mistakes.size(); ++m) fmt::print("  mistake {}: {}\n", m + 1, r.mistakes[m].what);
  const auto& m1 = r.mistakes[0].errors;
  const auto& m2 = r.mistakes[1].errors;
  fmt::print("  Mistake 1 spoils only what lies below the softmax in the backward: W_Q, W_K, b_Q, x, and\n");
  fmt::print("  b_K, which gets {:.2f} where the true gradient is 0 (a key bias adds the same q·b_K to a\n",
             m1[5].diff);
  fmt::print("  whole row of scores, which softmax ignores; without the -p·(Σ dp·p) term ds no longer sums\n");
  fmt::print("  to 0 along a row). W_V, W_O and everything above the attention stay right.\n");
  fmt::print("  Mistake 2 makes dq and dk √d_k = {:.0f} times too large: the error on W_Q is {:.2f}, its\n",
             std::sqrt(static_cast<double>(r.d_model / r.heads)), m2[1].diff);
  fmt::print("  largest gradient {:.2f}: the error is (√d_k - 1) times the gradient, on W_Q, W_K, b_Q and x.\n",
             r.gradients[1].size);
  fmt::print("  Mistake 3 spoils nearly everything: LayerNorm 2 is the first step of the backward, and\n");
  fmt::print("  only γ_2 and β_2, computed before the mistake, stay right.\n\n");
  fmt::print("A tiny MultiheadAttention traced backward (T 3, E 4, h 2, d = 2, biases 0, L = Σ out ⊙ G).\n");
  fmt::print("Every number below can be checked by hand from the ones above it:\n");
  for (const auto& [title, t] : r.trace) print_matrix(title, t);
  fmt::print("  max |hand - autograd| over dx, dW_in, dW_O: {:.1e}; gradcheck (finite differences): {}\n\n",
             r.trace_vs_autograd, r.trace_gradcheck ? "passed" : "failed: " + r.trace_gradcheck_error);

  fmt::print("Answer: the backward is the chain rule, one op at a time, in reverse: a matmul C = A·B sends\n");
  fmt::print("dC·Bᵀ to A and Aᵀ·dC to B, softmax sends p ⊙ (dp - Σ dp·p), a view sends the inverse view,\n");
  fmt::print("a residual sends its gradient to both branches, and LayerNorm subtracts the gradient's\n");
  fmt::print("mean and its projection on x̂. Written so, it equals autograd's to float64 rounding.\n");
}

}  // namespace lessons
