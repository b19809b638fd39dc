// Training curves: one or more panels stacked over a shared step axis (the loss above, the
// held-out accuracy below, say), with round 1-2-5 ticks, a log axis when the values span more
// than a decade, an optional second scale on the right (nats and bits per character), and the
// legend beside each panel.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/canvas.h"
#include "common/ticks.h"

namespace examples {

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

// The mean of each `window` consecutive points ending at each point (fewer at the start): the
// trend under the per-step noise of the training loss.
Points running_mean(const Points& points, int window);
// A round window (1, 2, 5, 10, 20, ...) near a fortieth of the run: about 40 independent means.
int smoothing_window(size_t points);

}  // namespace examples
