// seq2seq: train an encoder-decoder Transformer to copy, reverse or sort sequences.
//
//   seq2seq                          # copy task, default model: 100% in 900 steps, under a minute
//   seq2seq --task reverse --steps 2000 --plot loss.svg --attention attn.svg
//   seq2seq --save run.safetensors   # ...later: seq2seq --resume run.safetensors --steps 3000
//   scripts/mpirun 2 seq2seq --threads 1   # data-parallel: 2 processes, 16 of the 32 sequences each
#include <CLI/CLI.hpp>
#include <cmath>
#include <fmt/core.h>

#include "common/checkpoint.h"
#include "common/data_parallel.h"
#include "common/progress.h"
#include "common/svg.h"
#include "seq2seq/model.h"
#include "seq2seq/tasks.h"

using namespace cppgrad;
using namespace seq2seq;
using cppgrad::nn::NamedTensors;
namespace F = cppgrad::nn::functional;
namespace dist = cppgrad::distributed;

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
  int64_t eval_every = 100, eval_size = 256, show = 5;
  // Decoding uses an exponential moving average of the weights (Polyak averaging, a cousin of
  // the paper's averaging of its last checkpoints): the last steps' noise moved the copy task's
  // held-out loss between 0.0014 and 0.0081 from one evaluation to the next.
  double average = 0.99;
  bool profile = false;
};

// Target tokens that count in the loss (all but the padding).
static int64_t non_padding(const Tensor& targets) {
  int64_t n = 0;
  for (int64_t t : targets.contiguous().to_vector<int64_t>()) n += t != PAD;
  return n;
}

