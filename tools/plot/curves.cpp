#include "tools/plot/curves.h"

#include "runtime/error.h"
#include "tools/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/core.h>

namespace cppgrad::plot {

namespace {

// Sizes in px. A plot area of 560 x 220 holds a thousand steps at two per pixel and leaves room
// for the legend on a 900 px page.
constexpr double kMargin = 16, kPlotWidth = 560, kPlotHeight = 220;
constexpr double kTitleSize = 16, kNoteSize = 12, kPanelTitleSize = 13, kTickSize = 11, kLabelSize = 12,
                 kLegendSize = 12;
constexpr double kLegendRow = 20, kLegendSample = 24;
const std::string kGrid = "#e4e4e4", kFrame = "#555";

// One value axis of a panel: its range, how values map onto it, and its labelled ticks.
struct Scale {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks, minor;  // minor: grid lines without labels (2..9 × 10^k on a log axis)
  std::vector<std::string> labels;

  // 0 at lo, 1 at hi.
  double fraction(double v) const {
    return log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
  }
};

// Labelled ticks for a vertical axis of `length` px: rows of labels at least 2.5 font sizes
// apart (1.05 would only keep them from touching), so that the grid stays calm.
void choose_vertical_ticks(Scale& s, double length) {
  const double min_gap = 2.5 * kTickSize;
  s.ticks.clear(), s.minor.clear(), s.labels.clear();
  if (!s.log) {
    const int max_count = std::max(2, static_cast<int>(length / min_gap) + 1);
    s.ticks = linear_ticks(s.lo, s.hi, max_count);
    const double step = tick_step(s.ticks);
    for (double t : s.ticks) s.labels.push_back(tick_label(t, step));
    return;
  }
  const double per_decade = length / (std::log10(s.hi) - std::log10(s.lo));
  // 1 to 2 is the narrowest gap of a 1-2-5 axis: log10(2) ≈ 0.301 of a decade.
  const bool with_2_and_5 = per_decade * std::log10(2.0) >= min_gap;
  const int every = std::max(1, static_cast<int>(std::ceil(min_gap / per_decade)));
  s.ticks = log_ticks(s.lo, s.hi, with_2_and_5, every);
  if (s.ticks.size() < 2 && !with_2_and_5) s.ticks = log_ticks(s.lo, s.hi, false, 1);
  for (double t : s.ticks) s.labels.push_back(log_tick_label(t));
  if (per_decade >= 40)  // room for the 2..9 lines between decades
    for (double decade = std::pow(10.0, std::floor(std::log10(s.lo))); decade <= s.hi; decade *= 10)
      for (int m = 2; m <= 9; ++m)
        if (decade * m >= s.lo && decade * m <= s.hi) s.minor.push_back(decade * m);
}

// The panel's value range: the fixed one, or the data's padded by 4% of its span (on a log
// axis, of its decades); a loss never gets a negative axis.
Scale value_scale(const Panel& panel) {
  Scale s;
  if (panel.range) {
    s.lo = panel.range->first, s.hi = panel.range->second;
    const double pad = 0.03 * (s.hi - s.lo);
    s.lo -= pad, s.hi += pad;
    return s;
  }
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const Curve& c : panel.curves)
    for (auto [x, y] : c.points)
      if (std::isfinite(x) && std::isfinite(y)) lo = std::min(lo, y), hi = std::max(hi, y);
  if (!std::isfinite(lo)) return s;  // no data: 0 to 1
  if (panel.log_when_spread && lo > 0 && hi > 10 * lo) {
    s.log = true;
    const double pad = std::pow(10.0, 0.04 * std::log10(hi / lo));
    s.lo = lo / pad, s.hi = hi * pad;
    return s;
  }
  if (hi == lo) {  // one value: a range around it
    const double half = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
    s.lo = lo - half, s.hi = hi + half;
    return s;
  }
  const double pad = 0.04 * (hi - lo);
  s.lo = (lo >= 0 && lo - pad < 0) ? 0.0 : lo - pad;
  s.hi = hi + pad;
  return s;
}

// The steps axis: from 0 when the run starts near it, to the last step.
Scale step_scale(const std::vector<Panel>& panels) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const Panel& p : panels)
    for (const Curve& c : p.curves)
      for (auto [x, y] : c.points)
        if (std::isfinite(x) && std::isfinite(y)) lo = std::min(lo, x), hi = std::max(hi, x);
  Scale s;
  if (!std::isfinite(lo)) return s;
  if (lo >= 0 && lo <= 0.05 * hi) lo = 0;
  if (hi == lo) hi = lo + 1;
  s.lo = lo, s.hi = hi;
  // As many ticks as fit with the widest label and a gap of one font size between labels.
  for (int count = 11; count >= 2; --count) {
    s.ticks = linear_ticks(s.lo, s.hi, count);
    const double step = tick_step(s.ticks);
    s.labels.clear();
    double widest = 0;
    for (double t : s.ticks) {
      s.labels.push_back(tick_label(t, step));
      widest = std::max(widest, text_width(s.labels.back(), kTickSize));
    }
    if (s.ticks.size() < 2 || step / (s.hi - s.lo) * kPlotWidth >= widest + kTickSize) break;
  }
  return s;
}

