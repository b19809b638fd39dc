// Training curves from logged scalars: one or more panels stacked over a shared step axis (the
// loss above, the held-out accuracy below, say), with round 1-2-5 ticks, a log axis when the
// values span more than a decade, an optional second scale on the right (nats and bits per
// character), and the legend beside each panel. A training script's usual picture is one call:
//
//   plot::draw_loss_curves({.title = "my run", .train = train_losses, .held_out = eval_losses})
//       .write("loss.svg");
//
// Needs only the standard library and fmt: the values are (step, value) pairs a loop logged.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "canvas.h"
#include "ticks.h"

namespace cppgrad::plot {

using Points = std::vector<std::pair<double, double>>;  // (step, value)

enum class CurveStyle {
  Faint,  // thin and pale: every step's noisy training loss
  Line,   // a solid line
  Dots,   // a line with a dot at each point: evaluations, which are few
  Ring,   // a hollow ring at each point, no line: a final result, visible over a dot beneath it
};

struct Curve {
  std::string name;  // the legend's entry
  Points points;     // non-finite values are skipped
  std::string color;
  CurveStyle style = CurveStyle::Line;
};

struct Panel {
  std::string title;    // above the panel, e.g. "cross-entropy loss"
  std::string y_label;  // beside the axis, e.g. "nats per token"
  std::vector<Curve> curves;
  // A fixed value range (an accuracy's 0 to 100); otherwise the data's.
  std::optional<std::pair<double, double>> range;
  // Log scale when every value is positive and the largest exceeds ten times the smallest.
  bool log_when_spread = true;
  // A second scale on the right, as value × right_scale (nats to bits: 1 / ln 2); 0: none.
  double right_scale = 0;
  std::string right_label;
};

struct TrainingCurves {
  std::string title;
  std::vector<std::string> notes;  // lines under the title: the run's settings, its result
  std::string x_label = "training step";
  std::vector<Panel> panels;
};

Canvas draw_training_curves(const TrainingCurves& figure);

// A run's loss as the examples' --plot draws it: every step's training loss (faint), its running
// mean over a round window (smoothing_window), the held-out evaluations as dots; then `more`
// panels (a held-out accuracy, say) below it on the same step axis.
struct LossCurves {
  // Every member has a default, {} included, so that {.title = ..., .train = ...} leaves the
  // rest to it without a -Wmissing-field-initializers warning.
  std::string title{};
  std::vector<std::string> notes{};  // lines under the title: the run's settings, its result
  Points train{};                    // (step, loss) of every training step
  Points held_out{};                 // (step, loss) of each held-out evaluation
  // The legend's names: "<train_name>, each step", "<train_name>, mean of 20 steps", held_out_name.
  std::string train_name = "train";
  std::string held_out_name = "held-out";
  std::string loss_title = "loss";  // the panel's title
  std::string y_label = "loss";     // e.g. "nats per token"
  double right_scale = 0;           // a second scale on the right (bits: 1 / ln 2); 0: none
  std::string right_label{};
  std::vector<Panel> more{};  // below the loss, on the same step axis
  std::string x_label = "training step";
};

Canvas draw_loss_curves(const LossCurves& figure);
// The same picture from a training log (metrics::Logger's metrics.jsonl): `figure`'s train and
// held_out are read from the file's scalars `train_tag` and `held_out_tag`.
//   plot::draw_loss_curves_from_log("runs/a/metrics.jsonl", {.title = "run a"}).write("loss.svg");
Canvas draw_loss_curves_from_log(const std::string& jsonl_path, LossCurves figure = {},
                                 const std::string& train_tag = "train/loss", const std::string& held_out_tag = "eval/loss");

// The mean of each `window` consecutive points ending at each point (fewer at the start): the
// trend under the per-step noise of the training loss.
Points running_mean(const Points& points, int window);
// A round window (1, 2, 5, 10, 20, ...) near a fortieth of the run: about 40 independent means.
int smoothing_window(size_t points);

}  // namespace cppgrad::plot
