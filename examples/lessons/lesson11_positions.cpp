// Lesson 11: positions, sinusoidal vs learned vs rotary, and none.
//
// Attention is a weighted sum over the keys whose weights come from dot products of contents:
// nothing in it knows where a token stands. Shuffle the input and, with no positions, every
// output is shuffled the same way (the model is permutation-equivariant), so no task that needs
// order can be learned. Three ways to give it positions:
//   - sinusoidal (2017): sin/cos of pos / 10000^(2i/d) added to each embedding;
//   - learned (BERT, GPT-2): a trained vector per position, added;
//   - rotary (RoPE, Su et al. 2021): each head's queries and keys rotated by an angle
//     proportional to their position, pair of features by pair; the score of query m and key n
//     is then qᵀ·R(n − m)·k, a function of the offset m − n only (relative positions).
// The lesson measures each claim, then trains the same small encoder with each scheme on the
// reverse task (the output at position i is the input at n − 1 − i), which needs order.
#include "lessons/lesson11_positions.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "cppgrad.h"

namespace lessons {

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

std::string scheme_name(PositionScheme s) {
  switch (s) {
    case PositionScheme::None: return "none";
    case PositionScheme::Sinusoidal: return "sinusoidal";
    case PositionScheme::Learned: return "learned";
    case PositionScheme::Rotary: return "rotary";
  }
  return "?";
}

namespace {

double max_diff(const Tensor& a, const Tensor& b) { return (a - b).abs().max().item<double>(); }

// A small encoder (no causal mask: every token sees every other), pre-norm blocks
//   h = x + Attention(LayerNorm(x)),  y = h + W2·relu(W1·LayerNorm(h)),
// with the positions of `scheme`: added to the embeddings, or rotating queries and keys.
class OrderModel : public nn::Module {
 public:
  OrderModel(PositionScheme scheme, const Lesson11Options& o) : scheme_(scheme) {
    embed = register_module("embed", std::make_shared<nn::Embedding>(o.vocab, o.d_model));
    if (scheme == PositionScheme::Learned)
      learned = register_module("positions", std::make_shared<nn::Embedding>(o.seq_len, o.d_model));
    if (scheme == PositionScheme::Sinusoidal)
      sinusoids = register_module("positions", std::make_shared<nn::PositionalEncoding>(o.d_model, 0.0, o.seq_len));
    for (int64_t l = 0; l < o.layers; ++l) {
      const std::string i = std::to_string(l);
      norms1.push_back(register_module("norm1_" + i, std::make_shared<nn::LayerNorm>(Shape{o.d_model})));
      attention.push_back(register_module(
          "attention_" + i, std::make_shared<nn::MultiheadAttention>(nn::MultiheadAttentionOptions(o.d_model, o.heads)
                                                                         .rotary(scheme == PositionScheme::Rotary))));
      norms2.push_back(register_module("norm2_" + i, std::make_shared<nn::LayerNorm>(Shape{o.d_model})));
      up.push_back(register_module("up_" + i, std::make_shared<nn::Linear>(o.d_model, 2 * o.d_model)));
      down.push_back(register_module("down_" + i, std::make_shared<nn::Linear>(2 * o.d_model, o.d_model)));
    }
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(Shape{o.d_model}));
    out = register_module("out", std::make_shared<nn::Linear>(o.d_model, o.vocab));
  }

  // tokens (B, T) -> logits (B, T, vocab)
  Tensor forward(const Tensor& tokens) {
    Tensor x = embed->forward(tokens);  // (B, T) -> (B, T, d_model)
    if (sinusoids) x = sinusoids->forward(x);
    if (learned) x = x + learned->forward(arange(static_cast<double>(tokens.size(1))).to(kInt64));  // + (T, d_model)
    for (size_t l = 0; l < attention.size(); ++l) {
      Tensor normed = norms1[l]->forward(x);
      x = x + attention[l]->forward(normed, normed, normed, {.need_weights = false}).output;
      x = x + down[l]->forward(up[l]->forward(norms2[l]->forward(x)).relu());
    }
    return out->forward(norm->forward(x));
  }
  std::string type_name() const override { return "OrderModel"; }

 private:
  PositionScheme scheme_;
  std::shared_ptr<nn::Embedding> embed, learned;
  std::shared_ptr<nn::PositionalEncoding> sinusoids;
  std::vector<std::shared_ptr<nn::LayerNorm>> norms1, norms2;
  std::vector<std::shared_ptr<nn::MultiheadAttention>> attention;
  std::vector<std::shared_ptr<nn::Linear>> up, down;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> out;
};

// The reverse task: random digits, and the same digits back to front.
std::pair<Tensor, Tensor> reverse_batch(int64_t batch, const Lesson11Options& o, Generator& gen) {
  Tensor x = randint(0, o.vocab, {batch, o.seq_len}, gen);
  Tensor backwards = arange(static_cast<double>(o.seq_len - 1), -1.0, -1.0).to(kInt64);  // n − 1, ..., 0
  return {x, x.index_select(1, backwards)};
}

// Percentage of sequences whose every output token is right.
double sequence_accuracy(OrderModel& model, const Tensor& x, const Tensor& y) {
  NoGradGuard no_grad;
  Tensor right = model.forward(x).argmax(-1) == y;  // (B, T) bool
  Tensor all_right = right.to(kFloat64).sum({1}) == static_cast<double>(x.size(1));
  return 100.0 * all_right.to(kFloat64).mean().item<double>();
}

}  // namespace

