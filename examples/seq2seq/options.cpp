#include "seq2seq/options.h"

#include "common/checkpoints.h"
#include "common/cli_app.h"
#include "common/data_parallel.h"
#include "common/observe.h"

using namespace cppgrad;

namespace seq2seq {

void add_options(CLI::App& app, Options& o) {
  app.add_option("--task", o.task, "copy, reverse or sort")->check(CLI::IsMember({"copy", "reverse", "sort"}));
  app.add_option("--steps", o.steps, "training steps in all (a resumed run continues up to this)")->check(CLI::Range(1, 100'000'000));
  app.add_option("--batch", o.batch, "sequences per step, over all processes")->check(CLI::Range(1, 65536));
  app.add_option("--seq-len", o.seq_len, "longest source sequence, in symbols")->check(CLI::Range(1, 200));
  app.add_option("--vocab", o.vocab, "vocabulary size, including the 3 special tokens")->check(CLI::Range(4, 100000));
  app.add_option("--train-size", o.train_size, "training sequences per epoch (each drawn from the seed and its index)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  examples::add_size_options(app, o.model, "encoder layers, and as many decoder layers");
  app.add_option("--lr", o.lr, "factor of the paper's schedule: lr = factor · d_model^-0.5 · min(n^-0.5, n · warmup^-1.5)")
      ->check(examples::number_in(1e-6, 1e3));
  app.add_option("--warmup", o.warmup, "warm-up steps of the schedule")->check(CLI::Range(1, 100'000'000));
  app.add_option("--seed", o.seed, "random seed (weights, data, dropout)")->check(examples::digits_only());
  app.add_option("--threads", o.threads, "threads for BLAS and cppgrad's loops (default: all cores)")->check(CLI::Range(1, 256));
  app.add_option("--save", o.save, "write a checkpoint (model, optimizer, schedule, step, RNG, averaged weights) at the end")
      ->check(examples::names_a_path());
  app.add_option("--resume", o.resume, "continue from a checkpoint written by --save, or by --save-every: latest (the newest in --save-dir; none yet: a new run) or a directory (its newest)")
      ->check(examples::resume_target());
  examples::add_checkpoint_options(app, o.checkpoints);
  app.add_option("--eval-every", o.eval_every, "steps between held-out evaluations")->check(CLI::Range(1, 100'000'000));
  app.add_option("--target-accuracy", o.target_accuracy,
                 "stop at the first held-out evaluation whose sequence accuracy (in %) reaches this")
      ->check(examples::number_in(0.0, 100.0));
  app.add_flag("--checkpoint", o.checkpoint_layers,
               "recompute each layer's activations in backward instead of keeping them (less memory, more time)");
  app.add_option("--plot", o.plot, "write the train and held-out loss curves as SVG")->check(examples::names_a_path());
  examples::add_trace_option(app, o.trace);
  examples::add_log_dir_option(app, o.log_dir);
  app.add_option("--export-onnx", o.export_onnx, "write the trained model (the weights decoding uses) as an ONNX "
                                                 "inference graph: inputs src, tgt_in, src_pad, tgt_pad; output logits")
      ->check(examples::names_a_path());
  CLI::Option* attention = app.add_option("--attention", o.attention, "write every head's attention for one held-out "
                                          "example as an SVG grid")
                               ->check(examples::names_a_path());
  app.add_option("--attention-example", o.attention_example,
                 "which held-out example --attention draws (default: the longest)")
      ->check(CLI::Range(int64_t{0}, o.eval_size - 1))
      ->needs(attention);
  app.add_option("--average", o.average, "decay of the moving average of the weights used for decoding (0: the last weights)")
      ->check(examples::number_in(0.0, 0.9999));
  app.add_flag("--profile", o.profile, "print the time per kernel kind of one training step (the 10th of this run)");
}

int64_t check_options(Options& o) {
  if (!o.save.empty()) examples::check_writable("--save", o.save);
  if (!o.plot.empty()) examples::check_writable("--plot", o.plot);
  if (!o.attention.empty()) examples::check_writable("--attention", o.attention);
  if (!o.export_onnx.empty()) examples::check_writable("--export-onnx", o.export_onnx);
  // Parameters: embedding and output layer, 4 d² + 2 d·ff per encoder layer and 8 d² + 2 d·ff per
  // decoder layer; each float is kept 5 times (weights, gradient, Adam's two moments, the average).
  const double d = static_cast<double>(o.model.d_model), ff = static_cast<double>(o.model.ff);
  const double layers = static_cast<double>(o.model.layers), vocab = static_cast<double>(o.vocab);
  examples::check_memory("the model", 5.0 * (2.0 * vocab * d + layers * (12.0 * d * d + 4.0 * d * ff)));
  const int64_t rank_batch = examples::per_rank_batch("--batch", o.batch);
  CPPGRAD_CHECK(o.train_size >= o.batch, "--train-size {} is smaller than one --batch of {}", o.train_size, o.batch);
  examples::check_sizes(o.model);
  if (o.threads > 0) set_num_threads(o.threads);
  o.model.vocab = o.vocab;
  o.model.max_len = o.seq_len + 2;
  return rank_batch;
}

nn::NamedTensors checkpoint_of_task(nn::SafetensorsContents ckpt, const Options& o) {
  CPPGRAD_CHECK(ckpt.metadata.count("task") && ckpt.metadata.at("task") == o.task,
                "--resume: the checkpoint was trained on '{}', not '{}'",
                ckpt.metadata.count("task") ? excerpt(ckpt.metadata.at("task")) : "?", o.task);
  return std::move(ckpt.tensors);
}

nn::Metadata checkpoint_metadata(const Options& o, const examples::KeptOptions& kept, double accuracy) {
  nn::Metadata metadata = {{"task", o.task},
                           {"d_model", std::to_string(o.model.d_model)},
                           {"heads", std::to_string(o.model.heads)},
                           {"layers", std::to_string(o.model.layers)},
                           {"processes", std::to_string(distributed::world_size())},
                           {"accuracy", fmt::format("{:.2f}", accuracy)}};
  kept.save_into(metadata);  // the options a resume takes from the file
  return metadata;
}


examples::KeptOptions kept_options(CLI::App& app, Options& o) {
  examples::KeptOptions kept(app, "seq2seq");
  kept.add("--task", o.task).add("--vocab", o.vocab).add("--seq-len", o.seq_len).add("--train-size", o.train_size)
      .add("--d-model", o.model.d_model).add("--heads", o.model.heads).add("--layers", o.model.layers)
      .add("--ff", o.model.ff).add("--dropout", o.model.dropout).add("--batch", o.batch).add("--lr", o.lr)
      .add("--warmup", o.warmup).add("--average", o.average).add("--seed", o.seed);
  return kept;
}

data::DataLoader training_loader(const Options& o, Task task, int64_t rank_batch, int world_size, int rank) {
  auto examples = std::make_shared<TaskDataset>(task, o.train_size, o.seq_len, o.vocab, o.seed + 1);
  auto sampler = std::make_shared<data::DistributedSampler>(o.train_size, world_size, rank, /*shuffle=*/true,
                                                            o.seed + 1, /*drop_last=*/true);
  return data::DataLoader(examples, data::DataLoaderOptions(rank_batch).drop_last(true).seed(o.seed), task_collate(),
                          sampler);
}

void print_run_line(const Options& o, int64_t parameters, int64_t rank_batch, int world_size) {
  fmt::print("task {} · {} parameters · d_model {} · {} · {}+{} layers · batch {}{} · length ≤ {} · {}{}\n",
             o.task, parameters, o.model.d_model, examples::counted(o.model.heads, "head"), o.model.layers,
             o.model.layers, o.batch, world_size > 1 ? fmt::format(" ({} a process)", rank_batch) : "", o.seq_len,
             examples::counted(get_num_threads(), "thread"),
             world_size > 1 ? fmt::format(" · {} processes", world_size) : "");
}
}  // namespace seq2seq
