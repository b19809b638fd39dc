// Lesson 4: how do the heads start out different, and what keeps them different?
//
// Nothing in the architecture makes heads differ: the h heads of a layer compute the same
// function with different weights. So:
//   - the random initialisation is what makes them different: each head's W_Q_i, W_K_i, W_V_i
//     are independent draws;
//   - training keeps their weights apart, because each head gets the gradient of its own
//     weights, and different weights get different gradients;
//   - heads given identical weights (and identical columns of W_O) get identical gradients in
//     exact arithmetic, so they stay copies. In float32, BLAS may round one head's columns
//     differently from another's (it depends on the kernel): a seed of 1e-8 to 1e-6, which
//     training may amplify into heads that differ. The lesson measures the gap along the way,
//     on as many seeds as --seeds asks, and says which happened.
//
// What to compare. A head's scores are x·W_Q_iᵀ·W_K_i·yᵀ (W_*_i as stored: (d_k, d_model)
// rows of in_proj_weight), so what sets them is the query-key product W_Q_iᵀ·W_K_i, not W_Q_i:
// W_Q_i → A·W_Q_i with W_K_i → A⁻ᵀ·W_K_i changes no score for any invertible A (a rotation
// inside the head, or simply -1). Likewise what a head adds to the output is set by the
// output-value product W_O_i·W_V_i (W_O_i: its d_k columns of W_O). The lesson compares the
// heads by those two products, and by the attention maps they produce on held-out inputs.
//
// The figures: mean pairwise cosine similarity between the heads of each attention layer, for
// three seq2seq models on the chosen task: freshly initialised (the baseline: what unrelated
// heads score), trained, and trained from identical heads; and the held-out accuracy of random
// and identical starts, which is what diversity buys or not. Every conclusion printed is chosen
// from the numbers measured.
#include <cblas.h>  // openblas_get_corename: the kernel the trained figures depend on
#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <functional>

#include "common/cli.h"
#include "lessons/lessons.h"
#include "lessons/measure.h"
#include "lessons/training.h"
#include "seq2seq/model.h"
#include "seq2seq/tasks.h"

using namespace cppgrad;
using namespace seq2seq;
namespace F = cppgrad::nn::functional;

