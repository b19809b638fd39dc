// seq2seq: train an encoder-decoder Transformer to copy, reverse or sort sequences.
//
//   seq2seq                          # copy task, default model: 100% in 900 steps, under a minute
//   seq2seq --task reverse --steps 2000 --plot loss.svg --attention attn.svg
//   seq2seq --save run.safetensors   # ...later: seq2seq --resume run.safetensors --steps 3000
//
// Exit codes: 0 done; 2 refused options or input (a checkpoint that does not fit, a path that
// cannot be written), with one line on stderr; 3 out of memory.
#include <CLI/CLI.hpp>
#include <cmath>
#include <fmt/core.h>

#include "common/checkpoint.h"
#include "common/cli.h"
#include "common/progress.h"
#include "common/attention_grid.h"
#include "common/curves.h"
#include "seq2seq/model.h"
#include "seq2seq/tasks.h"

using namespace cppgrad;
using namespace seq2seq;
using cppgrad::nn::NamedTensors;
namespace F = cppgrad::nn::functional;

struct Options {
  std::string task = "copy";
  int64_t steps = 900, batch = 32, seq_len = 16, vocab = 16;
  ModelConfig model;
  // The factor of the paper's schedule. 1.0 peaks at 6.2e-3 and the held-out loss wanders (0.022
  // after 900 copy steps, 97.3% of sequences right); 0.5 reaches 0.003 and 100%.
  double lr = 0.5;
  int64_t warmup = 200;
  uint64_t seed = 0;
  int threads = 0;  // 0: all cores
  std::string save, resume, plot, attention;
  int64_t attention_example = -1;  // -1: the longest held-out example
  int64_t eval_every = 100, eval_size = 256, show = 5;
  // Decoding uses an exponential moving average of the weights (Polyak averaging, a cousin of
  // the paper's averaging of its last checkpoints): the last steps' noise moved the copy task's
  // held-out loss between 0.0014 and 0.0081 from one evaluation to the next.
  double average = 0.99;
  bool profile = false;
};

struct HeldOut {
  double loss;
  // The percentage of sequences whose every token, <end> included, is the most likely one given
  // the right tokens before it: exactly those greedy decoding gets right (it starts from the
  // same prefix and, token by token, extends it the same way).
  double accuracy;
};

static HeldOut held_out_eval(Seq2SeqModel& model, const Batch& data) {
  NoGradGuard no_grad;
  model.eval();
  Tensor logits = model.forward(data.src, data.tgt_in, data.src_pad, data.tgt_pad);
  model.train();
  const double loss =
      F::cross_entropy(logits.reshape({-1, model.config.vocab}), data.tgt_out.reshape({-1}), F::CrossEntropyOptions().ignore_index(PAD))
          .item();
  const auto predicted = logits.argmax(-1).to_vector<int64_t>(), expected = data.tgt_out.to_vector<int64_t>();
  const int64_t batch = data.tgt_out.size(0), length = data.tgt_out.size(1);
  int64_t right = 0;
  for (int64_t b = 0; b < batch; ++b) {
    bool all = true;
    for (int64_t t = b * length; t < (b + 1) * length; ++t)
      all = all && (expected[t] == PAD || predicted[t] == expected[t]);
    right += all;
  }
  return {loss, 100.0 * static_cast<double>(right) / static_cast<double>(batch)};
}

// The tokens of row `b` up to and including the first <end>.
static std::vector<int64_t> until_end(const Tensor& tokens, int64_t b) {
  std::vector<int64_t> out;
  for (int64_t t = 0; t < tokens.size(1); ++t) {
    int64_t tok = tokens.at<int64_t>({b, t});
    out.push_back(tok);
    if (tok == EOS) break;
  }
  return out;
}

static std::string show_tokens(const std::vector<int64_t>& tokens) {
  std::string s;
  for (int64_t t : tokens) {
    if (t == EOS || t == PAD) break;
    s += fmt::format("{}{}", s.empty() ? "" : " ", t - FIRST_SYMBOL);
  }
  return s;
}

