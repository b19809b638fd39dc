// Lesson 9: "my Transformer doesn't learn". A checklist, each item a measurement you can run on
// your own model:
//   1. overfit one batch first: a model that cannot drive the loss of one fixed batch to near 0
//      has a bug (a mask, a missing gradient, a detached tensor), not a tuning problem;
//   2. positions: without positional encodings an encoder is exactly permutation-equivariant,
//      f(P·x) = P·f(x): it cannot tell "ab" from "ba";
//   3. the causal mask: with it, output 0 does not move when a later token changes;
//   4. the learning rate's warm-up: the same model and batches, the paper's schedule with and
//      without its warm-up (the first step's rate 1000 times as high, the same from step 100);
//   5. gradient norms per part of the model: none zero, none NaN;
//   6. initialisation and tied weights: lessons 2 and 6 (a per-head layer's default init is not
//      MultiheadAttention's; a tied weight must be the same tensor, not a copy).
#include <fmt/core.h>

#include <cmath>
#include <regex>

#include "lessons/lessons.h"
#include "lessons/measure.h"
#include "lessons/training.h"

using namespace cppgrad;
using namespace seq2seq;
namespace F = cppgrad::nn::functional;

namespace lessons {

namespace {

// The loss of the small seq2seq model on one batch.
Tensor batch_loss(Seq2SeqModel& model, const Batch& b, int64_t vocab) {
  Tensor logits = model.forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);  // (B, T, vocab)
  return F::cross_entropy(logits.reshape({-1, vocab}), b.tgt_out.reshape({-1}),
                          F::CrossEntropyOptions().ignore_index(PAD));
}

}  // namespace

