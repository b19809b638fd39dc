// Training progress: on a terminal one line rewritten in place; in a log, a plain line per report.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace examples {

class Progress {
 public:
  explicit Progress(int64_t total_steps, int64_t first_step = 0);
  // Shows step/total, loss, lr, tokens/s (over the last report), elapsed and ETA; with a
  // held-out loss, also that and `held_out_note` after it (seq2seq's accuracy), on a line of its own.
  void update(int64_t step, double loss, double lr, int64_t tokens_since_last, bool force_line = false,
              std::optional<double> held_out_loss = std::nullopt, const std::string& held_out_note = "");
  void finish();  // ends the in-place line
  double elapsed_seconds() const;

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_, first_;
  Clock::time_point start_, last_;
  bool interactive_;
  bool line_open_ = false;
};

std::string format_duration(double seconds);

}  // namespace examples