static std::vector<std::string> token_labels(const Tensor& tokens, int64_t length) {
  std::vector<std::string> out;
  for (int64_t t = 0; t < length; ++t) {
    int64_t tok = tokens.at<int64_t>({0, t});
    out.push_back(tok == BOS ? "<s>" : tok == EOS ? "</s>" : std::to_string(tok - FIRST_SYMBOL));
  }
  return out;
}

// The held-out example to draw: the one asked for, or the first of the longest.
static int64_t attention_example(const Batch& data, int64_t asked) {
  if (asked >= 0) return asked;
  int64_t longest = 0;
  size_t longest_length = 0;
  for (int64_t b = 0; b < data.src.size(0); ++b)
    if (until_end(data.src, b).size() > longest_length) longest = b, longest_length = until_end(data.src, b).size();
  return longest;
}

// Every head of every attention layer on one held-out example, as a grid: a row per layer and
// kind of attention, a column per head.
static examples::AttentionGrid attention_grid(Seq2SeqModel& model, const Batch& data, int64_t example,
                                              const std::string& title, const std::string& how_chosen) {
  auto one_row = [&](const Tensor& t) { return t.narrow(0, example, 1); };
  const Batch one{one_row(data.src), one_row(data.tgt_in), one_row(data.tgt_out), one_row(data.src_pad),
                  one_row(data.tgt_pad)};
  const int64_t src_len = static_cast<int64_t>(until_end(one.src, 0).size());  // symbols and </s>
  const int64_t tgt_len = static_cast<int64_t>(until_end(one.tgt_out, 0).size());  // <s> and the answer
  std::vector<std::pair<std::string, std::shared_ptr<nn::MultiheadAttention>>> layers;
  for (auto& [name, module] : model.named_modules())
    if (auto attention = std::dynamic_pointer_cast<nn::MultiheadAttention>(module)) {
      attention->store_attention = true;
      layers.emplace_back(name, attention);
    }
  Tensor decoded;
  {
    NoGradGuard no_grad;
    model.eval();
    model.forward(one.src, one.tgt_in, one.src_pad, one.tgt_pad);
    for (auto& [name, attention] : layers) attention->store_attention = false;
    decoded = model.greedy_decode(one.src, one.src_pad, model.config.max_len - 1);
  }
  examples::AttentionGrid grid{
      title,
      {fmt::format("held-out example {} ({} symbols, {}): source {} · expected {} · decoded {}", example, src_len - 1,
                   how_chosen, show_tokens(until_end(one.src, 0)), show_tokens(until_end(one.tgt_out, 0)),
                   show_tokens(until_end(decoded, 0))),
       "rows: queries, the positions that look; columns: keys, the positions looked at; each row of a map sums to 1"},
      static_cast<int>(model.config.heads),
      {}};
  const auto src_labels = token_labels(one.src, src_len), tgt_labels = token_labels(one.tgt_in, tgt_len);
  for (auto& [name, attention] : layers) {
    const std::string where = name.substr(name.find("coder.") - 2);  // "encoder.layers.0.self_attn"
    const bool encoder = where.starts_with("encoder"), cross = where.find("multihead_attn") != std::string::npos;
    const size_t at = where.find("layers.") + 7;
    const std::string layer = where.substr(at, where.find('.', at) - at);  // "0"
    examples::AttentionRow row{fmt::format("{} · layer {}", encoder ? "encoder" : "decoder", layer),
                               encoder ? "self-attention" : cross ? "cross-attention" : "self-attention (causal)",
                               where,
                               encoder ? src_labels : tgt_labels,
                               encoder || cross ? src_labels : tgt_labels,
                               {}};
    Tensor w = attention->last_attention.select(0, 0);  // (H, T, S)
    for (int64_t h = 0; h < w.size(0); ++h)
      row.heads.push_back(w.select(0, h)
                              .narrow(0, 0, static_cast<int64_t>(row.queries.size()))
                              .narrow(1, 0, static_cast<int64_t>(row.keys.size()))
                              .to(kFloat64)
                              .contiguous()
                              .to_vector<double>());
    grid.rows.push_back(std::move(row));
    attention->last_attention = Tensor();
  }
  return grid;
}

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Train an encoder-decoder Transformer on a synthetic sequence task (copy, reverse, sort)."};
  app.add_option("--task", o.task, "copy, reverse or sort")->check(CLI::IsMember({"copy", "reverse", "sort"}));
  app.add_option("--steps", o.steps, "training steps in all (a resumed run continues up to this)")->check(CLI::Range(1, 100'000'000));
  app.add_option("--batch", o.batch, "sequences per step")->check(CLI::Range(1, 65536));
  app.add_option("--seq-len", o.seq_len, "longest source sequence, in symbols")->check(CLI::Range(1, 200));
  app.add_option("--vocab", o.vocab, "vocabulary size, including the 3 special tokens")->check(CLI::Range(4, 100000));
  app.add_option("--d-model", o.model.d_model, "model width d_model")->check(CLI::Range(1, 65536));
  app.add_option("--heads", o.model.heads, "attention heads (must divide d_model)")->check(CLI::Range(1, 1024));
  app.add_option("--layers", o.model.layers, "encoder layers, and as many decoder layers")->check(CLI::Range(1, 1000));
  app.add_option("--ff", o.model.ff, "feed-forward width")->check(CLI::Range(1, 1 << 20));
  app.add_option("--dropout", o.model.dropout, "dropout probability")->check(examples::number_in(0.0, 0.99));
  app.add_option("--lr", o.lr, "factor of the paper's schedule: lr = factor · d_model^-0.5 · min(n^-0.5, n · warmup^-1.5)")
      ->check(examples::number_in(1e-6, 1e3));
  app.add_option("--warmup", o.warmup, "warm-up steps of the schedule")->check(CLI::Range(1, 100'000'000));
  app.add_option("--seed", o.seed, "random seed (weights, data, dropout)")->check(examples::digits_only());
  app.add_option("--threads", o.threads, "threads for BLAS and cppgrad's loops (default: all cores)")->check(CLI::Range(1, 256));
  app.add_option("--save", o.save, "write a checkpoint (model, optimizer, schedule, step, RNG, averaged weights) at the end");
  app.add_option("--resume", o.resume, "continue from a checkpoint written by --save")->check(CLI::ExistingFile);
  app.add_option("--eval-every", o.eval_every, "steps between held-out evaluations")->check(CLI::Range(1, 100'000'000));
  app.add_option("--plot", o.plot, "write the train and held-out loss curves as SVG");
  app.add_option("--attention", o.attention, "write every head's attention for one held-out example as an SVG grid");
  app.add_option("--attention-example", o.attention_example,
                 "which held-out example --attention draws (default: the longest)")
      ->check(CLI::Range(int64_t{0}, o.eval_size - 1));
  app.add_option("--average", o.average, "decay of the moving average of the weights used for decoding (0: the last weights)")
      ->check(examples::number_in(0.0, 0.9999));
  app.add_flag("--profile", o.profile, "print the time per kernel kind of one training step (the 10th of this run)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    fmt::print(stderr, "seq2seq: {}\n", excerpt(e.what(), 400));
    return examples::kExitRefused;
  }

  try {
    // Everything that can be refused is refused before training starts.
    if (!o.save.empty()) examples::check_writable("--save", o.save);
    if (!o.plot.empty()) examples::check_writable("--plot", o.plot);
    if (!o.attention.empty()) examples::check_writable("--attention", o.attention);
    {
      // Parameters: embedding and output layer, 4 d² + 2 d·ff per encoder layer and 8 d² + 2 d·ff per
      // decoder layer; each float is kept 5 times (weights, gradient, Adam's two moments, the average).
      const double d = static_cast<double>(o.model.d_model), ff = static_cast<double>(o.model.ff);
      const double layers = static_cast<double>(o.model.layers), vocab = static_cast<double>(o.vocab);
      examples::check_memory("the model", 5.0 * (2.0 * vocab * d + layers * (12.0 * d * d + 4.0 * d * ff)));
    }
    if (o.threads > 0) set_num_threads(o.threads);
    o.model.vocab = o.vocab;
    o.model.max_len = o.seq_len + 2;
    const Task task = parse_task(o.task);
    manual_seed(o.seed);  // weights and dropout
    Generator data_gen(o.seed + 1);
    auto model = std::make_shared<Seq2SeqModel>(o.model);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1.0).beta1(0.9).beta2(0.98).eps(1e-9));
    optim::NoamLR schedule(opt, o.model.d_model, o.warmup, o.lr);
    optim::ExponentialMovingAverage average(model->parameters(), o.average);

    examples::Run run{*model, opt, schedule, data_gen, &average};
    examples::TrainingLog saved;
    if (!o.resume.empty()) {
      auto ckpt = nn::load_safetensors(o.resume);
      CPPGRAD_CHECK(ckpt.metadata.count("task") && ckpt.metadata.at("task") == o.task,
            "--resume: the checkpoint was trained on '{}', not '{}'",
            ckpt.metadata.count("task") ? excerpt(ckpt.metadata.at("task")) : "?", o.task);
      try {
        saved = examples::load_run(ckpt.tensors, run);
      } catch (const Error& e) {
        throw Error(fmt::format("--resume: {}: {}", excerpt(o.resume), e.what()));
      }
      fmt::print("resumed from {} at step {}\n", o.resume, saved.step);
    }
    int64_t step = saved.step;
    std::vector<std::pair<double, double>>& train_curve = saved.train_curve;
    std::vector<std::pair<double, double>>& eval_curve = saved.eval_curve;
    std::vector<std::pair<double, double>>& accuracy_curve = saved.accuracy_curve;

    Generator held_out_gen(o.seed + 1000003);  // never used for training data
    Batch held_out = make_batch(task, o.eval_size, o.seq_len, o.vocab, held_out_gen);
    fmt::print("task {} · {} parameters · d_model {} · {} heads · {}+{} layers · batch {} · length ≤ {} · {} threads\n",
               o.task, model->parameter_count(), o.model.d_model, o.model.heads, o.model.layers, o.model.layers,
               o.batch, o.seq_len, get_num_threads());

    examples::Progress progress(o.steps, step);
    double recent_loss = 0;
    int64_t recent_count = 0;
    model->train();
    const int64_t profiled_step = step + 10;  // after warm-up: caches and buffers are settled
    while (step < o.steps) {
      if (o.profile && step + 1 == profiled_step) {
        profile::set_enabled(true);
        profile::reset();
      }
      Batch b = make_batch(task, o.batch, o.seq_len, o.vocab, data_gen);
      Tensor logits = model->forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);  // (B, T, vocab)
      Tensor loss = F::cross_entropy(logits.reshape({-1, o.vocab}), b.tgt_out.reshape({-1}),
                                     F::CrossEntropyOptions().ignore_index(PAD));
      opt.zero_grad();
      loss.backward();
      opt.step();
      average.update();
      schedule.step();
      ++step;
      if (o.profile && step == profiled_step) {
        profile::set_enabled(false);
        progress.finish();
        fmt::print("\nprofile of step {} (batch {}, {} threads):\n{}\n", step, o.batch, get_num_threads(), profile::report());
      }

      double l = loss.item();
      recent_loss += l;
      ++recent_count;
      train_curve.emplace_back(static_cast<double>(step), l);
      const bool eval_now = step % o.eval_every == 0 || step == o.steps;
      std::optional<double> eval_loss;
      if (eval_now) {
        const HeldOut result = held_out_eval(*model, held_out);
        eval_loss = result.loss;
        eval_curve.emplace_back(static_cast<double>(step), result.loss);
        accuracy_curve.emplace_back(static_cast<double>(step), result.accuracy);
      }
      if (eval_now || step % 10 == 0) {
        progress.update(step, recent_loss / static_cast<double>(recent_count), opt.lr(),
                        recent_count * b.tgt_out.numel(), eval_now, eval_loss);
        recent_loss = 0;
        recent_count = 0;
      }
    }
    progress.finish();
    double train_seconds = progress.elapsed_seconds();

    // ---- held-out sequences, decoded greedily --------------------------------------------------
    model->eval();
    average.swap();  // decode with the averaged weights
    Tensor decoded = model->greedy_decode(held_out.src, held_out.src_pad, o.seq_len + 1);
    int64_t correct = 0;
    for (int64_t b = 0; b < o.eval_size; ++b)
      if (until_end(decoded, b) == until_end(held_out.tgt_out, b)) ++correct;
    fmt::print("\n{:<40} {:<40} {}\n", "source", "expected", "got");
    for (int64_t b = 0; b < std::min(o.show, o.eval_size); ++b)
      fmt::print("{:<40} {:<40} {}\n", show_tokens(until_end(held_out.src, b)),
                 show_tokens(until_end(held_out.tgt_out, b)), show_tokens(until_end(decoded, b)));
    const double accuracy = 100.0 * static_cast<double>(correct) / static_cast<double>(o.eval_size);
    fmt::print("\nsequence accuracy on {} held-out sequences: {:.1f}% ({} steps, {} of training{})\n", o.eval_size,
               accuracy, step, examples::format_duration(train_seconds),
               o.average > 0 ? fmt::format("; weights averaged, decay {}", o.average) : "");
    average.swap();  // the trained weights again: what a checkpoint resumes from

    if (!o.save.empty()) {
      saved.step = step;
      const NamedTensors state = examples::save_run(run, saved);
      nn::save_safetensors(o.save, state,
                           {{"task", o.task},
                            {"d_model", std::to_string(o.model.d_model)},
                            {"heads", std::to_string(o.model.heads)},
                            {"layers", std::to_string(o.model.layers)},
                            {"accuracy", fmt::format("{:.2f}", accuracy)}});
      fmt::print("checkpoint written to {}\n", o.save);
    }
    const std::string model_line =
        fmt::format("d_model {} · {} heads · {}+{} layers · batch {} · length ≤ {} · lr factor {} · seed {}",
                    o.model.d_model, o.model.heads, o.model.layers, o.model.layers, o.batch, o.seq_len, o.lr, o.seed);
    if (!o.plot.empty()) {
      examples::TrainingCurves figure{
          fmt::format("{} task: training curves", o.task),
          {model_line, fmt::format("after {} steps, {:.1f}% of the {} held-out sequences decoded right", step, accuracy,
                                   o.eval_size)},
          "training step",
          {}};
      const int window = examples::smoothing_window(train_curve.size());
      examples::Panel loss;
      loss.title = "cross-entropy loss", loss.y_label = "nats per token";
      // The training loss is measured with dropout on, the held-out one without: it can lie lower.
      const std::string train_name = o.model.dropout > 0 ? fmt::format("train, dropout {}", o.model.dropout) : "train";
      loss.curves = {{train_name + ", each step", train_curve, "#1f77b4", examples::CurveStyle::Faint},
                     {fmt::format("{}, mean of {} steps", train_name, window), examples::running_mean(train_curve, window),
                      "#1f77b4", examples::CurveStyle::Line},
                     {fmt::format("held-out ({} sequences)", o.eval_size), eval_curve, "#d62728",
                      examples::CurveStyle::Dots}};
      examples::Panel right;
      right.title = "held-out sequence accuracy", right.y_label = "% of sequences right";
      right.range = std::pair{0.0, 100.0};
      right.curves = {{"held-out, weights of that step", accuracy_curve, "#d62728", examples::CurveStyle::Dots},
                      {fmt::format("at the end, averaged weights: {:.1f}%", accuracy),
                       {{static_cast<double>(step), accuracy}}, "#2ca02c", examples::CurveStyle::Ring}};
      figure.panels = {loss, right};
      examples::draw_training_curves(figure).write(o.plot);
      fmt::print("training curves written to {}\n", o.plot);
    }
    if (!o.attention.empty()) {
      // The weights that decoded the held-out set: the averaged ones.
      average.swap();
      const int64_t example = attention_example(held_out, o.attention_example);
      const auto grid = attention_grid(*model, held_out, example,
                                       fmt::format("{} task: attention of every head after {} steps", o.task, step),
                                       o.attention_example >= 0 ? "chosen" : "the longest held out");
      average.swap();
      examples::draw_attention_grid(grid).write(o.attention);
      fmt::print("attention grid written to {}\n", o.attention);
    }
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "seq2seq: {}\n", e.what());
    return examples::kExitRefused;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "seq2seq: out of memory (try a smaller --batch, --d-model, --ff or --layers)\n");
    return examples::kExitOutOfMemory;
  }
}