Lesson9 run_lesson9() {
  Lesson9 r;
  Generator gen(9);

  // ---- positions: permutation equivariance ------------------------------------------------------
  {
    const int64_t E = 16, T = 6;
    manual_seed(9);
    nn::TransformerEncoderLayer layer(nn::TransformerLayerOptions(E, 2).dim_feedforward(32).dropout(0.0));
    layer.to(kFloat64);
    layer.eval();
    nn::PositionalEncoding positions(E, 0.0, 64);
    positions.to(kFloat64);
    NoGradGuard no_grad;
    Tensor x = randn({1, T, E}, kFloat64, gen);
    Tensor perm = tensor({3, 0, 5, 1, 4, 2}).to(kInt64);  // a shuffle of the 6 tokens
    auto shuffle = [&](const Tensor& t) { return t.index_select(1, perm); };
    r.no_positions_equivariance = max_abs_diff(layer.forward(shuffle(x)), shuffle(layer.forward(x)));
    r.with_positions_equivariance =
        max_abs_diff(layer.forward(positions.forward(shuffle(x))), shuffle(layer.forward(positions.forward(x))));
  }

  // ---- the causal mask ---------------------------------------------------------------------------
  {
    const int64_t E = 16, T = 6;
    manual_seed(9);
    nn::TransformerEncoderLayer layer(nn::TransformerLayerOptions(E, 2).dim_feedforward(32).dropout(0.0));
    layer.to(kFloat64);
    layer.eval();
    NoGradGuard no_grad;
    Tensor x = randn({1, T, E}, kFloat64, gen);
    Tensor changed = x.clone();
    changed.select(1, T - 1).copy_(randn({1, E}, kFloat64, gen).squeeze(0));  // a different last token
    auto first_output = [&](const Tensor& input, bool causal) { return layer.forward(input, {}, {}, causal).select(1, 0); };
    r.causal_leak = max_abs_diff(first_output(x, true), first_output(changed, true));
    r.no_causal_leak = max_abs_diff(first_output(x, false), first_output(changed, false));
  }

  // ---- the small seq2seq model: one batch, learning rates, gradient norms --------------------------
  SmallSeq2Seq o;
  o.steps = 150;
  r.vocab = o.vocab;
  {
    manual_seed(1);
    Seq2SeqModel model(config_of(o));
    Generator data(2);
    const Batch one = make_batch(Task::Copy, o.batch, o.seq_len, o.vocab, data);
    // Gradient norms at initialisation, by part of the model.
    model.train();
    batch_loss(model, one, o.vocab).backward();
    // The embedding, each encoder and decoder layer, and the output layer.
    const std::regex part(R"(embed|generator|transformer\.(encoder|decoder)\.layers\.\d+)");
    for (const auto& [name, module] : model.named_modules()) {
      if (!std::regex_match(name, part)) continue;
      double squares = 0.0;
      for (const Tensor& p : module->parameters())
        if (p.grad().defined()) squares += std::pow(norm(p.grad()), 2);
      r.gradient_norms.emplace_back(name, std::sqrt(squares));
    }
    // Overfit that one batch.
    optim::Adam opt(model.parameters(), optim::AdamOptions(1.0).beta1(0.9).beta2(0.98).eps(1e-9));
    optim::NoamLR schedule(opt, o.d_model, o.warmup);
    for (int64_t step = 0; step < o.steps; ++step) {
      Tensor loss = batch_loss(model, one, o.vocab);
      if (step == 0) r.one_batch_loss_start = loss.item();
      opt.zero_grad();
      loss.backward();
      opt.step();
      schedule.step();
    }
    NoGradGuard no_grad;
    r.one_batch_loss_end = batch_loss(model, one, o.vocab).item();
  }
  // The same model and batches with the recipe, and with the recipe's schedule less its warm-up.
  // In float64: float32 training amplifies the BLAS kernel's rounding (this figure moved from 0.03
  // to 0.2 between kernels), float64 keeps it a property of the recipe. The figure is the mean loss
  // of the last 10 steps, steadier than one batch's.
  for (bool no_warmup : {false, true}) {
    SmallSeq2Seq recipe = o;
    if (no_warmup) recipe.warmup = 1;
    manual_seed(1);
    Seq2SeqModel model(config_of(recipe));
    model.to(kFloat64);
    Generator data(3);
    double last = 0.0, first_rate = 0.0, peak_rate = 0.0;
    // train()'s loop, with the rates recorded; the schedule sets the rate (Adam's own is replaced).
    optim::Adam opt(model.parameters(), optim::AdamOptions().beta1(0.9).beta2(0.98).eps(1e-9));
    optim::NoamLR schedule(opt, recipe.d_model, recipe.warmup);
    model.train();
    for (int64_t step = 0; step < recipe.steps; ++step) {
      const Batch b = make_batch(Task::Copy, recipe.batch, recipe.seq_len, recipe.vocab, data);
      Tensor loss = batch_loss(model, b, recipe.vocab);
      if (step >= recipe.steps - 10) last += loss.item() / 10.0;
      if (step == 0) first_rate = opt.lr();
      peak_rate = std::max(peak_rate, opt.lr());
      opt.zero_grad();
      loss.backward();
      opt.step();
      schedule.step();
    }
    (no_warmup ? r.no_warmup_loss : r.recipe_loss) = last;
    (no_warmup ? r.no_warmup_rates : r.recipe_rates) = {first_rate, peak_rate};
  }
  return r;
}

