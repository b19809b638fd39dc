// gpt's options: their defaults and presets, the command line that sets them, the checks made
// before any training starts, the corpus and its tokens, and what a checkpoint must agree with.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/checkpoints.h"
#include "common/cli.h"
#include "gpt/hf_tokenizer.h"
#include "nn/hf/checkpoint.h"
#include "gpt/sample.h"
#include "data/bpe/bpe.h"
#include "data/npz/npy.h"

namespace gpt {

using namespace cppgrad::hf;  // the models and their Hugging Face files (nn/hf/)

// Jargon File 4.4.7 (public domain), from Debian's jargon-text (scripts/setup installs it).
inline const std::string kDefaultData = "/usr/share/doc/jargon-text/jargon.txt.gz";

struct Options {
  std::string data = kDefaultData;
  int64_t max_data_mb = 100;
  std::string arch = "gpt2", size = "small";
  ModelConfig model;  // its sizes come from --size, then from the options given one by one
  int64_t window = 0;  // tokens per training window: --seq-len; at most model.seq_len, the longest context
  std::string init_from;  // hf:PATH, a Hugging Face model.safetensors (or its directory) to start from
  std::string save_hf;    // a directory to write the model to under Hugging Face's names, at the end
  std::string tokenizer = "bpe";
  int64_t bpe_vocab = 512;
  std::string gpt2_vocab;  // a directory with encoder.json and vocab.bpe
  std::optional<HFTokenizerFiles> saved_tokenizer;  // a character or learnt BPE tokenizer beside --init-from's model
  int64_t steps = 600, batch = 16, accum = 1;
  double lr = 3e-3, min_lr = 3e-4, weight_decay = 0.1, clip = 1.0, beta2 = 0.99;
  int64_t warmup = 100, decay_steps = 0;  // decay_steps 0: --steps (or the checkpoint's, resuming)
  bool decay_steps_given = false;          // on the command line (a resumed run's schedule line says so)
  uint64_t seed = 0;
  int threads = 0;  // 0: all cores
  std::string dtype = "fp32";  // bf16: training and evaluation under autocast (tensor/autocast.h)
  std::string save, resume, plot;
  examples::CheckpointOptions checkpoints;  // --save-every, --keep-last, --save-dir
  std::string trace, log_dir;  // --trace, --log-dir (examples/common/observe.h)
  std::string export_onnx;  // the trained model as an ONNX file
  std::string write_tokens;  // PREFIX: the tokens to PREFIX.train.npy and PREFIX.held_out.npy (bench/gpt_twin.py reads them)
  int64_t eval_every = 200, eval_windows = 32;
  bool checkpoint = false;
  SampleOptions sample;
  std::vector<std::string> prompts;  // --prompt, once or several times
};

Arch parse_arch(const std::string& name);  // --arch: "gpt2" or "llama"; an Error naming the choices otherwise

// Declares every option of `o` on `app`, with its help text and range.
void add_options(CLI::App& app, Options& o);

// --init-from hf:PATH, read (before the options are finished: its shapes are the model's sizes).
std::optional<HFCheckpoint> read_pretrained(const CLI::App& app, const Options& o);
// --init-from: hf::load_hf_checkpoint, its errors prefixed with the option; says so when `say`.
void init_from(LanguageModel& model, const HFCheckpoint& file, bool say);

// After parsing: fills the model's sizes from --size and the options given one by one, refuses
// what would fail later (kv-heads that do not divide heads, an output path that cannot be written,
// a model larger than memory, a batch that does not divide among the processes), sets the thread
// count, and returns this process's share of the batch. Resuming, the sizes, the architecture
// and the tokenizer are the checkpoint's: one given that differs is refused. Starting from a
// Hugging Face file, the architecture and sizes are the file's (a size given that differs is
// refused, --seq-len may shorten the training windows), and its tokenizer must be given or lie
// beside it (GPT-2's encoder.json and vocab.bpe, or vocab.json and merges.txt, or what --save-hf
// writes: gpt/hf_tokenizer.h).
struct Checkpoint;
int64_t finish_options(const CLI::App& app, Options& o, const Checkpoint* resumed, const HFCheckpoint* pretrained);

// Characters (the text's bytes), a byte-level BPE learned on the training part, or GPT-2's.
struct Tokenizer {
  std::string kind;  // "char", "bpe" or "gpt2"
  std::optional<cppgrad::data::CharVocabulary> chars;
  std::optional<cppgrad::data::BPETokenizer> bpe;

  int64_t vocab_size() const;
  std::vector<int64_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  // As a checkpoint holds it (data.tokenizer): the characters, or the BPE's own file format, one
  // int64 a byte.
  cppgrad::Tensor to_tensor() const;
  static Tokenizer from_tensor(const std::string& kind, const cppgrad::Tensor& saved);
};

// The checkpoint --resume names, read before anything is built.
struct Checkpoint {
  cppgrad::nn::NamedTensors tensors;
  cppgrad::nn::Metadata metadata;
  Tokenizer tokenizer;
};
Checkpoint read_checkpoint(const std::string& path);

// The text of --data (a plain or gzip-compressed regular file) as tokens: the first 90% of its
// bytes trains, the last 10% is held out (each part encoded on its own, and a BPE learned on the
// training part only). Resuming, the checkpoint's tokenizer encodes it.
struct Corpus {
  Tokenizer tokenizer;
  std::vector<int64_t> train, held_out;
  std::vector<std::vector<int64_t>> prompts;  // --prompt's, encoded
  int64_t bytes = 0, held_out_bytes = 0;
};
Corpus read_corpus(const Options& o, const Checkpoint* resumed);

// Refuses a tokenizer whose vocabulary is not the model's size (o.model.vocab, --init-from's or
// the checkpoint's), naming both: its ids would index other rows than those the model learnt,
// or rows it never learnt, and its samples would be noise.
void check_vocabularies_agree(const Options& o, const Tokenizer& tokenizer);

// --resume latest or DIR becomes the file to load (examples::resolve_resume). A fine-tune
// restarted with its first command line (--init-from and --resume latest) continues its
// checkpoint: --init-from only started it, and is dropped with a note.
void choose_checkpoint_to_resume(Options& o, bool lead);

// The checkpoint's metadata: what the model is, its tokenizer kind, the data, the held-out loss.
cppgrad::nn::Metadata checkpoint_metadata(const Options& o, const examples::KeptOptions& kept, double held_out_loss);

// The options a checkpoint keeps besides the model's sizes (those are finish_options' to check):
// resuming, each is the checkpoint's, and one given otherwise is refused; --seed, which also
// seeds sampling, and --dtype win with a notice.
examples::KeptOptions kept_options(CLI::App& app, Options& o);

// --write-tokens PREFIX: the corpus's tokens to PREFIX.train.npy and PREFIX.held_out.npy.
void write_token_files(const Options& o, const Corpus& corpus);

// Every window of the training tokens, in a fresh order each epoch, this process's share of
// each global batch (batches of `rank_batch` windows).
cppgrad::data::DataLoader training_loader(const Options& o, const Corpus& corpus, int64_t rank_batch, int world_size,
                                          int rank);

// A resumed run's schedule, as it will follow it from `step` (the step resumed at): its warm-up,
// where its cosine ends and whether that is the checkpoint's --decay-steps or one given, and
// the steps that will run at --min-lr, past the decay.
std::string schedule_line(const Options& o, int64_t step);

// The line that says what is about to train: the data, the tokens, the model, the batch, the threads.
void print_run_line(const Options& o, const Corpus& corpus, int64_t parameters, int64_t rank_batch, int world_size);

}  // namespace gpt
