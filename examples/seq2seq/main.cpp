// seq2seq: train an encoder-decoder Transformer to copy, reverse or sort sequences.
//
//   seq2seq                          # copy task, default model: 99% by step 350, 900 steps in all
//   seq2seq --task reverse --steps 2000 --plot loss.svg --attention attn.svg
//   seq2seq --save run.safetensors   # ...later: seq2seq --resume run.safetensors --steps 3000
//   seq2seq --target-accuracy 99     # stop at the first held-out evaluation that reaches 99%
//   scripts/mpirun 2 build/release/examples/seq2seq --threads 1   # data-parallel, 16 a rank
//
// Data-parallel: under mpirun each of N processes trains on batch/N sequences of every global
// batch (its share of the epoch's one permutation) and DistributedDataParallel averages the
// gradients, so N processes take the steps one process takes on the whole batch. Rank 0 alone
// evaluates, prints and writes files.
//
// Exit codes: 0 done; 2 refused options or input (a checkpoint that does not fit, a path that
// cannot be written), with one line on stderr; 3 out of memory.
#include <CLI/CLI.hpp>
#include <cmath>
#include <fmt/core.h>

#include "common/checkpoint.h"
#include "common/cli.h"
#include "common/curves.h"
#include "common/data_parallel.h"
#include "common/progress.h"
#include "seq2seq/model.h"
#include "seq2seq/show.h"
#include "seq2seq/tasks.h"

using namespace cppgrad;
using namespace seq2seq;
using cppgrad::nn::NamedTensors;
namespace F = cppgrad::nn::functional;

