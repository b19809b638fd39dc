// Command-line checks shared by the examples, all made before any training starts:
//   - numeric options in a range that NaN cannot slip through (CLI::Range compares, and every
//     comparison with NaN is false);
//   - output files (--save, --plot, ...) that can be written, so a bad path does not cost a run;
//   - a model whose memory the machine can hold;
//   - a data file that is a regular file of a sensible size.
// And the exit codes: 0 done, 2 refused input or options (one line on stderr), 3 out of memory.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace examples {

inline constexpr int kExitRefused = 2;
inline constexpr int kExitOutOfMemory = 3;

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

}  // namespace examples
