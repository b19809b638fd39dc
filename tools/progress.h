// A training loop's progress line: step/total, loss, learning rate, tokens per second, elapsed
// time and the time left. On a terminal one line is rewritten in place; in a log (or a pipe),
// a plain line per report. A line with a held-out loss always stays.
//
//   cppgrad::Progress progress(steps);
//   for (int64_t step = 1; step <= steps; ++step) {
//     ...
//     if (step % 10 == 0) progress.update(step, loss.item(), opt.lr(), tokens_in_the_last_10_steps);
//   }
//   progress.finish();
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace cppgrad {

class Progress {
 public:
  // `first_step`: where a resumed run starts, so that the time left counts only the steps to go.
  explicit Progress(int64_t total_steps, int64_t first_step = 0, std::FILE* out = stdout);
  // Shows step/total, loss, lr, tokens/s (over the time since the last report), elapsed and the
  // time left; with a held-out loss, also that and `held_out_note` after it (an accuracy, say),
  // on a line of its own, as `force_line` asks for any report.
  void update(int64_t step, double loss, double lr, int64_t tokens_since_last, bool force_line = false,
              std::optional<double> held_out_loss = std::nullopt, const std::string& held_out_note = "");
  void finish();  // ends the in-place line
  double elapsed_seconds() const;

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_, first_;
  std::FILE* out_;
  Clock::time_point start_, last_;
  bool interactive_;
  bool line_open_ = false;
};

// "4.2s", "3m07s", "2h05m".
std::string format_duration(double seconds);

}  // namespace cppgrad