Lesson11 run_lesson11(const Lesson11Options& o) {
  Lesson11 r;
  r.options = o;
  r.chance_token_accuracy = 100.0 / static_cast<double>(o.vocab);

  // ---- 1. without positions, a permutation of the input permutes the output -------------------
  {
    Generator gen(111);
    Tensor x = randint(0, o.vocab, {1, o.seq_len}, gen);
    std::vector<int64_t> order(static_cast<size_t>(o.seq_len));
    for (int64_t i = 0; i < o.seq_len; ++i) order[static_cast<size_t>(i)] = (i * 3 + 1) % o.seq_len;  // a shuffle
    for (int64_t i = 0; i < o.seq_len; ++i) r.permutation_changed += order[static_cast<size_t>(i)] != i;
    Tensor perm = tensor(order, Shape{o.seq_len});
    for (PositionScheme s : r.schemes) {
      manual_seed(11);
      OrderModel model(s, o);
      model.to(kFloat64);
      model.eval();
      NoGradGuard no_grad;
      r.permutation_gap.push_back(max_diff(model.forward(x.index_select(1, perm)), model.forward(x).index_select(1, perm)));
    }
  }

  // ---- 2. RoPE's scores depend on the offset m − n only -----------------------------------------
  {
    const int64_t T = 16, d = 16, shift = 100;
    Generator gen(112);
    Tensor q = randn({1, d}, kFloat64, gen).expand({T, d}), k = randn({1, d}, kFloat64, gen).expand({T, d});
    // Row m of Q is q at position m (+ shift), row n of K is k at n: scores (T, T).
    auto rope_scores = [&](int64_t offset) {
      return F::apply_rotary(q, offset).matmul(F::apply_rotary(k, offset).mT());  // (T, d) @ (d, T) -> (T, T)
    };
    Tensor s = rope_scores(0), shifted = rope_scores(shift);
    r.rope_shift_gap = max_diff(s, shifted);
    r.rope_offset_spread = (s.max() - s.min()).item<double>();
    for (int64_t offset = -(T - 1); offset < T; ++offset) {  // the pairs with m − n = offset
      std::vector<double> same;
      for (int64_t m = std::max<int64_t>(0, offset); m < std::min(T, T + offset); ++m)
        same.push_back(s.at<double>({m, m - offset}));
      const auto [lo, hi] = std::minmax_element(same.begin(), same.end());
      r.rope_diagonal_spread = std::max(r.rope_diagonal_spread, *hi - *lo);
    }
    nn::PositionalEncoding sinusoids(d, 0.0, T + shift);
    sinusoids.to(kFloat64);
    auto absolute_scores = [&](int64_t offset) {
      return sinusoids.forward(q.unsqueeze(0), offset).squeeze(0).matmul(sinusoids.forward(k.unsqueeze(0), offset).squeeze(0).mT());
    };
    r.sinusoidal_shift_gap = max_diff(absolute_scores(0), absolute_scores(shift));
  }

  // ---- 3. the reverse task with each scheme --------------------------------------------------
  Generator held_gen(113);
  auto [held_x, held_y] = reverse_batch(500, o, held_gen);
  for (PositionScheme s : r.schemes) {
    std::vector<int64_t> steps;
    std::vector<double> accuracy;
    for (int64_t seed = 0; seed < o.seeds; ++seed) {
      manual_seed(static_cast<uint64_t>(1100 + seed));
      OrderModel model(s, o);
      if (seed == 0) r.parameters.push_back(model.parameter_count());
      optim::Adam opt(model.parameters(), optim::AdamOptions(3e-3));
      Generator data(static_cast<uint64_t>(2100 + seed));  // the same batches for every scheme
      int64_t reached = -1;
      double last = 0.0;
      for (int64_t step = 1; step <= o.max_steps; ++step) {
        auto [x, y] = reverse_batch(o.batch, o, data);
        Tensor loss = F::cross_entropy(model.forward(x).reshape({-1, o.vocab}), y.reshape({-1}));
        opt.zero_grad();
        loss.backward();
        opt.step();
        if (step % o.eval_every != 0 && step != o.max_steps) continue;
        last = sequence_accuracy(model, held_x, held_y);
        if (last >= 99.0) {
          reached = step;
          break;
        }
      }
      steps.push_back(reached);
      accuracy.push_back(last);
    }
    r.steps_to_99.push_back(steps);
    r.final_accuracy.push_back(accuracy);
  }
  return r;
}