static double held_out_loss(Seq2SeqModel& model, const Batch& data) {
  NoGradGuard no_grad;
  model.eval();
  Tensor logits = model.forward(data.src, data.tgt_in, data.src_pad, data.tgt_pad);
  model.train();
  return F::cross_entropy(logits.reshape({-1, model.config.vocab}), data.tgt_out.reshape({-1}), {.ignore_index = PAD})
      .item();
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

// Heat maps of every head of every attention layer, for the first held-out example.
static void write_attention_maps(Seq2SeqModel& model, const Batch& data, const std::string& path) {
  Batch one{data.src.narrow(0, 0, 1), data.tgt_in.narrow(0, 0, 1), data.tgt_out.narrow(0, 0, 1),
            data.src_pad.narrow(0, 0, 1), data.tgt_pad.narrow(0, 0, 1)};
  const int64_t src_len = static_cast<int64_t>(until_end(one.src, 0).size());  // symbols and </s>
  const int64_t tgt_len = src_len;                                               // <s> and the answer
  std::vector<std::pair<std::string, std::shared_ptr<nn::MultiheadAttention>>> layers;
  for (auto& [name, module] : model.named_modules())
    if (auto attention = std::dynamic_pointer_cast<nn::MultiheadAttention>(module)) {
      attention->store_attention = true;
      layers.emplace_back(name, attention);
    }
  {
    NoGradGuard no_grad;
    model.eval();
    model.forward(one.src, one.tgt_in, one.src_pad, one.tgt_pad);
  }
  std::vector<examples::HeatMap> maps;
  auto src_labels = token_labels(one.src, src_len), tgt_labels = token_labels(one.tgt_in, tgt_len);
  for (auto& [name, attention] : layers) {
    const bool encoder = name.find("encoder") != std::string::npos;
    const bool cross = name.find("multihead_attn") != std::string::npos;
    const auto& rows = encoder ? src_labels : tgt_labels;
    const auto& cols = encoder || cross ? src_labels : tgt_labels;
    Tensor w = attention->last_attention.select(0, 0);  // (H, T, S)
    for (int64_t h = 0; h < w.size(0); ++h) {
      std::string where = name.substr(name.find("coder.") - 2);  // "encoder.layers.0.self_attn"
      maps.push_back({fmt::format("{} · head {}", where, h),
                      w.select(0, h).narrow(0, 0, (int64_t)rows.size()).narrow(1, 0, (int64_t)cols.size()), rows, cols});
    }
    attention->store_attention = false;
    attention->last_attention = Tensor();
  }
  examples::write_heat_maps(path, "attention weights (rows: queries, columns: keys)", maps,
                            static_cast<int>(model.config.heads));
}

int main(int argc, char** argv) {
  // Under mpirun every process runs all of main; rank 0 alone prints, evaluates and writes files.
  dist::ProcessGroup world(argc, argv);
  const bool lead = world.rank() == 0;
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
  app.add_option("--dropout", o.model.dropout, "dropout probability")->check(CLI::Range(0.0, 0.99));
  app.add_option("--lr", o.lr, "factor of the paper's schedule: lr = factor · d_model^-0.5 · min(n^-0.5, n · warmup^-1.5)")
      ->check(CLI::Range(1e-6, 1e3));
  app.add_option("--warmup", o.warmup, "warm-up steps of the schedule")->check(CLI::Range(1, 100'000'000));
  app.add_option("--seed", o.seed, "random seed (weights, data, dropout)");
  app.add_option("--threads", o.threads, "threads for BLAS and cppgrad's loops (default: all cores)")->check(CLI::Range(1, 256));
  app.add_option("--save", o.save, "write a checkpoint (model, optimizer, schedule, step, RNG, averaged weights) at the end");
  app.add_option("--resume", o.resume, "continue from a checkpoint written by --save")->check(CLI::ExistingFile);
  app.add_option("--eval-every", o.eval_every, "steps between held-out evaluations")->check(CLI::Range(1, 100'000'000));
  app.add_option("--plot", o.plot, "write the train and held-out loss curves as SVG");
  app.add_option("--attention", o.attention, "write every head's attention for one example as SVG heat maps");
  app.add_option("--average", o.average, "decay of the moving average of the weights used for decoding (0: the last weights)")
      ->check(CLI::Range(0.0, 0.9999));
  app.add_flag("--profile", o.profile, "print the time per kernel kind of one training step (the 10th of this run)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return lead ? app.exit(e) : 0;  // --help
    if (lead) fmt::print(stderr, "seq2seq: {}\n", e.what());
    return 2;
  }

  try {
    if (o.threads > 0) set_num_threads(o.threads);
    o.model.vocab = o.vocab;
    o.model.max_len = o.seq_len + 2;
    const Task task = parse_task(o.task);
    CPPGRAD_CHECK(o.batch >= world.world_size(), "--batch {} is smaller than the {} processes", o.batch,
                  world.world_size());
    manual_seed(o.seed);  // weights and dropout
    Generator data_gen(o.seed + 1);  // the same on every rank: each draws the global batch
    auto model = std::make_shared<Seq2SeqModel>(o.model);
    // Rank 0's weights everywhere; the gradients averaged over the ranks in every backward().
    dist::DistributedDataParallel ddp(model);
    if (world.rank() > 0) manual_seed(o.seed + 7919 * world.rank());  // each rank its own dropout
    optim::Adam opt(model->parameters(), optim::AdamOptions(1.0).beta1(0.9).beta2(0.98).eps(1e-9));
    optim::NoamLR schedule(opt, o.model.d_model, o.warmup, o.lr);
    optim::ExponentialMovingAverage average(model->parameters(), o.average);

    int64_t step = 0;
    std::vector<std::pair<double, double>> train_curve, eval_curve;
    if (!o.resume.empty()) {
      auto ckpt = nn::load_safetensors(o.resume);
      CPPGRAD_CHECK(ckpt.metadata.count("task") && ckpt.metadata.at("task") == o.task,
            "--resume: the checkpoint was trained on '{}', not '{}'",
            ckpt.metadata.count("task") ? ckpt.metadata.at("task") : "?", o.task);
      const std::string saved_world = ckpt.metadata.count("processes") ? ckpt.metadata.at("processes") : "1";
      CPPGRAD_CHECK(saved_world == std::to_string(world.world_size()),
                    "--resume: the checkpoint was written by {} processes and this run has {}; resume on as many",
                    saved_world, world.world_size());
      model->load_state_dict(examples::under_prefix("model.", ckpt.tensors));
      average.load_state_dict(examples::under_prefix("average.", ckpt.tensors));
      opt.load_state_dict(examples::under_prefix("optim.", ckpt.tensors));
      schedule.load_state_dict(examples::under_prefix("sched.", ckpt.tensors));
      if (world.world_size() > 1)
        examples::set_generator_state_of_rank(default_generator(), examples::under_prefix("rng.default.", ckpt.tensors));
      else
        examples::set_generator_state(default_generator(), examples::under_prefix("rng.default.", ckpt.tensors));
      examples::set_generator_state(data_gen, examples::under_prefix("rng.data.", ckpt.tensors));
      step = ckpt.at("train.step").item<int64_t>();
      auto curve = [&](const std::string& name, auto& out) {
        if (!ckpt.contains(name)) return;
        auto v = ckpt.at(name).to_vector<double>();
        for (size_t i = 0; i + 1 < v.size(); i += 2) out.emplace_back(v[i], v[i + 1]);
      };
      curve("train.loss_curve", train_curve);
      curve("train.eval_curve", eval_curve);
      if (lead) fmt::print("resumed from {} at step {}\n", o.resume, step);
    }

    Generator held_out_gen(o.seed + 1000003);  // never used for training data
    Batch held_out = make_batch(task, o.eval_size, o.seq_len, o.vocab, held_out_gen);
    if (lead)
      fmt::print("task {} · {} parameters · d_model {} · {} heads · {}+{} layers · batch {} · length ≤ {} · {} threads{}\n",
                 o.task, model->parameter_count(), o.model.d_model, o.model.heads, o.model.layers, o.model.layers,
                 o.batch, o.seq_len, get_num_threads(),
                 world.world_size() > 1 ? fmt::format(" × {} processes", world.world_size()) : "");

    examples::Progress progress(o.steps, step);
    // This rank's loss sums (and the global batch's token counts) of the steps not yet reported:
    // one all-reduce every report gives the global losses of all of them.
    std::vector<double> recent_sums, recent_tokens;
    model->train();
    const int64_t profiled_step = step + 10;  // after warm-up: caches and buffers are settled
    while (step < o.steps) {
      if (o.profile && step + 1 == profiled_step) {
        profile::set_enabled(true);
        profile::reset();
      }
      const Batch global = make_batch(task, o.batch, o.seq_len, o.vocab, data_gen);
      const Batch b{examples::my_rows(global.src), examples::my_rows(global.tgt_in), examples::my_rows(global.tgt_out),
                    examples::my_rows(global.src_pad), examples::my_rows(global.tgt_pad)};
      Tensor logits = model->forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);  // (B / ranks, T, vocab)
      // The loss is the mean over the global batch's tokens: each rank sums its own and divides
      // by the global count (times the ranks, which the gradients' average divides out again),
      // so the ranks' padding may differ and the step is still one process's step.
      const double tokens = static_cast<double>(non_padding(global.tgt_out));
      Tensor loss_sum = F::cross_entropy(logits.reshape({-1, o.vocab}), b.tgt_out.reshape({-1}),
                                         {.ignore_index = PAD, .reduction = F::Reduction::Sum});
      opt.zero_grad();
      (loss_sum * (world.world_size() / tokens)).backward();
      opt.step();
      average.update();
      schedule.step();
      ++step;
      if (o.profile && step == profiled_step) {
        profile::set_enabled(false);
        if (lead) progress.finish();
        if (lead) fmt::print("\nprofile of step {} (batch {}, {} threads):\n{}\n", step, o.batch, get_num_threads(), profile::report());
      }

      recent_sums.push_back(loss_sum.item());
      recent_tokens.push_back(tokens);
      const bool eval_now = step % o.eval_every == 0 || step == o.steps;
      if (!eval_now && step % 10 != 0) continue;
      Tensor sums = tensor(recent_sums, {static_cast<int64_t>(recent_sums.size())});
      dist::all_reduce(sums);
      double recent_loss = 0;
      const auto count = static_cast<int64_t>(recent_sums.size());
      for (int64_t i = 0; i < count; ++i) {
        const double l = sums.at<double>({i}) / recent_tokens[i];
        recent_loss += l;
        train_curve.emplace_back(static_cast<double>(step - count + 1 + i), l);
      }
      recent_sums.clear();
      recent_tokens.clear();
      if (!lead) continue;
      std::optional<double> eval_loss;
      if (eval_now) {
        eval_loss = held_out_loss(*model, held_out);
        eval_curve.emplace_back(static_cast<double>(step), *eval_loss);
      }
      progress.update(step, recent_loss / static_cast<double>(count), opt.lr(), count * global.tgt_out.numel(),
                      eval_now, eval_loss);
    }
    if (lead) progress.finish();
    double train_seconds = progress.elapsed_seconds();

    // Each rank's dropout stream, for the checkpoint (a collective: every rank takes part).
    const NamedTensors dropout_rng = world.world_size() > 1 ? examples::gather_generator_states(default_generator())
                                                            : examples::generator_state(default_generator());
    if (!lead) return 0;

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
      NamedTensors state = examples::with_prefix("model.", model->state_dict());
      auto add = [&](const NamedTensors& more) { state.insert(state.end(), more.begin(), more.end()); };
      add(examples::with_prefix("optim.", opt.state_dict()));
      add(examples::with_prefix("average.", average.state_dict()));
      add(examples::with_prefix("sched.", schedule.state_dict()));
      add(examples::with_prefix("rng.default.", dropout_rng));
      add(examples::with_prefix("rng.data.", examples::generator_state(data_gen)));
      auto flatten = [](const std::vector<std::pair<double, double>>& curve) {
        std::vector<double> v;
        for (auto [x, y] : curve) v.insert(v.end(), {x, y});
        return tensor(v, {static_cast<int64_t>(v.size())});
      };
      add({{"train.step", scalar_tensor(static_cast<double>(step), kInt64)},
           {"train.loss_curve", flatten(train_curve)},
           {"train.eval_curve", flatten(eval_curve)}});
      nn::save_safetensors(o.save, state,
                           {{"task", o.task},
                            {"d_model", std::to_string(o.model.d_model)},
                            {"heads", std::to_string(o.model.heads)},
                            {"layers", std::to_string(o.model.layers)},
                            {"accuracy", fmt::format("{:.2f}", accuracy)},
                            {"processes", std::to_string(world.world_size())}});
      fmt::print("checkpoint written to {}\n", o.save);
    }
    if (!o.plot.empty()) {
      examples::write_line_plot(o.plot, fmt::format("{} task: cross-entropy loss", o.task), "step", "loss",
                                {{"train", train_curve, "#1f77b4"}, {"held-out", eval_curve, "#d62728"}});
      fmt::print("loss curve written to {}\n", o.plot);
    }
    if (!o.attention.empty()) {
      write_attention_maps(*model, held_out, o.attention);
      fmt::print("attention maps written to {}\n", o.attention);
    }
    return 0;
  } catch (const Error& e) {
    if (world.world_size() > 1) {
      // The other ranks may be waiting for this one in a collective: end them all.
      fmt::print(stderr, "seq2seq: rank {}: {}\n", world.rank(), e.what());
      dist::abort(2);
    }
    fmt::print(stderr, "seq2seq: {}\n", e.what());
    return 2;
  }
}
