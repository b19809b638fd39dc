// Lesson 4: how do the heads start out different, and what keeps them different?
//
// Nothing in the architecture makes heads differ: the h heads of a layer compute the same
// function with different weights. So:
//   - the random initialisation is what makes them different: each head's W_Q_i, W_K_i, W_V_i
//     are independent draws;
//   - training keeps their weights apart, because each head gets the gradient of its own
//     weights, and different weights get different gradients;
//   - heads given identical weights (and identical columns of W_O) get identical gradients in
//     exact arithmetic. In float32, BLAS may round one head's columns differently from
//     another's (it depends on the kernel), so they come apart by ~1e-6 and no more.
//
// What to compare. A head's scores are x·W_Q_iᵀ·W_K_i·yᵀ (W_*_i as stored: (d_k, d_model)
// rows of in_proj_weight), so what sets them is the query-key product W_Q_iᵀ·W_K_i, not W_Q_i:
// W_Q_i → A·W_Q_i with W_K_i → A⁻ᵀ·W_K_i changes no score for any invertible A (a rotation
// inside the head, or simply -1). Likewise what a head adds to the output is set by the
// output-value product W_O_i·W_V_i (W_O_i: its d_k columns of W_O). The lesson compares the
// heads by those two products, and by the attention maps they produce on held-out inputs.
//
// The figures: mean pairwise cosine similarity between the heads of each attention layer, for
// three seq2seq models on the chosen task: freshly initialised, trained, and trained from
// identical heads. Whether trained heads become alike depends on the task: the answer printed
// follows the numbers.
#include <cblas.h>  // openblas_get_corename: the kernel the trained figures depend on
#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <functional>

#include "common/checkpoint.h"
#include "lessons/lessons.h"
#include "lessons/measure.h"
#include "seq2seq/model.h"
#include "seq2seq/tasks.h"

using namespace cppgrad;
using namespace seq2seq;
namespace F = cppgrad::nn::functional;