void print(const Lesson9& r) {
  fmt::print("Lesson 9: my Transformer doesn't learn. A checklist, each item measured.\n\n");

  const bool overfits = r.one_batch_loss_end < 0.1 * r.one_batch_loss_start;
  fmt::print("1. Overfit one batch first. The small seq2seq model of lesson 4 on one fixed batch of copy:\n");
  const double uniform = std::log(static_cast<double>(r.vocab));
  const bool starts_near_uniform = std::abs(r.one_batch_loss_start - uniform) < 0.25 * uniform;
  fmt::print("   loss {:.3f} at the start, against ln {} = {:.3f} for a uniform guess over its {} classes: {}\n",
             r.one_batch_loss_start, r.vocab, uniform, r.vocab,
             starts_near_uniform ? "the output starts near uniform, as it should."
                                 : "far from it: the logits start too large or too small (initialisation, scale).");
  fmt::print("   {:.4f} after 150 steps: {}\n", r.one_batch_loss_end,
             overfits ? "it can learn; if yours cannot, look for a bug before tuning anything."
                      : "it does not overfit one batch: a bug, not a tuning problem.");

  fmt::print("\n2. Positions. An encoder layer (float64) fed its 6 tokens shuffled:\n");
  fmt::print("   without positions  max |f(P·x) - P·f(x)| = {:.1e}   ({})\n", r.no_positions_equivariance,
             r.no_positions_equivariance < 1e-12 ? "the same outputs, shuffled: it cannot see order"
                                                 : "not equivariant");
  fmt::print("   with sinusoidal positions added             {:.3f}\n", r.with_positions_equivariance);
  fmt::print("   Attention and the feed-forward treat the tokens as a set; only the positions you add tell\n");
  fmt::print("   \"ab\" from \"ba\". A task whose answer depends on the input's order (copy, reverse) cannot be\n");
  fmt::print("   learnt without them (lesson 11 trains reverse with none); sort's answer does not depend on it.\n");

  fmt::print("\n3. The causal mask. How far output 0 moves when the last input token changes:\n");
  fmt::print("   is_causal = true: {:.1e}    is_causal = false: {:.3f}\n", r.causal_leak, r.no_causal_leak);
  fmt::print("   Without the mask a decoder in training can read the token it must predict from its input,\n");
  fmt::print("   which greedy decoding never has. And check which way a bool mask reads (true = masked out\n");
  fmt::print("   here and in nn.MultiheadAttention; lesson 5).\n");

  fmt::print("\n4. The learning rate's warm-up. The same model and batches of copy, 150 steps (float64),\n");
  fmt::print("   the mean loss of the last 10:\n");
  fmt::print("   the paper's schedule (factor 1, warm-up 100): loss {:.4f}   (rate {:.2g} at step 1, at most {:.2g})\n",
             r.recipe_loss, r.recipe_rates[0], r.recipe_rates[1]);
  fmt::print("   the same schedule, no warm-up:               loss {:.4f}   (rate {:.2g} at step 1, at most {:.2g})\n",
             r.no_warmup_loss, r.no_warmup_rates[0], r.no_warmup_rates[1]);
  fmt::print("   Without the warm-up the rate starts {:.0f} times as high, its peak {:.0f} times the recipe's, and\n",
             r.no_warmup_rates[0] / r.recipe_rates[0], r.no_warmup_rates[1] / r.recipe_rates[1]);
  fmt::print("   from step 100 on the two are the same. The loss: {}\n",
             r.no_warmup_loss > 2.0 * r.recipe_loss
                 ? "worse, so the harm is done in the first steps,\n   which Adam takes as large as the rate allows."
                 : "no worse here.");

  fmt::print("\n5. Gradient norms by part of the model, at initialisation, one batch:\n");
  bool healthy = true;
  for (const auto& [part, n] : r.gradient_norms) {
    fmt::print("   {:<32} {:.4f}\n", part, n);
    healthy = healthy && std::isfinite(n) && n > 0.0;
  }
  fmt::print("   {}\n", healthy ? "None is zero or NaN: every part is reached by the loss."
                                : "A zero or NaN: that part is cut off from the loss, or poisoned.");

  fmt::print("\n6. Initialisation and tied weights: a hand-written per-head layer starts with other weights\n");
  fmt::print("   than MultiheadAttention (lesson 2 prints both), and a tied weight must be one tensor used\n");
  fmt::print("   twice, not a copy (lesson 6).\n");

  fmt::print("\nAnswer: check in this order: one batch, positions, masks, learning rate, gradients, init.\n");
}

}  // namespace lessons
