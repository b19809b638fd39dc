// Lesson 1: is the embedding split between the heads, or does every head get all of it?
//
// Every head reads the whole d_model-wide input. What gets "split" is the output of the
// query/key/value projections: head i's queries are x · W_Q_iᵀ with W_Q_i its stored block
// (d_k, d_model) (the paper writes the transpose, (d_model, d_k)), and the h blocks W_Q_i sit
// one under the other in one (h·d_k, d_model) matrix W_Q. Computing x · W_Qᵀ once and reshaping
// its last dim into (h, d_k) hands each head exactly x · W_Q_iᵀ. We prove it two ways: by gradients (head i's queries change when any of the
// d_model input features changes) and by computing the queries both ways.
#include <fmt/core.h>

#include <cmath>

#include "lessons/lessons.h"
#include "lessons/measure.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace lessons {

namespace {

// The per-feature gradient of sum(Q_i) at the first token: (d_model) values.
Tensor gradient_by_feature(const Tensor& queries_of_head, const Tensor& x) {
  // retain_graph: the heads share the one projection's graph, and each asks for its gradient.
  Tensor g = autograd::grad({queries_of_head.sum()}, {x}, {}, /*retain_graph=*/true)[0];  // (1, T, d_model)
  return g.select(0, 0).select(0, 0);  // token 0: (d_model)
}

int64_t count_nonzero(const Tensor& t) {
  int64_t n = 0;
  for (double v : values(t)) n += v != 0.0;
  return n;
}

}  // namespace

Lesson1 run_lesson1() {
  Lesson1 r;
  const int64_t E = r.d_model, H = r.heads, d_k = E / H, T = 5;
  manual_seed(1);
  nn::MultiheadAttention attention(E, H);
  attention.to(kFloat64);
  Tensor x = randn({1, T, E}, kFloat64).requires_grad_();  // one sequence of T tokens

  // W_Q is the first E rows of the fused in_proj_weight. Linear stores weights as (out, in),
  // so the paper's (d_model, h·d_k) matrix is its transpose.
  Tensor W_Q = attention.in_proj_weight.narrow(0, 0, E);  // (h·d_k, d_model) = Wᵀ of the paper
  Tensor b_Q = attention.in_proj_bias.narrow(0, 0, E);

  // Way 1, as MultiheadAttention does it: project once, then reshape the features into heads.
  Tensor Q = F::linear(x, W_Q, b_Q);                   // (1, T, d_model)
  Tensor Q_heads = Q.reshape({1, T, H, d_k});          // (1, T, h, d_k): the "split"
  for (int64_t i = 0; i < H; ++i) {
    // Way 2, as the paper draws it: head i has its own W_Q_i, a block of d_k rows of W_Q.
    Tensor W_Q_i = W_Q.narrow(0, i * d_k, d_k);        // (d_k, d_model), as stored
    Tensor Q_i = F::linear(x, W_Q_i, b_Q.narrow(0, i * d_k, d_k));  // (1, T, d_k)
    Tensor fused_i = Q_heads.select(2, i);             // (1, T, d_k)
    r.fused_vs_per_head = worst_of(r.fused_vs_per_head, max_abs_diff(fused_i, Q_i));
    if (i == 0) r.w_q_head_shape = W_Q_i.shape();  // as stored: (d_k, d_model)

    Tensor g = gradient_by_feature(fused_i, x);
    r.gradient_by_head.push_back(values(g));
    r.features_read.push_back(count_nonzero(g));
  }

  // The other reading of "split": head 0 reads only its own d_k-wide slice of the embedding,
  // through a (d_k, d_k) matrix. Its gradient then vanishes outside that slice.
  Tensor slice = x.narrow(2, 0, d_k);                   // (1, T, d_k)
  Tensor W_cut = W_Q.narrow(0, 0, d_k).narrow(1, 0, d_k);  // (d_k, d_k)
  Tensor g_cut = gradient_by_feature(F::linear(slice, W_cut), x);
  r.gradient_if_cut = values(g_cut);
  r.features_read_if_cut = count_nonzero(g_cut);
  return r;
}

void print(const Lesson1& r) {
  const int64_t d_k = r.d_model / r.heads;
  fmt::print("Lesson 1: is the embedding split between the heads, or copied to each?\n\n");
  fmt::print("d_model = {}, h = {} heads, d_k = d_model / h = {}.\n", r.d_model, r.heads, d_k);
  fmt::print("Head 0's query matrix W_Q_0 is stored as (d_k, d_model) = ({}, {}) (the paper writes its transpose):\n",
             r.w_q_head_shape[0], r.w_q_head_shape[1]);
  fmt::print("x·W_Q_0ᵀ maps all {} input features to {} query features.\n\n", r.d_model, d_k);

  fmt::print("Gradient of sum(head i's queries) with respect to each input feature of token 0:\n");
  auto row = [](const std::vector<double>& g) {
    std::string s;
    for (double v : g) s += fmt::format("{:6.2f}", v);
    return s;
  };
  for (int64_t i = 0; i < r.heads; ++i)
    fmt::print("  head {}  {}   nonzero: {} of {}\n", i, row(r.gradient_by_head[i]), r.features_read[i], r.d_model);
  fmt::print("If head 0 read only its own slice of the embedding, the gradient would look like this:\n");
  fmt::print("  cut     {}   nonzero: {} of {}\n\n", row(r.gradient_if_cut), r.features_read_if_cut, r.d_model);

  fmt::print("Head i's queries computed two ways:\n");
  fmt::print("  fused:    Q = x · W_Qᵀ (one matrix, h·d_k = {} columns), then reshape (T, {}) -> (T, {}, {})\n",
             r.d_model, r.d_model, r.heads, d_k);
  fmt::print("  per head: Q_i = x · W_Q_iᵀ, with W_Q_i = rows [i·d_k, (i+1)·d_k) of W_Q\n");
  fmt::print("  largest difference over all heads and tokens: {:.1e}\n\n", r.fused_vs_per_head);

  fmt::print("Answer: copied. Every head reads the whole embedding (all {} gradients are nonzero);\n", r.d_model);
  fmt::print("what is split is the projection's output, and splitting it by a reshape gives exactly what\n");
  fmt::print("h separate projections would give. Each head sees everything, through its own d_k-wide lens.\n");
}

}  // namespace lessons