double widest_label(const Scale& s) {
  double w = 0;
  for (const auto& l : s.labels) w = std::max(w, text_width(l, kTickSize));
  return w;
}

// A curve with more points than twice the pixels across keeps, per pixel column, its lowest and
// highest point: the same picture in a file a hundred times smaller for a long run.
Points thin_out(const Points& points, double x_lo, double x_hi) {
  if (points.size() <= 2 * static_cast<size_t>(kPlotWidth)) return points;
  Points out;
  auto column = [&](double x) { return static_cast<long>((x - x_lo) / (x_hi - x_lo) * kPlotWidth); };
  size_t i = 0;
  while (i < points.size()) {
    const long c = column(points[i].first);
    size_t low = i, high = i, j = i;
    for (; j < points.size() && column(points[j].first) == c; ++j) {
      if (points[j].second < points[low].second) low = j;
      if (points[j].second > points[high].second) high = j;
    }
    out.push_back(points[std::min(low, high)]);
    if (low != high) out.push_back(points[std::max(low, high)]);
    i = j;
  }
  return out;
}

}  // namespace

Points running_mean(const Points& points, int window) {
  Points out;
  double sum = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    sum += points[i].second;
    if (i >= static_cast<size_t>(window)) sum -= points[i - window].second;
    const double n = static_cast<double>(std::min(i + 1, static_cast<size_t>(window)));
    out.emplace_back(points[i].first, sum / n);
  }
  return out;
}

int smoothing_window(size_t points) {
  double window = 1;
  while (next_step(window) <= static_cast<double>(points) / 40) window = next_step(window);
  return static_cast<int>(window);
}

// ---- the figure --------------------------------------------------------------------------------