namespace lessons {

namespace {

std::vector<std::pair<std::string, std::shared_ptr<nn::MultiheadAttention>>> attention_layers(Seq2SeqModel& model) {
  std::vector<std::pair<std::string, std::shared_ptr<nn::MultiheadAttention>>> out;
  for (auto& [name, module] : model.named_modules())
    if (auto layer = std::dynamic_pointer_cast<nn::MultiheadAttention>(module)) out.emplace_back(name, layer);
  return out;
}

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

// The recipe of examples/seq2seq: Adam (0.9, 0.98, 1e-9) and the paper's warm-up then 1/√n
// schedule (here factor 1 and `warmup` steps: seq2seq defaults to 0.5 and 200, for its larger
// model). `after_step(n)` runs after step n (1-based), for measurements along the way.
void train(Seq2SeqModel& model, Task task, const Lesson4Options& o, Generator& data,
           const std::function<void(int64_t)>& after_step = {}) {
  optim::Adam opt(model.parameters(), optim::AdamOptions(1.0).beta1(0.9).beta2(0.98).eps(1e-9));
  optim::NoamLR schedule(opt, o.d_model, o.warmup);
  model.train();
  for (int64_t step = 0; step < o.steps; ++step) {
    Batch b = make_batch(task, o.batch, o.seq_len, o.vocab, data);
    Tensor logits = model.forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);  // (B, T, vocab)
    Tensor loss = F::cross_entropy(logits.reshape({-1, o.vocab}), b.tgt_out.reshape({-1}),
                                   F::CrossEntropyOptions().ignore_index(PAD));
    opt.zero_grad();
    loss.backward();
    opt.step();
    schedule.step();
    if (after_step) after_step(step + 1);
  }
  model.eval();
}

// Percentage of held-out sequences decoded exactly, up to and including <end>.
double accuracy(Seq2SeqModel& model, const Batch& held_out) {
  Tensor decoded = model.greedy_decode(held_out.src, held_out.src_pad, held_out.tgt_out.size(1));
  int64_t correct = 0;
  const int64_t B = held_out.src.size(0);
  for (int64_t b = 0; b < B; ++b) {
    bool same = true;
    for (int64_t t = 0; t < held_out.tgt_out.size(1); ++t) {
      const int64_t want = held_out.tgt_out.at<int64_t>({b, t});
      same = same && decoded.at<int64_t>({b, t}) == want;
      if (want == EOS) break;
    }
    correct += same;
  }
  return 100.0 * static_cast<double>(correct) / static_cast<double>(B);
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

ModelConfig config_of(const Lesson4Options& o) {
  ModelConfig c;
  c.vocab = o.vocab;
  c.d_model = o.d_model;
  c.heads = o.heads;
  c.layers = o.layers;
  c.ff = o.ff;
  // No dropout: attention dropout draws a different mask for each head, which would break
  // the identical heads' symmetry by chance. We want to see what the weights alone do.
  c.dropout = 0.0;
  c.max_len = o.seq_len + 2;
  return c;
}

// A `seq2seq --save` checkpoint: the model's sizes come from its metadata and tensor shapes.
std::shared_ptr<Seq2SeqModel> load_checkpoint(Lesson4Options& o, Task& task) {
  auto ckpt = nn::load_safetensors(o.checkpoint);
  auto number = [&](const std::string& key) {
    CPPGRAD_CHECK(ckpt.metadata.count(key), "lesson 4: {} has no '{}' in its metadata (not from seq2seq --save?)",
                  o.checkpoint, key);
    return std::stoll(ckpt.metadata.at(key));
  };
  task = parse_task(ckpt.metadata.count("task") ? ckpt.metadata.at("task") : "copy");
  o.d_model = number("d_model");
  o.heads = number("heads");
  o.layers = number("layers");
  o.vocab = ckpt.at("model.embed.weight").size(0);
  o.ff = ckpt.at("model.transformer.encoder.layers.0.linear1.weight").size(0);
  auto model = std::make_shared<Seq2SeqModel>(config_of(o));
  model->load_state_dict(examples::under_prefix("model.", ckpt.tensors));
  return model;
}

}  // namespace

Lesson4 run_lesson4(const Lesson4Options& options) {
  Lesson4 r;
  r.options = options;
  Lesson4Options& o = r.options;
  r.blas_kernel = openblas_get_corename();
  r.threads = get_num_threads();
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

  // The same initial weights, but every head a copy of head 0; the same training data. How far
  // apart the copies are, measured at steps 0 (the copy), 1, 3, 10, 30, ... and the last.
  manual_seed(o.seed);
  auto twins = std::make_shared<Seq2SeqModel>(config_of(o));
  make_heads_identical(*twins);
  auto twins_apart = [&](int64_t step) {
    Lesson4::Apart apart{step};
    for (auto& [name, layer] : attention_layers(*twins)) {
      for (int64_t i = 1; i < layer->options.num_heads(); ++i) {
        auto [weights, key_bias] = head_apart(*layer, i);
        apart.weights = worst_of(apart.weights, weights);
        apart.key_bias = worst_of(apart.key_bias, key_bias);
      }
      r.identical_heads_weight_size =
          std::max(r.identical_heads_weight_size, layer->in_proj_weight.abs().max().item());
    }
    r.identical_heads_apart.push_back(apart);
  };
  twins_apart(0);
  Generator data(o.seed + 1);
  train(*twins, task, o, data, [&](int64_t step) {
    bool checkpoint = step == o.steps;
    for (int64_t at = 1; at < o.steps; at *= 10) checkpoint = checkpoint || step == at || step == 3 * at;
    if (checkpoint) twins_apart(step);
  });
  r.identical_start = measure(*twins, held_out, task);

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

  // Must d_model split evenly into h heads? Here, yes: the split is a reshape of the fused
  // projection's d_model outputs into (h, d_k).
  try {
    nn::MultiheadAttention(30, 4);
  } catch (const Error& e) {
    r.indivisible_error = e.what();
  }
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
  fmt::print("and 200 steps of training turn that into different weights); the conclusions do not.\n");
  fmt::print("Measured on {} held-out sequences of up to {} symbols.\n\n", o.held_out, o.seq_len);

  fmt::print("1. What to compare. A head's score is x·W_Q_iᵀ·W_K_i·yᵀ, so W_Q_i alone does not fix it.\n");
  fmt::print("   Head 0 of a float64 layer with its W_Q and W_K (and their biases) negated:\n");
  fmt::print("     cosine(W_Q_0, -W_Q_0)                   = {:+.3f}\n", r.negated_w_q_cosine);
  fmt::print("     cosine of W_Q_0ᵀ·W_K_0 before and after = {:+.3f}\n", r.negated_query_key_cosine);
  fmt::print("     largest change in its attention weights = {:.3g}, in the layer's output = {:.3g}\n",
             r.negated_weights_diff, r.negated_output_diff);
  fmt::print("   So the heads are compared here by their query-key products W_Q_iᵀ·W_K_i, their\n");
  fmt::print("   output-value products W_O_i·W_V_i, and the attention maps they produce.\n\n");

  fmt::print("2. Mean pairwise cosine between the heads of a layer (1 = copies, 0 = unrelated), averaged\n");
  fmt::print("   over the model's {} attention layers:\n", at_init.layers.size());
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

  fmt::print("\n3. Heads that start identical. Largest difference from head 0 (weights up to {:.2f}):\n",
             r.identical_heads_weight_size);
  fmt::print("     step   every weight but the key bias   the key bias\n");
  for (const auto& a : r.identical_heads_apart)
    fmt::print("     {:>4}   {:>29.3g}   {:>12.3g}\n", a.step, a.weights, a.key_bias);

  const auto& last = r.identical_heads_apart.back();
  const auto& first_step = r.identical_heads_apart.size() > 1 ? r.identical_heads_apart[1] : last;
  fmt::print("\nWhat the figures say:\n");
  fmt::print("  - The random initialisation makes the heads different: independent draws give query-key\n");
  fmt::print("    products with cosine {:.3f} and output-value products with cosine {:.3f}.\n", at_init.query_key,
             at_init.output_value);
  fmt::print("  - W_Q_i alone is the wrong thing to compare: negating W_Q and W_K of a head turns W_Q's\n");
  fmt::print("    cosine to {:.0f} and changes no score. (The heads' W_Q_i cosine after training, {:.3f},\n",
             r.negated_w_q_cosine, trained.w_q);
  fmt::print("    cannot tell whether they became alike; the products can.)\n");
  fmt::print("  - What training did on the {} task, layer by layer:\n", o.task);
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
  fmt::print("    Nothing in the loss asks heads to differ: they converge where the task has one job for\n");
  fmt::print("    them all and go apart where it has several. Random starts keep them from being copies.\n");
  fmt::print("  - Heads that start identical get identical gradients in exact arithmetic. In float32, BLAS\n");
  fmt::print("    may round one head's columns differently from another's: with this kernel they are\n");
  fmt::print("    {:.2g} apart after one step and {:.2g} after {} (0 with a kernel that rounds every head\n",
             first_step.weights, last.weights, last.step);
  fmt::print("    alike), beside weights up to {:.2f}; their maps' cosine is 1 - {:.1g}. The gap grows while\n",
             r.identical_heads_weight_size, 1.0 - r.identical_start.attention);
  fmt::print("    the learning rate is high, then stops (with --steps 2000: 6e-06 at step 300, no more\n");
  fmt::print("    by 2000): training does not amplify rounding into different heads. They stay copies.\n");
  fmt::print("    The one exception is the key bias, {:.2g} apart: it changes no score, so its true\n",
             last.key_bias);
  fmt::print("    gradient is 0, and Adam, which divides a gradient by its own size, turns the rounding\n");
  fmt::print("    noise into full-size steps. It still changes nothing the model computes.\n");
  fmt::print("    Attention dropout (off here) draws a different mask per head and would break the symmetry.\n");
  fmt::print("  - Must d_model split evenly into h heads? Here, yes, because the split is a reshape:\n");
  fmt::print("    MultiheadAttention(30, 4) says \"{}\".\n", r.indivisible_error);
  fmt::print("    The paper's d_k = d_model / h keeps the parameters (lesson 3 counts them) and the\n");
  fmt::print("    multiply-adds the same for any h: h heads of d_k columns do the work of one of d_model.\n");

  const Diversity::Layer* cross = nullptr;
  for (size_t i = 0; i < trained.layers.size(); ++i)
    if (trained.layers[i].name.find("multihead_attn") != std::string::npos) cross = &trained.layers[i];
  fmt::print("\nAnswer: randomness at initialisation makes the heads different; heads that start the same\n");
  fmt::print("stay the same, up to float32 rounding. Whether trained heads become alike is the task's\n");
  if (cross != nullptr) {
    const auto& a = at_init.layers[static_cast<size_t>(cross - trained.layers.data())];
    const bool alike = cross->query_key > a.query_key + 0.2 && cross->attention > a.attention;
    fmt::print("doing: on {}, the cross-attention heads' query-key products went {:.2f} -> {:.2f} and their\n", o.task,
               a.query_key, cross->query_key);
    fmt::print("maps {:.2f} -> {:.2f}, so {}.\n", a.attention, cross->attention,
               alike ? "they partly converged on one job" : "they did not converge on one job");
  } else {
    fmt::print("doing.\n");
  }
}

}  // namespace lessons