struct Options {
  std::string task = "copy";
  int64_t steps = 900, batch = 32, seq_len = 16, vocab = 16;
  int64_t train_size = int64_t{1} << 20;  // examples per epoch
  double target_accuracy = 0;             // > 0: stop once a held-out evaluation reaches it
  bool checkpoint_layers = false;
  // One encoder and one decoder layer: on the copy task they reached 99% of the held-out
  // sequences in fewer steps than 2 + 2 (judged on the last weights: 300-400 steps on seeds 0-2
  // against 525-550 on seeds 0-1) at half the time a step. Judged on the averaged weights, 350
  // steps on each of seeds 0, 1, 2; reverse 1775-1925 steps, sort 2100 (--target-accuracy 99).
  // Dropout 0.1 stays: without it copy took 650-825 steps on 2 + 2 layers, with it 525-550.
  ModelConfig model = [] {
    ModelConfig c;
    c.layers = 1;
    return c;
  }();
  // The factor of the paper's schedule. 1.0 peaks at 6.2e-3 and the held-out loss wanders (0.022
  // after 900 copy steps, 97.3% of sequences right); 0.5 reaches 0.003 and 100%.
  double lr = 0.5;
  int64_t warmup = 200;
  uint64_t seed = 0;
  int threads = 0;  // 0: all cores
  std::string save, resume, plot, attention;
  int64_t attention_example = -1;  // -1: the longest held-out example
  int64_t eval_every = 50, eval_size = 256, show = 5;
  // Decoding uses an exponential moving average of the weights (Polyak averaging, a cousin of
  // the paper's averaging of its last checkpoints): the last steps' noise moved the copy task's
  // held-out loss between 0.0014 and 0.0081 from one evaluation to the next. The held-out
  // evaluations during training judge the averaged weights too, the ones a run that stopped
  // there would decode with: judged on the last weights, a run stopped by --target-accuracy 99
  // at step 300 then decoded 94.9% with the average, which lagged behind.
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

int main(int argc, char** argv) {
  distributed::ProcessGroup world(argc, argv);  // a world of one without mpirun
  const bool lead = world.rank() == 0;          // rank 0 prints, evaluates and writes files
  Options o;
  CLI::App app{"Train an encoder-decoder Transformer on a synthetic sequence task (copy, reverse, sort)."};
  app.add_option("--task", o.task, "copy, reverse or sort")->check(CLI::IsMember({"copy", "reverse", "sort"}));
  app.add_option("--steps", o.steps, "training steps in all (a resumed run continues up to this)")->check(CLI::Range(1, 100'000'000));
  app.add_option("--batch", o.batch, "sequences per step, over all processes")->check(CLI::Range(1, 65536));
  app.add_option("--seq-len", o.seq_len, "longest source sequence, in symbols")->check(CLI::Range(1, 200));
  app.add_option("--vocab", o.vocab, "vocabulary size, including the 3 special tokens")->check(CLI::Range(4, 100000));
  app.add_option("--train-size", o.train_size, "training sequences per epoch (each drawn from the seed and its index)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
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
  app.add_option("--target-accuracy", o.target_accuracy,
                 "stop at the first held-out evaluation whose sequence accuracy (in %) reaches this")
      ->check(examples::number_in(0.0, 100.0));
  app.add_flag("--checkpoint", o.checkpoint_layers,
               "recompute each layer's activations in backward instead of keeping them (less memory, more time)");
  app.add_option("--plot", o.plot, "write the train and held-out loss curves as SVG");
  app.add_option("--attention", o.attention, "write every head's attention for one held-out example as an SVG grid");
  app.add_option("--attention-example", o.attention_example,
                 "which held-out example --attention draws (default: the longest)")
      ->check(CLI::Range(int64_t{0}, o.eval_size - 1));
  app.add_option("--average", o.average, "decay of the moving average of the weights used for decoding (0: the last weights)")
      ->check(examples::number_in(0.0, 0.9999));
  app.add_flag("--profile", o.profile, "print the time per kernel kind of one training step (the 10th of this run)");
  if (auto code = examples::parse_command_line(app, argc, argv, "seq2seq")) return *code;
  const std::string who = examples::name_in_job("seq2seq");

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
    const int64_t rank_batch = examples::per_rank_batch("--batch", o.batch);
    CPPGRAD_CHECK(o.train_size >= o.batch, "--train-size {} is smaller than one --batch of {}", o.train_size, o.batch);
    if (o.threads > 0) set_num_threads(o.threads);
    o.model.vocab = o.vocab;
    o.model.max_len = o.seq_len + 2;
    const Task task = parse_task(o.task);
    manual_seed(o.seed + static_cast<uint64_t>(world.rank()));  // weights (rank 0's are broadcast) and dropout
    auto model = std::make_shared<Seq2SeqModel>(o.model);
    model->transformer->set_checkpoint_layers(o.checkpoint_layers);
    distributed::DistributedDataParallel ddp(model);  // rank 0's weights everywhere; hooks nothing in a world of one
    optim::Adam opt(model->parameters(), optim::AdamOptions(1.0).beta1(0.9).beta2(0.98).eps(1e-9));
    optim::NoamLR schedule(opt, o.model.d_model, o.warmup, o.lr);
    optim::ExponentialMovingAverage average(model->parameters(), o.average);

    // The training sequences: each rank its share of every epoch's permutation, batched with the
    // padding to the longest sequence of the batch. No prefetch: a batch takes tens of
    // microseconds to make, and a thread waking to make the next one takes a core from the
    // step's own threads, whose regions may then stall and drop to one thread for a while
    // (runtime/parallel.h), rounding differently: with prefetch(2), two 2-thread runs of one
    // seed once drifted apart from step 90 on.
    auto train_set = std::make_shared<TaskDataset>(task, o.train_size, o.seq_len, o.vocab, o.seed + 1);
    auto sampler = std::make_shared<data::DistributedSampler>(o.train_size, world.world_size(), world.rank(),
                                                              /*shuffle=*/true, o.seed + 1, /*drop_last=*/true);
    data::DataLoader loader(train_set, data::DataLoaderOptions(rank_batch).drop_last(true).seed(o.seed),
                            task_collate(), sampler);

    examples::Run run{*model, opt, schedule, loader, &average};
    examples::TrainingLog saved;
    if (!o.resume.empty()) {
      auto ckpt = nn::load_safetensors(o.resume);
      CPPGRAD_CHECK(ckpt.metadata.count("task") && ckpt.metadata.at("task") == o.task,
            "--resume: the checkpoint was trained on '{}', not '{}'",
            ckpt.metadata.count("task") ? excerpt(ckpt.metadata.at("task")) : "?", o.task);
      saved = examples::resume_run(o.resume, ckpt.tensors, run);
      if (lead) fmt::print("resumed from {} at step {}\n", o.resume, saved.step);
    }
    int64_t step = saved.step;
    std::vector<std::pair<double, double>>& train_curve = saved.train_curve;
    std::vector<std::pair<double, double>>& eval_curve = saved.eval_curve;
    std::vector<std::pair<double, double>>& accuracy_curve = saved.accuracy_curve;

    // Never trained on: another seed's sequences, padded to the longest of them.
    const TaskDataset held_out_set(task, o.eval_size, o.seq_len, o.vocab, o.seed + 1000003);
    std::vector<data::Example> held_out_examples;
    for (int64_t i = 0; i < o.eval_size; ++i) held_out_examples.push_back(held_out_set.get(i));
    const Batch held_out = to_batch(task_collate()(held_out_examples));
    if (lead)
      fmt::print("task {} · {} parameters · d_model {} · {} heads · {}+{} layers · batch {}{} · length ≤ {} · {} threads{}\n",
                 o.task, model->parameter_count(), o.model.d_model, o.model.heads, o.model.layers, o.model.layers,
                 o.batch, world.world_size() > 1 ? fmt::format(" ({} a process)", rank_batch) : "", o.seq_len,
                 get_num_threads(),
                 world.world_size() > 1 ? fmt::format(" · {} processes", world.world_size()) : "");

    examples::Progress progress(o.steps, step);
    std::vector<double> recent_losses;  // this rank's, since the last report
    int64_t recent_tokens = 0;          // over all ranks
    std::optional<double> reached;      // the accuracy that met --target-accuracy
    model->train();
    const int64_t profiled_step = step + 10;  // after warm-up: caches and buffers are settled
    while (step < o.steps && !reached) {
      if (o.profile && step + 1 == profiled_step) {
        profile::set_enabled(true);
        profile::reset();
      }
      const Batch b = to_batch(loader.next());
      Tensor logits = model->forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);  // (B, T, vocab)
      Tensor loss = F::cross_entropy(logits.reshape({-1, o.vocab}), b.tgt_out.reshape({-1}),
                                     F::CrossEntropyOptions().ignore_index(PAD));  // this rank's token mean
      const auto tokens = static_cast<double>(b.tgt_pad.numel()) - b.tgt_pad.sum().item<double>();
      double all_tokens = tokens;
      if (world.world_size() > 1) {
        // DDP averages the ranks' gradients. Each rank's mean, weighted by its share of the
        // global batch's tokens, makes that the gradient of the global token mean, however the
        // padding falls on the ranks: the loss one process computes on the whole batch.
        all_tokens = examples::sum_over_ranks({tokens})[0];
        loss = loss * (tokens * world.world_size() / all_tokens);
      }
      opt.zero_grad();
      loss.backward();  // under mpirun, returns with the gradients averaged over the ranks
      opt.step();
      average.update();
      schedule.step();
      ++step;
      if (o.profile && step == profiled_step) {
        profile::set_enabled(false);
        if (lead) {
          progress.finish();
          fmt::print("\nprofile of step {} (batch {}, {} threads):\n{}\n", step, rank_batch, get_num_threads(),
                     profile::report());
        }
      }

      recent_losses.push_back(loss.item());
      recent_tokens += static_cast<int64_t>(all_tokens);
      const bool eval_now = step % o.eval_every == 0 || step == o.steps;
      if (eval_now || step % 10 == 0) {
        // The global batch's loss of each step since the last report (a collective).
        const std::vector<double> losses = examples::sum_over_ranks(recent_losses);
        for (size_t i = 0; i < losses.size(); ++i)
          train_curve.emplace_back(static_cast<double>(step - static_cast<int64_t>(losses.size() - 1 - i)),
                                   losses[i] / world.world_size());
        double mean = 0;
        for (double l : losses) mean += l / world.world_size() / static_cast<double>(losses.size());
        std::optional<double> eval_loss;
        std::string eval_note;
        bool target_met = false;
        if (eval_now && lead) {
          average.swap();  // the averaged weights: those the run decodes with
          const HeldOut result = held_out_eval(*model, held_out);
          average.swap();
          eval_loss = result.loss;
          eval_note = fmt::format("{:.1f}% right", result.accuracy);
          eval_curve.emplace_back(static_cast<double>(step), result.loss);
          accuracy_curve.emplace_back(static_cast<double>(step), result.accuracy);
          target_met = o.target_accuracy > 0 && result.accuracy >= o.target_accuracy;
          if (target_met) reached = result.accuracy;
        }
        if (lead) progress.update(step, mean, opt.lr(), recent_tokens, eval_now, eval_loss, eval_note);
        if (eval_now && o.target_accuracy > 0 && examples::decided_by_rank0(target_met) && !reached)
          reached = o.target_accuracy;  // the other ranks stop with rank 0
        recent_losses.clear();
        recent_tokens = 0;
      }
    }
    if (lead) progress.finish();
    const double train_seconds = progress.elapsed_seconds();
    if (lead && reached)
      fmt::print("target reached: {:.1f}% of held-out sequences right after {} steps, {} of training\n", *reached,
                 step, examples::format_duration(train_seconds));

    // ---- held-out sequences, decoded greedily --------------------------------------------------
    double accuracy = 0;
    if (lead) {
      model->eval();
      average.swap();  // decode with the averaged weights
      Tensor decoded = model->greedy_decode(held_out.src, held_out.src_pad, held_out.tgt_out.size(1));
      int64_t correct = 0;
      for (int64_t b = 0; b < o.eval_size; ++b)
        if (until_end(decoded, b) == until_end(held_out.tgt_out, b)) ++correct;
      fmt::print("\n{:<40} {:<40} {}\n", "source", "expected", "got");
      for (int64_t b = 0; b < std::min(o.show, o.eval_size); ++b)
        fmt::print("{:<40} {:<40} {}\n", show_tokens(until_end(held_out.src, b)),
                   show_tokens(until_end(held_out.tgt_out, b)), show_tokens(until_end(decoded, b)));
      accuracy = 100.0 * static_cast<double>(correct) / static_cast<double>(o.eval_size);
      fmt::print("\nsequence accuracy on {} held-out sequences: {:.1f}% ({} steps, {} of training{})\n", o.eval_size,
                 accuracy, step, examples::format_duration(train_seconds),
                 o.average > 0 ? fmt::format("; weights averaged, decay {}", o.average) : "");
      average.swap();  // the trained weights again: what a checkpoint resumes from
    }

    if (!o.save.empty()) {
      saved.step = step;
      NamedTensors state = examples::save_run(run, saved);
      const NamedTensors streams = examples::gather_dropout_streams();  // a collective: every rank
      state.insert(state.end(), streams.begin(), streams.end());
      if (lead) {
        nn::save_safetensors(o.save, state,
                             {{"task", o.task},
                              {"d_model", std::to_string(o.model.d_model)},
                              {"heads", std::to_string(o.model.heads)},
                              {"layers", std::to_string(o.model.layers)},
                              {"processes", std::to_string(world.world_size())},
                              {"accuracy", fmt::format("{:.2f}", accuracy)}});
        fmt::print("checkpoint written to {}\n", o.save);
      }
    }
    if (!lead) return 0;
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
      right.curves = {{"held-out, averaged weights of that step", accuracy_curve, "#d62728", examples::CurveStyle::Dots},
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
    fmt::print(stderr, "{}: {}\n", who, e.what());
    return examples::exit_job(examples::kExitRefused);
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "{}: out of memory (try a smaller --batch, --d-model, --ff or --layers)\n", who);
    return examples::exit_job(examples::kExitOutOfMemory);
  }
}