Canvas draw_training_curves(const TrainingCurves& figure) {
  Canvas canvas;
  const Scale x_scale = step_scale(figure.panels);
  std::vector<Scale> left(figure.panels.size()), right(figure.panels.size());
  for (size_t p = 0; p < figure.panels.size(); ++p) {
    left[p] = value_scale(figure.panels[p]);
    choose_vertical_ticks(left[p], kPlotHeight);
    if (figure.panels[p].right_scale > 0) {
      const double k = figure.panels[p].right_scale;
      right[p] = left[p];
      right[p].lo *= k, right[p].hi *= k;
      choose_vertical_ticks(right[p], kPlotHeight);
    }
  }

  // Horizontal layout, shared by the panels so that their step axes line up: the y label (turned
  // upwards), the tick labels, the plot, the right scale, the legend.
  double left_ticks = 0, right_ticks = 0, legend = 0;
  bool any_right = false;
  for (size_t p = 0; p < figure.panels.size(); ++p) {
    left_ticks = std::max(left_ticks, widest_label(left[p]));
    if (figure.panels[p].right_scale > 0) any_right = true, right_ticks = std::max(right_ticks, widest_label(right[p]));
    for (const Curve& c : figure.panels[p].curves)
      legend = std::max(legend, kLegendSample + 6 + text_width(c.name, kLegendSize));
  }
  const double label_x = kMargin + 0.8 * kLabelSize;  // the upward text's ascenders reach left of x
  const double plot_x0 = label_x + 0.25 * kLabelSize + 8 + left_ticks + 6;
  const double plot_x1 = plot_x0 + kPlotWidth;
  const double right_label_x = plot_x1 + 6 + right_ticks + 8 + 0.8 * kLabelSize;
  const double legend_x = (any_right ? right_label_x + 0.25 * kLabelSize : plot_x1) + 18;
  double width = std::max(legend_x + legend + kMargin, kMargin + text_width(figure.title, kTitleSize, true) + kMargin);

  // Vertically: the title and the notes, then each panel's title, plot, step labels.
  double y = kMargin + 0.8 * kTitleSize;
  canvas.text(kMargin, y, figure.title, {.size = kTitleSize, .bold = true});
  y += 0.25 * kTitleSize;
  for (const auto& note : figure.notes) {
    y += 5 + 0.8 * kNoteSize;
    canvas.text(kMargin, y, note, {.size = kNoteSize, .muted = true});
    width = std::max(width, kMargin + text_width(note, kNoteSize) + kMargin);
    y += 0.25 * kNoteSize;
  }
  y += 14;

  auto px = [&](double step) { return plot_x0 + x_scale.fraction(step) * kPlotWidth; };
  for (size_t p = 0; p < figure.panels.size(); ++p) {
    const Panel& panel = figure.panels[p];
    const Scale& s = left[p];
    const std::string title = panel.title + (s.log ? " (log scale)" : "");
    width = std::max(width, plot_x0 + text_width(title, kPanelTitleSize, true) + kMargin);
    canvas.text(plot_x0, y + 0.8 * kPanelTitleSize, title, {.size = kPanelTitleSize, .bold = true});
    // The top tick label's ascenders reach 0.3 + 0.8 font sizes above the plot's top edge.
    const double top = y + 1.05 * kPanelTitleSize + 6 + 0.5 * kTickSize, bottom = top + kPlotHeight;
    auto py = [&](double v) { return bottom - s.fraction(v) * kPlotHeight; };

    for (double m : s.minor) canvas.line(plot_x0, py(m), plot_x1, py(m), "#f0f0f0");
    for (size_t i = 0; i < s.ticks.size(); ++i) {
      canvas.line(plot_x0, py(s.ticks[i]), plot_x1, py(s.ticks[i]), kGrid);
      canvas.text(plot_x0 - 6, py(s.ticks[i]) + 0.3 * kTickSize, s.labels[i], {.size = kTickSize, .anchor = Anchor::End});
    }
    if (panel.right_scale > 0) {
      const Scale& r = right[p];
      for (size_t i = 0; i < r.ticks.size(); ++i) {
        const double ty = bottom - r.fraction(r.ticks[i]) * kPlotHeight;
        canvas.line(plot_x1, ty, plot_x1 + 4, ty, kFrame);
        canvas.text(plot_x1 + 6, ty + 0.3 * kTickSize, r.labels[i], {.size = kTickSize});
      }
      canvas.text(right_label_x, (top + bottom) / 2, panel.right_label,
                  {.size = kLabelSize, .anchor = Anchor::Middle, .upwards = true, .muted = true});
    }
    for (size_t i = 0; i < x_scale.ticks.size(); ++i) {
      canvas.line(px(x_scale.ticks[i]), top, px(x_scale.ticks[i]), bottom, kGrid);
      canvas.text(px(x_scale.ticks[i]), bottom + 0.6 * kTickSize + 3 + 0.8 * kTickSize, x_scale.labels[i],
                  {.size = kTickSize, .anchor = Anchor::Middle});
    }
    canvas.text(label_x, (top + bottom) / 2, panel.y_label,
                {.size = kLabelSize, .anchor = Anchor::Middle, .upwards = true, .muted = true});

    for (const Curve& c : panel.curves) {
      std::vector<std::pair<double, double>> pixels;
      for (auto [x, v] : thin_out(c.points, x_scale.lo, x_scale.hi))
        if (std::isfinite(x) && std::isfinite(v) && (!s.log || v > 0)) pixels.emplace_back(px(x), py(v));
      if (c.style == CurveStyle::Faint) {
        canvas.polyline(pixels, c.color, 1.0, 0.35);
      } else if (c.style == CurveStyle::Ring) {
        for (auto [x, v] : pixels) canvas.ring(x, v, 6, c.color);
      } else {
        canvas.polyline(pixels, c.color, 2.0);
        if (c.style == CurveStyle::Dots)
          for (auto [x, v] : pixels) canvas.circle(x, v, 3, c.color);
      }
    }
    canvas.rect(plot_x0, top, kPlotWidth, kPlotHeight, "none", kFrame);
    canvas.reserve({plot_x0, top, plot_x1, bottom, "plot area"});

    // The legend: a sample of each curve's line and its name, from the top of the plot down.
    for (size_t i = 0; i < panel.curves.size(); ++i) {
      const Curve& c = panel.curves[i];
      const double ly = top + 6 + kLegendRow * static_cast<double>(i) + 0.5 * kLegendRow;
      if (c.style == CurveStyle::Faint) {
        canvas.line(legend_x, ly, legend_x + kLegendSample, ly, c.color, 1.5);
      } else if (c.style == CurveStyle::Ring) {
        canvas.ring(legend_x + kLegendSample / 2, ly, 6, c.color);
      } else {
        canvas.line(legend_x, ly, legend_x + kLegendSample, ly, c.color, 2.5);
        if (c.style == CurveStyle::Dots) canvas.circle(legend_x + kLegendSample / 2, ly, 3.5, c.color);
      }
      canvas.text(legend_x + kLegendSample + 6, ly + 0.3 * kLegendSize, c.name, {.size = kLegendSize});
    }
    const double legend_bottom = top + 6 + kLegendRow * static_cast<double>(panel.curves.size()) + 6;
    y = std::max(bottom, legend_bottom) + 0.6 * kTickSize + 3 + 1.05 * kTickSize;  // below the step labels
    if (p + 1 == figure.panels.size()) {
      y += 6 + 0.8 * kLabelSize;
      canvas.text((plot_x0 + plot_x1) / 2, y, figure.x_label,
                  {.size = kLabelSize, .anchor = Anchor::Middle, .muted = true});
      y += 0.25 * kLabelSize;
    } else {
      y += 18;
    }
  }
  canvas.set_size(std::ceil(width), std::ceil(y + kMargin));
  return canvas;
}

