// Lesson 4: how do the heads start out different, and what keeps them different?
//
// Nothing in the architecture makes heads differ: the h heads of a layer compute the same
// function with different weights. So:
//   - the random initialisation is what makes them different: each head's W_Q_i, W_K_i, W_V_i
//     are independent draws;
//   - training keeps their weights apart, because each head gets the gradient of its own
//     weights, and different weights get different gradients;
//   - heads given identical weights (and identical columns of W_O) get identical gradients at
//     every step and stay copies forever: the symmetry is never broken.
// Different weights do not promise different behaviour, though: whether the heads end up
// attending to different things depends on whether the task gives them different jobs.
//
// The figures: mean pairwise cosine similarity between the heads of each attention layer, of
// their W_Q_i and of their attention maps on held-out sequences, for three seq2seq models on
// the copy task: freshly initialised, trained, and trained from identical heads.
#include <fmt/core.h>

#include <chrono>
#include <cmath>

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

// Head i's W_Q_i: rows [i·d_k, (i+1)·d_k) of the fused projection, (d_k, d_model).
Tensor w_q_of_head(const nn::MultiheadAttention& layer, int64_t i) {
  return layer.in_proj_weight.narrow(0, i * layer.head_dim, layer.head_dim);
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

// The paper's recipe, as examples/seq2seq does it: Adam (0.9, 0.98, 1e-9), warm-up then 1/√n.
void train(Seq2SeqModel& model, Task task, const Lesson4Options& o, Generator& data) {
  optim::Adam opt(model.parameters(), optim::AdamOptions(1.0).beta1(0.9).beta2(0.98).eps(1e-9));
  optim::NoamLR schedule(opt, o.d_model, o.warmup);
  model.train();
  for (int64_t step = 0; step < o.steps; ++step) {
    Batch b = make_batch(task, o.batch, o.seq_len, o.vocab, data);
    Tensor logits = model.forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);  // (B, T, vocab)
    Tensor loss = F::cross_entropy(logits.reshape({-1, o.vocab}), b.tgt_out.reshape({-1}), {.ignore_index = PAD});
    opt.zero_grad();
    loss.backward();
    opt.step();
    schedule.step();
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
    std::vector<Tensor> maps, w_q;
    for (int64_t i = 0; i < H; ++i) {
      maps.push_back(weights.select(1, i) * rows);  // (B, T, S)
      w_q.push_back(w_q_of_head(*layer, i));
    }
    d.layers.push_back({name, mean_pairwise_cosine(w_q), mean_pairwise_cosine(maps)});
    d.w_q += d.layers.back().w_q / n_layers;
    d.attention += d.layers.back().attention / n_layers;
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
  manual_seed(o.seed);
  auto twins = std::make_shared<Seq2SeqModel>(config_of(o));
  make_heads_identical(*twins);
  Generator data(o.seed + 1);
  train(*twins, task, o, data);
  r.identical_start = measure(*twins, held_out, task);
  for (auto& [name, layer] : attention_layers(*twins))
    for (int64_t i = 1; i < layer->options.num_heads(); ++i) {
      const double apart = max_abs_diff(w_q_of_head(*layer, i), w_q_of_head(*layer, 0));
      r.identical_heads_apart = worst_of(r.identical_heads_apart, apart);
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

void print(const Lesson4& r) {
  const auto& o = r.options;
  const auto& at_init = r.at_init;
  const auto& trained = r.trained;
  fmt::print("Lesson 4: how do the heads start out different, and what keeps them different?\n\n");
  fmt::print("seq2seq model: d_model {}, {} heads, {}+{} layers (trained here without dropout).\n", o.d_model, o.heads,
             o.layers, o.layers);
  fmt::print("Trained model: {}.\n", r.trained_on);
  fmt::print("Measured on {} held-out sequences of up to {} symbols.\n\n", o.held_out, o.seq_len);
  fmt::print("Mean pairwise cosine similarity between the heads of a layer (1 = copies, 0 = unrelated),\n");
  fmt::print("averaged over the model's {} attention layers:\n", at_init.layers.size());
  fmt::print("                                  W_Q_i   attention maps   largest weight   accuracy\n");
  auto row = [](const char* what, const Diversity& d) {
    fmt::print("  {:<28} {:>7.3f}   {:>14.3f}   {:>14.3f}   {:>7.1f}%\n", what, d.w_q, d.attention, d.largest_weight,
               d.accuracy);
  };
  row("at initialisation", at_init);
  row("after training", trained);
  row("trained from identical heads", r.identical_start);
  fmt::print("Layer by layer (W_Q_i, attention maps), at initialisation -> after training:\n");
  for (size_t i = 0; i < at_init.layers.size() && i < trained.layers.size(); ++i)
    fmt::print("  {:<44} {:>6.3f} -> {:>6.3f}   {:>5.3f} -> {:>5.3f}\n", at_init.layers[i].name, at_init.layers[i].w_q,
               trained.layers[i].w_q, at_init.layers[i].attention, trained.layers[i].attention);
  if (o.task == "copy") {
    auto list = [](const std::vector<double>& v) {
      std::string s;
      for (double x : v) s += fmt::format(" {:.2f}", x);
      return s;
    };
    fmt::print("Cross-attention: the weight each head puts on the source symbol being copied\n");
    fmt::print("  at initialisation:{}\n  after training:   {}\n", list(at_init.copied_symbol_weight),
               list(trained.copied_symbol_weight));
  }
  fmt::print("Identical heads after training: largest |W_Q_i - W_Q_0| = {:.3g}.\n", r.identical_heads_apart);
  if (r.projections_moved >= 0)
    fmt::print("Training moved W_Q, W_K, W_V by {:.0f}% of their initial size.\n", 100.0 * r.projections_moved);

  fmt::print("\nWhat the figures say:\n");
  fmt::print("  - The random initialisation makes the heads different: independent draws of W_Q_i are\n");
  fmt::print("    nearly orthogonal (cosine {:.3f}).\n", at_init.w_q);
  fmt::print("  - Training does not pull them together: each head follows the gradient of its own weights,\n");
  if (r.projections_moved >= 0)
    fmt::print("    and after moving them by {:.0f}% of their size the cosine is still {:.3f}.\n",
               100.0 * r.projections_moved, trained.w_q);
  else
    fmt::print("    and after training the cosine is still {:.3f}.\n", trained.w_q);
  fmt::print("  - Heads that start identical get identical gradients at every step and stay identical to the\n");
  fmt::print("    last bit (cosine {:.3f}, difference {:.3g}). Nothing else breaks the symmetry here (attention\n",
             r.identical_start.w_q, r.identical_heads_apart);
  fmt::print("    dropout, which draws a different mask for each head, would; it is off), and h identical\n");
  fmt::print("    heads compute what one head computes.\n");
  fmt::print("  - Different weights do not promise different behaviour. At initialisation every head spreads\n");
  fmt::print("    its attention nearly evenly (largest weight {:.2f}; a perfectly even spread gives {:.2f}),\n",
             at_init.largest_weight, at_init.even_weight);
  fmt::print("    so the maps look alike ({:.2f}). After training they are sharper ({:.2f}) and, on the copy\n",
             at_init.attention, trained.largest_weight);
  fmt::print("    task, even more alike ({:.2f}): there is one thing worth looking at, the symbol being\n",
             trained.attention);
  fmt::print("    copied, and every head learns to look at it. Heads end up doing different things only\n");
  fmt::print("    where the task gives them different jobs; nothing in the loss asks them to differ.\n");
  fmt::print("  - Must d_model split evenly into h heads? Here, yes, because the split is a reshape:\n");
  fmt::print("    MultiheadAttention(30, 4) says \"{}\".\n", r.indivisible_error);
  fmt::print("    The paper's d_k = d_model / h is a choice that keeps the cost and the parameters fixed\n");
  fmt::print("    (lesson 3).\n");
  fmt::print("\nAnswer: randomness at initialisation makes the heads different, and nothing in training\n");
  fmt::print("makes their weights alike again; heads that start the same stay the same.\n");
}

}  // namespace lessons
