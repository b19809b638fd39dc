// char_lm's options: their defaults, the command line that sets them, the checks made before
// any training starts, and the text they name.
#pragma once

#include <string>
#include <vector>

#include "char_lm/model.h"
#include "common/checkpoints.h"
#include "common/cli.h"
#include "char_lm/sample.h"

namespace char_lm {

struct Options {
  std::string data = "/usr/share/common-licenses/GPL-3";
  int64_t steps = 1000, batch = 16;
  ModelConfig model;  // its seq_len is also the training windows' length
  double lr = 5e-3, weight_decay = 0.1, clip = 1.0;
  int64_t warmup = 50;
  bool zero = false;  // --zero: AdamW's state sharded over the processes (ZeRO-1)
  uint64_t seed = 0;
  int threads = 0;  // 0: all cores
  std::string save, resume, plot;
  examples::CheckpointOptions checkpoints;  // --save-every, --keep-last, --save-dir
  std::string trace, log_dir;  // --trace, --log-dir (examples/common/observe.h)
  int64_t eval_every = 100;
  SampleOptions sample;
  std::string prompt;
  // Every character becomes an int64 token id, so a file takes nine times its size in memory.
  int64_t max_data_mb = 100;
};

// Declares every option of `o` on `app`, with its help text and range.
void add_options(CLI::App& app, Options& o);

// Refuses, with a cppgrad::Error naming the option, what would fail later: an output path that
// cannot be written, a model larger than memory, a batch that does not divide among the
// processes. Sets the thread count; returns this process's share of the batch.
int64_t check_options(const Options& o);

// The text of --data as token ids, split: the first 90% trains, the last 10% is held out (it
// measures how well the model continues text it has not seen).
struct Text {
  cppgrad::data::CharVocabulary vocab;
  std::vector<int64_t> ids;
  int64_t split;                // ids[split:] is held out
  std::vector<int64_t> prompt;  // --prompt's ids
  cppgrad::Tensor vocab_tensor() const;  // the characters, as the checkpoint's data.vocab holds them
};
// Reads --data (a regular file of at most --max-data-mb), refusing a text whose held-out part is
// shorter than a window or a --prompt with a character the text lacks.
Text read_text(const Options& o);

// The tensors of `ckpt`, the checkpoint --resume names, refused unless its model has this run's
// sizes and was trained on a text of the same characters.
cppgrad::nn::NamedTensors checkpoint_of_this_model(cppgrad::nn::SafetensorsContents ckpt, const Options& o,
                                                   const Text& text);

// The checkpoint's metadata: the text, the held-out loss, the processes and the model's sizes.
cppgrad::nn::Metadata checkpoint_metadata(const Options& o, const examples::KeptOptions& kept, double held_out_loss);

// The options a checkpoint keeps: resuming, each is the checkpoint's (one given otherwise is
// refused); --seed, which also seeds sampling, wins with a notice.
examples::KeptOptions kept_options(CLI::App& app, Options& o);

// Every window of the text's first 90%, in a fresh order each epoch, this process's share of
// each global batch (batches of `rank_batch`). No prefetch thread, as in seq2seq.
cppgrad::data::DataLoader training_loader(const Options& o, const Text& text, int64_t rank_batch, int world_size,
                                          int rank);

// The line that says what is about to train: the text, the model, the batch, the threads.
void print_run_line(const Options& o, const Text& text, int64_t parameters, int64_t rank_batch, int world_size);

}  // namespace char_lm