Canvas draw_loss_curves(const LossCurves& figure) {
  // The blue and red of matplotlib's default cycle: training blue, held-out red.
  const std::string train_color = "#1f77b4", held_out_color = "#d62728";
  const int window = smoothing_window(figure.train.size());
  Panel loss;
  loss.title = figure.loss_title, loss.y_label = figure.y_label;
  loss.right_scale = figure.right_scale, loss.right_label = figure.right_label;
  loss.curves = {{figure.train_name + ", each step", figure.train, train_color, CurveStyle::Faint},
                 {fmt::format("{}, mean of {} steps", figure.train_name, window), running_mean(figure.train, window),
                  train_color, CurveStyle::Line},
                 {figure.held_out_name, figure.held_out, held_out_color, CurveStyle::Dots}};
  TrainingCurves curves{figure.title, figure.notes, figure.x_label, {loss}};
  curves.panels.insert(curves.panels.end(), figure.more.begin(), figure.more.end());
  return draw_training_curves(curves);
}

Canvas draw_loss_curves_from_log(const std::string& jsonl_path, LossCurves figure, const std::string& train_tag,
                                 const std::string& held_out_tag) {
  figure.train = metrics::read_scalars(jsonl_path, train_tag);
  CPPGRAD_CHECK(!figure.train.empty(), "plot::draw_loss_curves_from_log: '{}' has no value tagged '{}'", jsonl_path,
                train_tag);
  std::vector<std::string> said_already;  // a cut last line was warned of by the first read
  figure.held_out = metrics::read_scalars(jsonl_path, held_out_tag, &said_already);
  return draw_loss_curves(figure);
}

}  // namespace cppgrad::plot
