// Command-line checks shared by the examples, all made before any training starts:
//   - numeric options in a range that NaN cannot slip through (CLI::Range compares, and every
//     comparison with NaN is false);
//   - output files (--save, --plot, ...) that can be written, so a bad path does not cost a run;
//   - a model whose memory the machine can hold;
//   - a data file that is a regular file of a sensible size.
// And the exit codes: 0 done, 1 an unforeseen error, 2 refused input or options (one line on
// stderr), 3 out of memory, 4 training stopped on a NaN or an infinity, or on a loss far above a
// uniform guess's (one line naming the step and the quantity).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "common/cli_declarations.h"
#include "nn/safetensors.h"

namespace examples {

inline constexpr int kExitFailed = 1;
inline constexpr int kExitRefused = 2;
inline constexpr int kExitOutOfMemory = 3;
inline constexpr int kExitDiverged = 4;

// "1 thread", "2 threads": a count and its noun, for the lines a program prints.
inline std::string counted(int64_t n, const char* noun) { return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s"); }

// What a training program throws when a step's loss, gradient norm or a weight is NaN or infinite
// (run_state.h, stop_if_non_finite): training on would only train on nonsense, and no checkpoint
// is written from such a state. PyTorch users know the stop from anomaly detection and from
// trainers' terminate_on_nan.
struct Diverged : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs a program's body and returns its exit code; whatever the body throws is reported, never
// left to escape main. (An exception escaping main ends the program in std::terminate, which
// aborts without flushing: the lines printed so far to a file or a pipe were lost.) What was
// printed is flushed first, then one line on stderr, "program: message": cppgrad::Error is
// refused input, kExitRefused; running out of memory kExitOutOfMemory, with "try a smaller
// `smaller`" when given; Diverged kExitDiverged; any other exception kExitFailed.
int run_main(const std::string& program, const std::function<int()>& body, const std::string& smaller = "");

// The options a run is defined by, that its checkpoint keeps (the rates, the schedule, the
// decay, the clip norm, the batch, the model's sizes): saved in the metadata under the option's
// name without dashes ("--weight-decay" as "weight_decay"). On --resume each is the checkpoint's:
// one left out takes the checkpoint's value, and one given with another value is refused (exit 2,
// naming both), never dropped silently. So a PyTorch user's expectation holds (loading an
// optimizer's state_dict brings back its lr and weight decay) and no option given is ignored.
// The checkpoint also names its format ("checkpoint_format", run_state.h: another is refused
// first) and the program that wrote it ("program": "char_lm"): another program's is refused
// next, saying so, before any option of it is compared (a char_lm checkpoint handed to seq2seq
// is not "trained on another task").
//   KeptOptions kept(app, "seq2seq");
//   kept.add("--lr", o.lr).add("--warmup", o.warmup);
//   if (resuming) kept.resume_from(file.metadata);   // before anything is built from them
//   ... kept.save_into(metadata);
class KeptOptions {
 public:
  KeptOptions(CLI::App& app, std::string program) : app_(app), program_(std::move(program)) {}
  template <class T>
  KeptOptions& add(const std::string& option, T& value) {
    kept_.push_back({option, [&value] { return fmt::format("{}", value); }, false});
    return *this;
  }
  // An option kept the same way, except that one given with another value wins, with a notice
  // (--seed: it seeds the sampling a resumed run may be asked for, and the epochs to come).
  template <class T>
  KeptOptions& add_overridable(const std::string& option, T& value) {
    kept_.push_back({option, [&value] { return fmt::format("{}", value); }, true});
    return *this;
  }
  // Each kept option's value becomes the metadata's; the metadata's is checked by the option's
  // own validators (a tampered "lr": "1e30" is refused as --lr 1e30 would be). Returns the
  // notices to print, one per overridable option given with another value.
  std::vector<std::string> resume_from(const std::map<std::string, std::string>& metadata);
  // --resume's file read whole, then resume_from(its metadata), the notices printed when
  // `print_notices` (on rank 0); nothing when `path` is empty (no --resume).
  std::optional<cppgrad::nn::SafetensorsContents> resume_from_file(const std::string& path, bool print_notices);
  void save_into(std::map<std::string, std::string>& metadata) const;

 private:
  struct Kept {
    std::string option;
    std::function<std::string()> text;  // the value, as the shortest text that reads back the same
    bool overridable;
  };
  static std::string key_of(const std::string& option);
  CLI::App& app_;
  std::string program_;  // saved as the metadata's "program"
  std::vector<Kept> kept_;
};

// Parses the command line. Returns the exit code when the program must end now: 0 after --help
// (printed when print_help), kExitRefused after a refused option, with one line on stderr naming
// the program ("lesson: --steps: Value 0 not in range 1 to 1000000"), as for any refusal.
std::optional<int> parse_options(CLI::App& app, int argc, char** argv, const std::string& program,
                                 bool print_help = true);

// A CLI11 check: the option is a number in [min, max] (NaN and inf are refused).
CLI::Validator number_in(double min, double max);
// A number in (low, max]: above low, which it may not equal.
CLI::Validator number_above(double low, double max);
// A CLI11 check: the option is not empty. An option that names a file or a directory is unset
// when empty, so `--save ""` would be ignored without a word.
CLI::Validator names_a_path();
// A CLI11 check: the option is written as digits only (an unsigned option would wrap "-1").
CLI::Validator digits_only();
// Refuses a checkpoint that another program wrote (its metadata's "program"; one that names none
// is let through), naming both: "<where>: this is a gpt checkpoint (its metadata's program), not
// seq2seq's".
void require_writer(const cppgrad::nn::Metadata& metadata, const std::string& program, const std::string& where);
// A whole number of at least `least` from a checkpoint's metadata ("d_model": "32"): a
// cppgrad::Error naming the checkpoint (`where`), the key and the text when it is missing or not
// one; `writer` names the program whose checkpoints have it ("seq2seq --save").
int64_t metadata_count(const cppgrad::nn::Metadata& metadata, const std::string& key, const std::string& where,
                       const std::string& writer, int64_t least = 0);

// Throws cppgrad::Error naming `option` unless `path` can be written: an existing regular file
// that opens for writing, or a new name in a writable directory. Leaves no file behind.
void check_writable(const std::string& option, const std::string& path);

// Throws cppgrad::Error naming `option` unless the directory `dir` exists or can be made, and
// `file` can be written in it. The directories it made to ask are removed again, so a run that
// ends before it writes there (refused, diverged, killed) leaves no empty directory behind; the
// writer makes them.
void check_writable_in(const std::string& option, const std::string& dir, const std::string& file);

// Throws cppgrad::Error when `floats` 4-byte numbers (a model's parameters and what training
// keeps per parameter) need more memory than the machine has.
void check_memory(const std::string& what, double floats);

// The bytes of a regular file of at most `max_bytes`, uncompressed when it is gzip (its name ends
// in .gz, or it starts with gzip's magic number); throws cppgrad::Error naming `option` otherwise
// (a directory, a device like /dev/zero, a FIFO, a file too large, a cut gzip stream).
// `limit_hint` ends the message of a file past max_bytes (the option that sets the limit).
std::string read_data_file(const std::string& option, const std::string& path, int64_t max_bytes,
                           const std::string& limit_hint = " (see --max-data-mb)");

}  // namespace examples
