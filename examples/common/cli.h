// Command-line checks shared by the examples, all made before any training starts:
//   - numeric options in a range that NaN cannot slip through (CLI::Range compares, and every
//     comparison with NaN is false);
//   - output files (--save, --plot, ...) that can be written, so a bad path does not cost a run;
//   - a model whose memory the machine can hold;
//   - a data file that is a regular file of a sensible size.
// And the exit codes: 0 done, 1 an unforeseen error, 2 refused input or options (one line on
// stderr), 3 out of memory, 4 training stopped on a NaN or an infinity (one line naming the step
// and the quantity).
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

namespace examples {

inline constexpr int kExitFailed = 1;
inline constexpr int kExitRefused = 2;
inline constexpr int kExitOutOfMemory = 3;
inline constexpr int kExitDiverged = 4;

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

// A CLI11 check: the option is a number in [min, max] (NaN and inf are refused).
CLI::Validator number_in(double min, double max);
// A CLI11 check: the option is written as digits only (an unsigned option would wrap "-1").
CLI::Validator digits_only();

// Throws cppgrad::Error naming `option` unless `path` can be written: an existing regular file
// that opens for writing, or a new name in a writable directory. Leaves no file behind.
void check_writable(const std::string& option, const std::string& path);

// Throws cppgrad::Error when `floats` 4-byte numbers (a model's parameters and what training
// keeps per parameter) need more memory than the machine has.
void check_memory(const std::string& what, double floats);

// The bytes of a regular file of at most `max_bytes`; throws cppgrad::Error naming `option`
// otherwise (a directory, a device like /dev/zero, a FIFO, a file too large).
std::string read_data_file(const std::string& option, const std::string& path, int64_t max_bytes);

// The sizes every example's Transformer takes, into the fields of the same names of `model`:
// --d-model, --heads, --layers (described by `layers_help`), --ff and --dropout.
template <class ModelConfig>
void add_size_options(CLI::App& app, ModelConfig& model, const std::string& layers_help) {
  app.add_option("--d-model", model.d_model, "model width d_model")->check(CLI::Range(1, 65536));
  app.add_option("--heads", model.heads, "attention heads (must divide d_model)")->check(CLI::Range(1, 1024));
  app.add_option("--layers", model.layers, layers_help)->check(CLI::Range(1, 1000));
  app.add_option("--ff", model.ff, "feed-forward width")->check(CLI::Range(1, 1 << 20));
  app.add_option("--dropout", model.dropout, "dropout probability")->check(number_in(0.0, 0.99));
}

}  // namespace examples