void print(const Lesson11& r) {
  const Lesson11Options& o = r.options;
  fmt::print("Lesson 11: positions. Sinusoidal, learned or rotary, and what happens with none?\n\n");
  fmt::print("1. Shuffle the input ({} of {} tokens moved) and compare the untrained model's output with its own\n"
             "   output shuffled the same way: max |f(shuffled x) - shuffled f(x)|, float64:\n",
             r.permutation_changed, o.seq_len);
  for (size_t i = 0; i < r.schemes.size(); ++i)
    fmt::print("   {:<11} {:.1e}\n", scheme_name(r.schemes[i]), r.permutation_gap[i]);
  const bool blind = r.permutation_gap[0] < 1e-12;
  bool others_see = true;
  for (size_t i = 1; i < r.schemes.size(); ++i) others_see = others_see && r.permutation_gap[i] > 1e-6;
  fmt::print("   {}\n\n",
             blind ? "With no positions the output is the input's output shuffled, to rounding: attention and the\n"
                     "   per-token layers see a set, not a sequence, and no training can change that."
                   : "With no positions the outputs did not simply permute (unexpected: look for a position source).");
  if (!others_see) fmt::print("   (Some scheme with positions also permuted exactly: unexpected.)\n\n");

  fmt::print("2. RoPE: the score of a query at position m and a key at position n (d_k 16, m, n < 16):\n"
             "   shifting both by 100 changes the scores by at most {:.1e}; pairs with the same offset m - n\n"
             "   differ by at most {:.1e}; across offsets the scores span {:.2f}. With sinusoids added to q\n"
             "   and k instead, the same shift changes the scores by up to {:.2f}: absolute positions.\n",
             r.rope_shift_gap, r.rope_diagonal_spread, r.rope_offset_spread, r.sinusoidal_shift_gap);
  fmt::print("   {}\n\n", r.rope_shift_gap < 1e-9 && r.rope_diagonal_spread < 1e-9 && r.rope_offset_spread > 1e-3
                             ? "So RoPE gives attention relative positions only: R(m)q · R(n)k = q · R(n - m)k."
                             : "The scores did not behave as relative positions: unexpected.");

  fmt::print("3. The reverse task ({} digits of {} in, the same reversed out), the same encoder ({} layers,\n"
             "   d_model {}, {} heads, no causal mask), seeds and batches for each scheme, Adam 3e-3, batch {};\n"
             "   steps until 99% of 500 held-out sequences come out exactly right (evaluated every {} steps,\n"
             "   at most {}):\n",
             o.seq_len, o.vocab, o.layers, o.d_model, o.heads, o.batch, o.eval_every, o.max_steps);
  fmt::print("   {:<11} {:>10}  {}\n", "positions", "parameters", "steps to 99% (final accuracy) per seed");
  std::vector<double> mean_steps;  // a run that did not reach 99% counts as max_steps + eval_every
  for (size_t i = 0; i < r.schemes.size(); ++i) {
    std::string runs;
    double total = 0;
    for (size_t s = 0; s < r.steps_to_99[i].size(); ++s) {
      const int64_t st = r.steps_to_99[i][s];
      runs += st > 0 ? fmt::format("  {} ({:.1f}%)", st, r.final_accuracy[i][s])
                     : fmt::format("  not reached ({:.1f}%)", r.final_accuracy[i][s]);
      total += static_cast<double>(st > 0 ? st : o.max_steps + o.eval_every);
    }
    mean_steps.push_back(total / static_cast<double>(r.steps_to_99[i].size()));
    fmt::print("   {:<11} {:>10}{}\n", scheme_name(r.schemes[i]), r.parameters[i], runs);
  }
  // The conclusions, from what was measured.
  double none_best = 0.0;
  for (double a : r.final_accuracy[0]) none_best = std::max(none_best, a);
  if (none_best < 5.0)
    fmt::print("   Without positions the model never gets a sequence right (best {:.1f}%): it cannot know which\n"
               "   token is last.\n", none_best);
  else
    fmt::print("   Without positions the model still got {:.1f}% right: unexpected for a permutation-equivariant model.\n",
               none_best);
  size_t fastest = 1;
  for (size_t i = 2; i < r.schemes.size(); ++i)
    if (mean_steps[i] < mean_steps[fastest]) fastest = i;
  bool all_reached = true;
  for (size_t i = 1; i < r.schemes.size(); ++i)
    for (int64_t st : r.steps_to_99[i]) all_reached = all_reached && st > 0;
  fmt::print("   Of the schemes with positions, {} reached 99% in the fewest steps ({}mean {:.0f});\n   {}.\n",
             scheme_name(r.schemes[fastest]), r.steps_to_99[fastest].size() > 1 ? "" : "one seed, ", mean_steps[fastest],
             all_reached ? "every scheme with positions got there" : "not every scheme reached 99% within the budget");
  const size_t rotary = 3;
  if (mean_steps[rotary] > mean_steps[fastest])
    fmt::print("   Rotary positions are relative: reversing needs the absolute position (token i goes to n - 1 - i),\n"
               "   which a RoPE encoder must infer from where the sequence ends; the added schemes hand it over.\n");
  if (o.seeds == 1) fmt::print("   (One seed decides little: `lesson 11 --positions-seeds 5` runs more.)\n");
}

}  // namespace lessons
