// seq2seq's options: their defaults, the command line that sets them, and the checks made before
// any training starts.
#pragma once

#include <string>

#include "common/checkpoints.h"
#include "common/cli.h"
#include "seq2seq/model.h"
#include "seq2seq/tasks.h"

namespace seq2seq {

struct Options {
  std::string task = "copy";
  int64_t steps = 900, batch = 32, seq_len = 16, vocab = 16;
  int64_t train_size = int64_t{1} << 20;  // examples per epoch
  double target_accuracy = 0;             // > 0: stop once a held-out evaluation reaches it
  bool checkpoint_layers = false;
  // One encoder and one decoder layer: on the copy task they reach 99% in fewer steps than two
  // and two, at half the time a step (bench/README.md, "seq2seq's defaults").
  ModelConfig model = [] {
    ModelConfig c;
    c.layers = 1;
    return c;
  }();
  double lr = 0.5;  // the factor of the paper's schedule; at 1.0 the held-out loss wanders
  int64_t warmup = 200;
  uint64_t seed = 0;
  int threads = 0;  // 0: all cores
  std::string save, resume, plot, attention;
  examples::CheckpointOptions checkpoints;  // --save-every, --keep-last, --save-dir
  std::string trace, log_dir;  // --trace, --log-dir (examples/common/observe.h)
  std::string export_onnx;  // the trained model as an ONNX file (the averaged weights, as decoding uses)
  int64_t attention_example = -1;  // -1: the longest held-out example
  int64_t eval_every = 50, eval_size = 256, show = 5;
  // Decoding, and the held-out evaluations during training, use an exponential moving average of
  // the weights (Polyak averaging, a cousin of the paper's averaging of its last checkpoints):
  // the last steps' noise moves the last weights' held-out loss from one evaluation to the next.
  double average = 0.99;
  bool profile = false;
};

// Declares every option of `o` on `app`, with its help text and range.
void add_options(CLI::App& app, Options& o);

// Refuses, with a cppgrad::Error naming the option, what would fail later: an output path that
// cannot be written, a model larger than memory, a batch that does not divide among the
// processes, a --train-size under one batch. Sets the thread count and completes o.model; returns
// this process's share of the batch.
int64_t check_options(Options& o);

// The tensors of the checkpoint --resume names, refused unless it was trained on this --task.
cppgrad::nn::NamedTensors checkpoint_of_task(cppgrad::nn::SafetensorsContents ckpt, const Options& o);

// The checkpoint's metadata: the task, the model's sizes, the processes and the accuracy.
cppgrad::nn::Metadata checkpoint_metadata(const Options& o, const examples::KeptOptions& kept, double accuracy);

// The options a checkpoint keeps: resuming, each is the checkpoint's (one given otherwise is
// refused). The seed is among them: it draws the data.
examples::KeptOptions kept_options(CLI::App& app, Options& o);

// The task's training examples, each rank its share of every epoch's permutation, padded per
// batch of `rank_batch`. No prefetch thread: a batch takes microseconds to make (bench/README.md,
// "seq2seq's defaults").
cppgrad::data::DataLoader training_loader(const Options& o, Task task, int64_t rank_batch, int world_size, int rank);

// The line that says what is about to train: the task, the model, the batch, the threads.
void print_run_line(const Options& o, int64_t parameters, int64_t rank_batch, int world_size);

}  // namespace seq2seq