namespace lessons {

namespace {

// Head i's block of projection `part` (0 = Q, 1 = K, 2 = V): rows [part·E + i·d_k, ...) of
// the fused in_proj_weight, (d_k, d_model), as stored (the paper's W_Q_i transposed).
Tensor head_block(const nn::MultiheadAttention& layer, int64_t part, int64_t i) {
  const int64_t E = layer.options.embed_dim(), d_k = layer.head_dim;
  return layer.in_proj_weight.narrow(0, part * E + i * d_k, d_k);
}
Tensor w_q_of_head(const nn::MultiheadAttention& layer, int64_t i) { return head_block(layer, 0, i); }

// What sets head i's scores: score(x, y) = x·W_Q_iᵀ·W_K_i·yᵀ (+ bias terms), so the
// (d_model, d_model) product W_Q_iᵀ·W_K_i. Computed in float64.
Tensor query_key(const nn::MultiheadAttention& layer, int64_t i) {
  return head_block(layer, 0, i).detach().to(kFloat64).t().matmul(head_block(layer, 1, i).detach().to(kFloat64));
}

// What head i adds to the output for the values it attends to: y·(W_O_i·W_V_i)ᵀ, with W_O_i
// its d_k columns of out_proj.weight (d_model, d_k). Computed in float64.
Tensor output_value(const nn::MultiheadAttention& layer, int64_t i) {
  const int64_t d_k = layer.head_dim;
  Tensor w_o = layer.out_proj->weight.narrow(1, i * d_k, d_k).detach().to(kFloat64);  // (d_model, d_k)
  return w_o.matmul(head_block(layer, 2, i).detach().to(kFloat64));                  // (d_model, d_model)
}

// The largest difference between head i's parameters and head 0's: {everything that shapes
// the output, the key bias}. The key bias adds q·b_K to every score of a row alike, which
// softmax ignores, so its gradient is 0 in exact arithmetic and only rounding noise reaches it.
std::pair<double, double> head_apart(const nn::MultiheadAttention& layer, int64_t i) {
  const int64_t E = layer.options.embed_dim(), d_k = layer.head_dim;
  auto bias = [&](int64_t part, int64_t head) { return layer.in_proj_bias.narrow(0, part * E + head * d_k, d_k); };
  double weights = max_abs_diff(layer.out_proj->weight.narrow(1, i * d_k, d_k), layer.out_proj->weight.narrow(1, 0, d_k));
  for (int64_t part = 0; part < 3; ++part)
    weights = worst_of(weights, max_abs_diff(head_block(layer, part, i), head_block(layer, part, 0)));
  for (int64_t part : {0, 2}) weights = worst_of(weights, max_abs_diff(bias(part, i), bias(part, 0)));
  return {weights, max_abs_diff(bias(1, i), bias(1, 0))};
}

// Makes every head of every attention layer a copy of head 0: its rows of W_Q, W_K, W_V and
// their biases, and its columns of W_O (what the head's output is multiplied by).
void make_heads_identical(Seq2SeqModel& model) {
  NoGradGuard no_grad;
  for (auto& [name, layer] : attention_layers(model)) {
    const int64_t E = layer->options.embed_dim(), d_k = layer->head_dim, H = layer->options.num_heads();
    for (int64_t part = 0; part < 3; ++part)  // Q, K, V
      for (int64_t i = 1; i < H; ++i) {
        layer->in_proj_weight.narrow(0, part * E + i * d_k, d_k).copy_(layer->in_proj_weight.narrow(0, part * E, d_k));
        layer->in_proj_bias.narrow(0, part * E + i * d_k, d_k).copy_(layer->in_proj_bias.narrow(0, part * E, d_k));
      }
    for (int64_t i = 1; i < H; ++i)
      layer->out_proj->weight.narrow(1, i * d_k, d_k).copy_(layer->out_proj->weight.narrow(1, 0, d_k));
  }
}

Diversity measure(Seq2SeqModel& model, const Batch& held_out, Task task) {
  auto layers = attention_layers(model);
  for (auto& [name, layer] : layers) layer->store_attention = true;
  {
    NoGradGuard no_grad;
    model.eval();
    model.forward(held_out.src, held_out.tgt_in, held_out.src_pad, held_out.tgt_pad);
  }
  // Padded positions are not queries of anything: leave their rows out. Encoder rows are
  // source positions; decoder rows (self- and cross-attention) are target positions.
  Tensor src_rows = held_out.src_pad.logical_not().to(kFloat32).unsqueeze(-1);  // (B, S, 1)
  Tensor tgt_rows = held_out.tgt_pad.logical_not().to(kFloat32).unsqueeze(-1);  // (B, T, 1)
  Diversity d;
  const auto n_layers = static_cast<double>(layers.size());
  for (auto& [name, layer] : layers) {
    const Tensor& rows = name.find("encoder") != std::string::npos ? src_rows : tgt_rows;
    const Tensor& weights = layer->last_attention;  // (B, H, T, S)
    const int64_t H = layer->options.num_heads();
    std::vector<Tensor> maps, w_q, qk, ov;
    for (int64_t i = 0; i < H; ++i) {
      maps.push_back(weights.select(1, i) * rows);  // (B, T, S)
      w_q.push_back(w_q_of_head(*layer, i));
      qk.push_back(query_key(*layer, i));
      ov.push_back(output_value(*layer, i));
    }
    const Diversity::Layer& l = d.layers.emplace_back(Diversity::Layer{
        name, mean_pairwise_cosine(w_q), mean_pairwise_cosine(qk), mean_pairwise_cosine(ov), mean_pairwise_cosine(maps)});
    d.w_q += l.w_q / n_layers;
    d.query_key += l.query_key / n_layers;
    d.output_value += l.output_value / n_layers;
    d.attention += l.attention / n_layers;
    // The largest weight of each real query row, averaged; and the same for an even spread over
    // the keys the row can see (1 / their number; softmax gives every visible key some weight).
    Tensor row_mask = rows.squeeze(-1).unsqueeze(1);  // (B, 1, T)
    const double row_count = rows.sum().item() * static_cast<double>(H);
    Tensor largest = weights.max(-1).values * row_mask;                                 // (B, H, T)
    Tensor even = (1.0 / weights.gt(zeros({}, weights.dtype())).to(kFloat32).sum({-1})) * row_mask;  // (B, H, T)
    d.largest_weight += largest.sum().item() / row_count / n_layers;
    d.even_weight += even.sum().item() / row_count / n_layers;
    // On the copy task, target position t must output source symbol t: how much does each
    // head of the (last) cross-attention look there? The diagonal of each (T, S) map.
    if (task == Task::Copy && name.find("multihead_attn") != std::string::npos) {
      d.copied_symbol_weight.clear();
      const int64_t L = held_out.src.size(1);
      Tensor diagonal = eye(L, weights.dtype()).reshape({1, 1, L, L});
      Tensor on_diagonal = (weights * diagonal).sum({-1}) * row_mask;  // (B, H, T)
      for (int64_t i = 0; i < H; ++i)
        d.copied_symbol_weight.push_back(on_diagonal.select(1, i).sum().item() / rows.sum().item());
    }
    layer->store_attention = false;
    layer->last_attention = Tensor();
  }
  d.accuracy = accuracy(model, held_out);
  return d;
}

// A `seq2seq --save` checkpoint: the model's sizes come from its metadata and tensor shapes.
std::shared_ptr<Seq2SeqModel> load_checkpoint(Lesson4Options& o, Task& task) {
  auto ckpt = nn::load_safetensors(o.checkpoint);
  examples::require_writer(ckpt.metadata, "seq2seq", o.checkpoint);
  auto number = [&](const std::string& key) {
    return examples::metadata_count(ckpt.metadata, key, o.checkpoint, "seq2seq --save", 1);
  };
  task = parse_task(ckpt.metadata.count("task") ? ckpt.metadata.at("task") : "copy");
  o.d_model = number("d_model");
  o.heads = number("heads");
  o.layers = number("layers");
  o.vocab = ckpt.at("model.embed.weight").size(0);
  o.ff = ckpt.at("model.transformer.encoder.layers.0.linear1.weight").size(0);
  auto model = std::make_shared<Seq2SeqModel>(config_of(o));
  model->load_state_dict(under_prefix("model.", ckpt.tensors));
  return model;
}

// Trains a model of `seed` whose heads start as copies of head 0, measuring how far apart they
// are at steps 0 (the copy), 1, 3, 10, 30, ... and the last. `twins` receives the model.
Lesson4::SeedRun train_from_identical_heads(const Lesson4Options& o, uint64_t seed, Task task, const Batch& held_out,
                                            std::shared_ptr<Seq2SeqModel>& twins) {
  Lesson4::SeedRun run;
  run.seed = seed;
  manual_seed(seed);
  twins = std::make_shared<Seq2SeqModel>(config_of(o));
  make_heads_identical(*twins);
  auto measure_apart = [&](int64_t step) {
    Lesson4::Apart apart{step};
    for (auto& [name, layer] : attention_layers(*twins))
      for (int64_t i = 1; i < layer->options.num_heads(); ++i) {
        auto [weights, key_bias] = head_apart(*layer, i);
        apart.weights = worst_of(apart.weights, weights);
        apart.key_bias = worst_of(apart.key_bias, key_bias);
      }
    run.apart.push_back(apart);
  };
  measure_apart(0);
  Generator data(seed + 1);
  train(*twins, task, o, data, [&](int64_t step) {
    bool checkpoint = step == o.steps;
    for (int64_t at = 1; at < o.steps; at *= 10) checkpoint = checkpoint || step == at || step == 3 * at;
    if (checkpoint) measure_apart(step);
    return true;
  });
  run.identical_accuracy = accuracy(*twins, held_out);
  return run;
}

}  // namespace

Lesson4 run_lesson4(const Lesson4Options& options) {
  Lesson4 r;
  r.options = options;
  Lesson4Options& o = r.options;
  r.blas_kernel = openblas_get_corename();
  r.threads = get_num_threads();
  r.copies = run_lesson4_copies();
  Task task = parse_task(o.task);
  std::shared_ptr<Seq2SeqModel> trained;
  if (!o.checkpoint.empty()) {
    trained = load_checkpoint(o, task);
    r.trained_on = fmt::format("{} ({} task)", o.checkpoint, task_name(task));
  }
  Generator held_out_gen(o.seed + 1000);  // never used for training
  const Batch held_out = make_batch(task, o.held_out, o.seq_len, o.vocab, held_out_gen);

  // Freshly initialised, then trained (unless the checkpoint is the trained model).
  manual_seed(o.seed);
  auto fresh = std::make_shared<Seq2SeqModel>(config_of(o));
  r.at_init = measure(*fresh, held_out, task);
  if (!trained) {
    std::vector<Tensor> initial;
    for (auto& [name, layer] : attention_layers(*fresh)) initial.push_back(layer->in_proj_weight.detach().clone());
    Generator data(o.seed + 1);
    train(*fresh, task, o, data);
    trained = fresh;
    r.trained_on = fmt::format("{} task, {} steps here", task_name(task), o.steps);
    // How far training moved the projections, relative to their size: all of W_Q, W_K, W_V.
    double moved = 0.0, size = 0.0;
    size_t i = 0;
    for (auto& [name, layer] : attention_layers(*fresh)) {
      moved += std::pow(norm(layer->in_proj_weight - initial[i]), 2);
      size += std::pow(norm(initial[i++]), 2);
    }
    r.projections_moved = std::sqrt(moved / size);
  }
  r.trained = measure(*trained, held_out, task);

  // The same initial weights, but every head a copy of head 0; the same training data.
  std::shared_ptr<Seq2SeqModel> twins;
  r.seed_runs.push_back(train_from_identical_heads(o, o.seed, task, held_out, twins));
  r.seed_runs.front().random_accuracy = r.trained.accuracy;
  r.identical_start = measure(*twins, held_out, task);
  r.seed_runs.front().identical_maps = r.identical_start.attention;
  for (auto& [name, layer] : attention_layers(*twins))
    r.identical_heads_weight_size = std::max(r.identical_heads_weight_size, layer->in_proj_weight.abs().max().item());

  // More seeds (--seeds): each trains a random start and an identical start on its own data.
  for (int64_t extra = 1; extra < o.seeds && o.checkpoint.empty(); ++extra) {
    const uint64_t seed = o.seed + static_cast<uint64_t>(extra);
    Generator gen(seed + 1000);
    const Batch seed_held_out = make_batch(task, o.held_out, o.seq_len, o.vocab, gen);
    Lesson4::SeedRun run = train_from_identical_heads(o, seed, task, seed_held_out, twins);
    run.identical_maps = measure(*twins, seed_held_out, task).attention;
    run.identical_accuracy = accuracy(*twins, seed_held_out);
    manual_seed(seed);
    Seq2SeqModel model(config_of(o));
    Generator data(seed + 1);
    train(model, task, o, data);
    run.random_accuracy = accuracy(model, seed_held_out);
    r.seed_runs.push_back(run);
  }

  // W_Q_i alone says little: negate head 0's W_Q and W_K (and their biases) in a float64 layer,
  // and every score stays the same, while W_Q_0's cosine with what it was is -1.
  {
    manual_seed(o.seed);
    nn::MultiheadAttention layer(o.d_model, o.heads);
    layer.to(kFloat64);
    Generator gen(o.seed);
    NoGradGuard no_grad;
    layer.in_proj_bias.copy_(randn({3 * o.d_model}, kFloat64, gen));  // nonzero, to be negated too
    Tensor x = randn({2, o.seq_len, o.d_model}, kFloat64, gen);
    layer.store_attention = true;
    Tensor out = layer.forward(x, x, x).output, weights = layer.last_attention;
    Tensor w_q = w_q_of_head(layer, 0).clone(), qk = query_key(layer, 0);
    const int64_t E = o.d_model, d_k = layer.head_dim;
    for (int64_t part : {0, 1}) {  // Q and K
      Tensor w = layer.in_proj_weight.narrow(0, part * E, d_k), b = layer.in_proj_bias.narrow(0, part * E, d_k);
      w.copy_(-w);
      b.copy_(-b);
    }
    Tensor out_negated = layer.forward(x, x, x).output;
    r.negated_w_q_cosine = cosine(w_q, w_q_of_head(layer, 0));
    r.negated_query_key_cosine = cosine(qk, query_key(layer, 0));
    r.negated_weights_diff = max_abs_diff(weights, layer.last_attention);
    r.negated_output_diff = max_abs_diff(out, out_negated);
  }

  // Must d_model split evenly into h heads? Only for the default d_k = d_model / h: the split is a
  // reshape of the fused projection's outputs into (h, d_k). A d_k of its own (head_dim) lifts it.
  try {
    nn::MultiheadAttention(30, 4);
  } catch (const Error& e) {
    r.indivisible_error = e.what();
  }
  nn::MultiheadAttention own_width(nn::MultiheadAttentionOptions(30, 4).head_dim(8));
  for (const Tensor& p : own_width.parameters()) r.own_width_parameters += p.numel();
  return r;
}

namespace {

// "became more alike (0.90 -> 0.96)": the words follow the numbers.
std::string change(double before, double after, double threshold) {
  const char* how = after > before + threshold   ? "became more alike"
                    : after < before - threshold ? "became less alike"
                                                 : "stayed about as alike";
  return fmt::format("{} ({:.2f} -> {:.2f})", how, before, after);
}

}  // namespace

void print(const Lesson4& r) {
  const auto& o = r.options;
  const auto& at_init = r.at_init;
  const auto& trained = r.trained;
  fmt::print("Lesson 4: how do the heads start out different, and what keeps them different?\n\n");
  fmt::print("seq2seq model: d_model {}, {} heads, {}+{} layers (trained here without dropout).\n", o.d_model, o.heads,
             o.layers, o.layers);
  fmt::print("Trained model: {}.\n", r.trained_on);
  fmt::print("BLAS kernel {}, {} thread(s): the trained figures depend on both (float32 rounding differs,\n",
             r.blas_kernel, r.threads);
  fmt::print("and {} steps of training can turn that into different weights); the conclusions below are\n", o.steps);
  fmt::print("chosen from the figures measured here.\n");
  fmt::print("Measured on {} held-out sequences of up to {} symbols.\n\n", o.held_out, o.seq_len);

  print(r.copies);
  fmt::print("2. What to compare. A head's score is x·W_Q_iᵀ·W_K_i·yᵀ, so W_Q_i alone does not fix it.\n");
  fmt::print("   Head 0 of a float64 layer with its W_Q and W_K (and their biases) negated:\n");
  fmt::print("     cosine(W_Q_0, -W_Q_0)                   = {:+.3f}\n", r.negated_w_q_cosine);
  fmt::print("     cosine of W_Q_0ᵀ·W_K_0 before and after = {:+.3f}\n", r.negated_query_key_cosine);
  fmt::print("     largest change in its attention weights = {:.3g}, in the layer's output = {:.3g}\n",
             r.negated_weights_diff, r.negated_output_diff);
  fmt::print("   So the heads are compared here by their query-key products W_Q_iᵀ·W_K_i, their\n");
  fmt::print("   output-value products W_O_i·W_V_i, and the attention maps they produce.\n\n");

  const double maps_baseline = at_init.attention;
  fmt::print("3. How alike the heads of a layer are: their mean pairwise cosine, averaged over the model's\n");
  fmt::print("   {} attention layers. 1 = copies. What unrelated heads score is the first row, independent\n",
             at_init.layers.size());
  fmt::print("   random heads: {:.2f} and {:.2f} for the weight products, but already {:.2f} for the maps,\n",
             at_init.query_key, at_init.output_value, maps_baseline);
  fmt::print("   because fresh maps are nearly even (largest weight {:.2f}, an even spread {:.2f}) and even\n",
             at_init.largest_weight, at_init.even_weight);
  fmt::print("   rows all look alike. So the maps column is read against {:.2f}, not against 0.\n", maps_baseline);
  fmt::print("                                  W_Q_i   W_Q_iᵀ·W_K_i   W_O_i·W_V_i   maps   largest weight   accuracy\n");
  auto row = [](const char* what, const Diversity& d) {
    fmt::print("  {:<28} {:>7.3f}   {:>12.3f}   {:>11.3f}   {:>4.2f}   {:>14.2f}   {:>7.1f}%\n", what, d.w_q, d.query_key,
               d.output_value, d.attention, d.largest_weight, d.accuracy);
  };
  row("at initialisation", at_init);
  row("after training", trained);
  row("trained from identical heads", r.identical_start);
  fmt::print("   Layer by layer, at initialisation -> after training:\n");
  fmt::print("  {:<44} {:>16}   {:>16}   {:>12}\n", "", "W_Q_iᵀ·W_K_i", "W_O_i·W_V_i", "maps");
  for (size_t i = 0; i < at_init.layers.size() && i < trained.layers.size(); ++i) {
    const auto &a = at_init.layers[i], &b = trained.layers[i];
    fmt::print("  {:<44} {:>6.3f} -> {:>6.3f}   {:>6.3f} -> {:>6.3f}   {:>4.2f} -> {:>4.2f}\n", a.name, a.query_key,
               b.query_key, a.output_value, b.output_value, a.attention, b.attention);
  }
  if (!trained.copied_symbol_weight.empty()) {
    auto list = [](const std::vector<double>& v) {
      std::string s;
      for (double x : v) s += fmt::format(" {:.2f}", x);
      return s;
    };
    fmt::print("   Cross-attention: the weight each head puts on the source symbol being copied\n");
    fmt::print("     at initialisation:{}\n     after training:   {}\n", list(at_init.copied_symbol_weight),
               list(trained.copied_symbol_weight));
  }
  if (r.projections_moved >= 0)
    fmt::print("   Training moved W_Q, W_K, W_V by {:.0f}% of their initial size.\n", 100.0 * r.projections_moved);

  const Lesson4::SeedRun& first = r.seed_runs.front();
  const auto& last = first.apart.back();
  fmt::print("\n4. Heads that start identical in this float32 model (seed {}): figures of rounding, which move\n",
             first.seed);
  fmt::print("   with the BLAS kernel and the thread count (section 1 is the mechanism, without them). Largest\n");
  fmt::print("   difference from head 0 (weights up to {:.2f}):\n", r.identical_heads_weight_size);
  fmt::print("     step   every weight but the key bias   the key bias\n");
  for (const auto& a : first.apart) fmt::print("     {:>4}   {:>29.3g}   {:>12.3g}\n", a.step, a.weights, a.key_bias);
  const double seed_gap = rounding_seed(first.apart);
  int64_t seed_step = 0;
  for (const auto& a : first.apart)
    if (seed_step == 0 && a.weights > 0) seed_step = a.step;
  switch (symmetry_of(first.apart)) {
    case Symmetry::ExactCopies:
      fmt::print("   With the {} kernel BLAS rounds every head's columns alike, which keeps that symmetry: after\n",
                 r.blas_kernel);
      fmt::print("   {} steps the heads are still exact copies, one head repeated {} times.\n", last.step, o.heads);
      break;
    case Symmetry::RoundingLevel:
      fmt::print("   With the {} kernel BLAS rounds some heads' columns differently: a gap of {:.2g} at step {},\n",
                 r.blas_kernel, seed_gap, seed_step);
      fmt::print("   {:.2g} at step {} ({:.0f} times the first), still at float32 rounding's scale beside weights\n",
                 last.weights, last.step, last.weights / seed_gap);
      fmt::print("   up to {:.2f}: training grows the gap, but has not yet made the heads compute different things{}.\n",
                 r.identical_heads_weight_size, o.steps < 2000 ? " (run longer, --steps 2000, to see whether it does)" : "");
      break;
    case Symmetry::Broken:
      fmt::print("   With the {} kernel BLAS rounds some heads' columns differently: a gap of {:.2g} at step {}.\n",
                 r.blas_kernel, seed_gap, seed_step);
      fmt::print("   Training amplified it to {:.3g} by step {} ({:.0f} times): the symmetry is broken, and the\n",
                 last.weights, last.step, last.weights / seed_gap);
      fmt::print("   heads are no longer exact copies (their maps' cosine 1 - {:.1g}, against {:.2f} for random heads).\n",
                 1.0 - first.identical_maps, maps_baseline);
      break;
  }
  if (last.key_bias > 0) {
    fmt::print("   The key bias, {:.2g} apart, is no exception: it changes no score, so its true gradient is 0,\n",
               last.key_bias);
    fmt::print("   and Adam, which divides a gradient by its own size, turns rounding noise into full-size steps\n");
    fmt::print("   that change nothing the model computes.");
  } else {
    fmt::print("   The key bias changes no score, so its true gradient is 0: here it stayed the same in every head.");
  }
  fmt::print(" (Attention dropout is off here;\n");
  fmt::print("   section 1 shows what it does to copies.)\n");

  fmt::print("\n5. Random start against identical start, {} seed(s), {} steps on {} each:\n", r.seed_runs.size(), o.steps,
             o.task);
  fmt::print("     seed   identical heads at step {:<5}   accuracy: random start   identical start   identical maps\n",
             o.steps);
  int64_t random_better = 0, identical_better = 0;
  std::vector<double> random, identical;  // accuracy per seed
  for (const auto& run : r.seed_runs) {
    const char* verdict = symmetry_of(run.apart) == Symmetry::ExactCopies     ? "exact copies"
                          : symmetry_of(run.apart) == Symmetry::RoundingLevel ? "rounding apart"
                                                                              : "broken apart";
    fmt::print("     {:>4}   {:>8.2g} ({:<14})   {:>21.1f}%   {:>14.1f}%   {:>14}\n", run.seed, run.apart.back().weights,
               verdict, run.random_accuracy, run.identical_accuracy, fmt::format("1 - {:.1g}", 1.0 - run.identical_maps));
    random_better += run.random_accuracy > run.identical_accuracy + 1.0;
    identical_better += run.identical_accuracy > run.random_accuracy + 1.0;
    random.push_back(run.random_accuracy);
    identical.push_back(run.identical_accuracy);
  }
  const double random_mean = mean(random), identical_mean = mean(identical);
  fmt::print("   Mean accuracy {:.1f}% from random heads, {:.1f}% from identical ones; random better on {} seed(s),\n",
             random_mean, identical_mean, random_better);
  fmt::print("   identical better on {} (by more than one point).\n", identical_better);

  fmt::print("\nWhat the figures say:\n");
  fmt::print("  - W_Q_i alone is the wrong thing to compare: negating W_Q and W_K of a head turns W_Q's\n");
  fmt::print("    cosine to {:.0f} and changes no score. (The heads' W_Q_i cosine after training, {:.3f},\n",
             r.negated_w_q_cosine, trained.w_q);
  fmt::print("    cannot tell whether they became alike; the products can.)\n");
  fmt::print("  - The random initialisation makes the heads different: independent draws give query-key\n");
  fmt::print("    products with cosine {:.3f} and output-value products with cosine {:.3f}.\n", at_init.query_key,
             at_init.output_value);
  fmt::print("  - What training did on the {} task, layer by layer (maps against their baseline):\n", o.task);
  for (size_t i = 0; i < at_init.layers.size() && i < trained.layers.size(); ++i) {
    const auto &a = at_init.layers[i], &b = trained.layers[i];
    fmt::print("      {}:\n        query-key products {}, maps {}\n", a.name,
               change(a.query_key, b.query_key, 0.1), change(a.attention, b.attention, 0.02));
  }
  if (!trained.copied_symbol_weight.empty()) {
    double least = 1.0;
    for (double w : trained.copied_symbol_weight) least = std::min(least, w);
    fmt::print("    On copy there is one thing worth looking at, the symbol being copied, and every\n");
    fmt::print("    cross-attention head learns to look there (each puts at least {:.2f} of its weight on it).\n",
               least);
  }
  fmt::print("    Nothing in the loss asks heads to differ; each follows the gradient of its own weights.\n");
  fmt::print("  - Must d_model split evenly into h heads? Only when each head's width d_k is d_model / h,\n");
  fmt::print("    the paper's choice and the default, because the split is then a reshape:\n");
  fmt::print("    MultiheadAttention(30, 4) says \"{}\".\n", r.indivisible_error);
  fmt::print("    The paper's d_k = d_model / h keeps the parameters (lesson 3 counts them) and the\n");
  fmt::print("    multiply-adds the same for any h: h heads of d_k columns do the work of one of d_model.\n");
  fmt::print("    A width of its own (head_dim, as Gemma's heads have) needs no division: the projections map\n");
  fmt::print("    d_model to h·d_k and back, so MultiheadAttention(30, 4) with head_dim 8 builds, with {}\n",
             r.own_width_parameters);
  fmt::print("    parameters (4·30·32 weights and 3·32 + 30 biases), and its cost now grows with h.\n");

  int64_t exact = 0, rounding = 0, broken = 0;
  for (const auto& run : r.seed_runs) {
    const Symmetry verdict = symmetry_of(run.apart);
    exact += verdict == Symmetry::ExactCopies;
    rounding += verdict == Symmetry::RoundingLevel;
    broken += verdict == Symmetry::Broken;
  }
  const auto& copies = r.copies;
  fmt::print("\nAnswer: nothing in the architecture makes heads differ. Heads that start as exact copies get\n");
  fmt::print("identical gradients and stay copies (section 1: {:.3g} apart after {} steps, under any kernel),\n",
             copies.starts.front().apart.back(), copies.steps);
  fmt::print("computing one head's function. What makes them differ is an asymmetry put in from outside, and\n");
  fmt::print("training grows a small one at its own rate (there {:.3g} times a step, whatever its size): the\n",
             growth_per_step(copies));
  fmt::print("default initialisation, which draws each head independently, and attention dropout, which\n");
  fmt::print("masks each head differently. Float32 rounding is one more such asymmetry, of a size that depends\n");
  fmt::print("on the BLAS kernel: on this seq2seq model, after {} steps on {} seed(s) with the {} kernel and\n", o.steps,
             r.seed_runs.size(), r.blas_kernel);
  fmt::print("{} thread(s), heads started identical stayed exact copies on {}, copies up to rounding on {} and\n",
             r.threads, exact, rounding);
  fmt::print("were pushed apart (a gap above 1e-3) on {}: a figure of this kernel, not of the model.\n", broken);
  std::string counts = fmt::format("random better on {} seed(s), identical on {}", random_better, identical_better);
  if (clearly_higher(random, identical))
    fmt::print("Random starts learned {} better, on every seed and by more than the seeds' spread: {:.1f}% against\n"
               "{:.1f}% from identical heads ({}).\n", o.task, random_mean, identical_mean, counts);
  else if (clearly_higher(identical, random))
    fmt::print("Identical heads learned {} better, on every seed and by more than the seeds' spread: {:.1f}% against\n"
               "{:.1f}% from random ones ({}).\n", o.task, identical_mean, random_mean, counts);
  else if (random.size() < 2)
    fmt::print("On {} at {} steps one seed has no spread, so neither start is named better: {:.1f}% from random\n"
               "heads, {:.1f}% from identical ones.\n", o.task, o.steps, random_mean, identical_mean);
  else
    fmt::print("On {} at {} steps neither start learned better both on every seed and beyond the seeds' spread:\n"
               "{:.1f}% from random heads, {:.1f}% from identical ones ({}).\n", o.task, o.steps, random_mean,
               identical_mean, counts);
  fmt::print("(Float32 accuracies, which move with the kernel and the threads{}.)\n",
             r.seed_runs.size() < 2 ? "; try --seeds 4" : "");
}

Symmetry symmetry_of(const std::vector<Lesson4::Apart>& apart) {
  const double last = apart.back().weights;
  if (last == 0.0) return Symmetry::ExactCopies;
  return last > 1e-3 ? Symmetry::Broken : Symmetry::RoundingLevel;
}

double rounding_seed(const std::vector<Lesson4::Apart>& apart) {
  for (const auto& a : apart)
    if (a.weights > 0.0) return a.weights;
  return 0.0;
}

}  // namespace lessons
