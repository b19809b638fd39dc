#include "tools/progress.h"

#include <unistd.h>

#include <fmt/core.h>

namespace cppgrad {

std::string format_duration(double seconds) {
  auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{:.1f}s", seconds);
}

Progress::Progress(int64_t total, int64_t first, std::FILE* out)
    : total_(total), first_(first), out_(out), start_(Clock::now()), last_(start_),
      interactive_(isatty(fileno(out)) == 1) {}

double Progress::elapsed_seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

void Progress::update(int64_t step, double loss, double lr, int64_t tokens, bool force_line,
                      std::optional<double> held_out_loss, const std::string& held_out_note) {
  auto now = Clock::now();
  double window = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  double elapsed = elapsed_seconds();
  int64_t done = step - first_;
  double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - step) : 0.0;
  std::string line = fmt::format("step {:>5}/{}  loss {:.4f}  lr {:.2e}  {:>7.0f} tok/s  elapsed {}  eta {}", step,
                                 total_, loss, lr, window > 0 ? static_cast<double>(tokens) / window : 0.0,
                                 format_duration(elapsed), format_duration(eta));
  if (held_out_loss) {
    line += fmt::format("  held-out {:.4f}{}{}", *held_out_loss, held_out_note.empty() ? "" : ", ", held_out_note);
    force_line = true;
  }
  if (interactive_ && !force_line) {
    fmt::print(out_, "\r{:<100}", line);
    line_open_ = true;
  } else {
    if (line_open_) fmt::print(out_, "\n");
    line_open_ = false;
    fmt::print(out_, "{}\n", line);
  }
  std::fflush(out_);
}

void Progress::finish() {
  if (line_open_) fmt::print(out_, "\n");
  line_open_ = false;
}

}  // namespace cppgrad
