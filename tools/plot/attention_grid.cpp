#include "tools/plot/attention_grid.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include <fmt/core.h>

#include "tools/plot/ticks.h"
#include "runtime/error.h"

namespace cppgrad::plot {

namespace {

constexpr double kMargin = 16, kTitleSize = 16, kNoteSize = 12, kHeaderSize = 13, kKindSize = 12, kDetailSize = 10,
                 kTickSize = 11;
constexpr double kColumnGap = 22, kRowGap = 22, kLabelGap = 4;
const std::string kMuted = "#555", kFrame = "#999";

// Shades per map: weights are drawn in 64 steps of 1/64, one SVG path per shade, which keeps
// the file at about 18 bytes a cell; the eye tells no more steps apart.
constexpr int kShades = 64;

// Cells of 280 / positions px, between 10 and 24: a 3-position map is 72 px across, the copy
// task's 17 positions 16 px a cell, 64 positions 10 px, where the labels' font is still 8.7 px.
double cell_size(size_t positions) {
  return std::clamp(std::round(280.0 / static_cast<double>(std::max<size_t>(positions, 1))), 10.0, 24.0);
}

// The token labels' font: a label's box (1.05 em from descender to ascender) fits in its cell,
// so neighbouring labels never touch; 11 px at most.
double token_font(double cell) { return std::min(11.0, std::floor(cell / 1.15 * 10) / 10); }

double widest(const std::vector<std::string>& labels, double size) {
  double w = 0;
  for (const auto& l : labels) w = std::max(w, text_width(l, size));
  return w;
}

void check_row(const AttentionRow& row, int heads) {
  if (row.heads.empty()) return;
  CPPGRAD_CHECK(static_cast<int>(row.heads.size()) == heads, "attention grid: row '{} {}' has {} maps for {} heads",
                row.heading, row.kind, row.heads.size(), heads);
  for (const auto& map : row.heads)
    CPPGRAD_CHECK(map.size() == row.queries.size() * row.keys.size(),
                  "attention grid: row '{} {}': a map of {} weights for {} queries x {} keys", row.heading, row.kind,
                  map.size(), row.queries.size(), row.keys.size());
}

// One map's cells, one path per shade: "M x y h c v c h -c z" per cell, in whole pixels from
// the map's corner (cell sizes are whole).
void draw_cells(Canvas& canvas, double x0, double y0, double cell, const AttentionRow& row,
                const std::vector<double>& weights) {
  std::map<int, std::string> paths;  // shade -> path data
  const size_t n_keys = row.keys.size();
  const auto c = static_cast<long>(cell);
  for (size_t q = 0; q < row.queries.size(); ++q)
    for (size_t k = 0; k < n_keys; ++k) {
      const double w = std::clamp(weights[q * n_keys + k], 0.0, 1.0);
      const int shade = static_cast<int>(std::lround(w * kShades));
      paths[shade] += fmt::format("M{} {}h{}v{}h-{}z", c * static_cast<long>(k), c * static_cast<long>(q), c, c, c);
    }
  const Box extent{x0, y0, x0 + cell * static_cast<double>(n_keys), y0 + cell * static_cast<double>(row.queries.size()),
                   "cells"};
  for (const auto& [shade, d] : paths) canvas.path(d, weight_color(shade / double{kShades}), extent, x0, y0);
}

}  // namespace

std::string weight_color(double w) {
  // White to navy through two blues, so that weights near 0.1 already show and 0.5 is mid-blue.
  struct Stop {
    double at, r, g, b;
  };
  static constexpr std::array<Stop, 4> stops{{{0.0, 255, 255, 255}, {0.3, 160, 200, 228}, {0.65, 50, 128, 190},
                                              {1.0, 10, 36, 100}}};
  w = std::clamp(w, 0.0, 1.0);
  size_t i = 1;
  while (i + 1 < stops.size() && w > stops[i].at) ++i;
  const Stop &a = stops[i - 1], &b = stops[i];
  const double t = (w - a.at) / (b.at - a.at);
  auto mix = [&](double u, double v) { return static_cast<int>(std::lround(u + (v - u) * t)); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b));
}

Canvas draw_attention_grid(const AttentionGrid& grid) {
  CPPGRAD_CHECK(!grid.rows.empty(), "attention grid: no rows");
  CPPGRAD_CHECK(grid.heads >= 1, "attention grid: {} heads", grid.heads);
  for (const auto& row : grid.rows) check_row(row, grid.heads);

  // Every map gets the same cell size, from the longest axis of any map, so that the rows' maps
  // line up in columns and a cell means the same everywhere.
  size_t positions = 0, most_keys = 0;
  double query_labels = 0;
  for (const auto& row : grid.rows) {
    positions = std::max({positions, row.queries.size(), row.keys.size()});
    most_keys = std::max(most_keys, row.keys.size());
  }
  const double cell = cell_size(positions), font = token_font(cell);
  for (const auto& row : grid.rows) query_labels = std::max(query_labels, widest(row.queries, font));

  // Horizontally: the rows' names, then per head [query labels | cells], then the colour bar.
  double names = 0;
  for (const auto& row : grid.rows)
    names = std::max({names, text_width(row.heading, kHeaderSize, true), text_width(row.kind, kKindSize),
                      text_width(row.detail, kDetailSize)});
  const double grid_x = kMargin + names + 16;
  const double slot = query_labels + kLabelGap + cell * static_cast<double>(most_keys);
  auto cells_x = [&](int head) { return grid_x + head * (slot + kColumnGap) + query_labels + kLabelGap; };
  const double grid_right = grid_x + grid.heads * (slot + kColumnGap) - kColumnGap;

  Canvas canvas;
  size_t labels = 0;
  for (const auto& row : grid.rows) labels += 3 + static_cast<size_t>(grid.heads) * (row.queries.size() + row.keys.size());
  canvas.expect_texts(labels + grid.notes.size() + static_cast<size_t>(grid.heads) + 10);
  double width = grid_right;
  double y = kMargin + 0.8 * kTitleSize;
  canvas.text(kMargin, y, grid.title, {.size = kTitleSize, .bold = true});
  width = std::max(width, kMargin + text_width(grid.title, kTitleSize, true));
  y += 0.25 * kTitleSize;
  for (const auto& note : grid.notes) {
    y += 5 + 0.8 * kNoteSize;
    canvas.text(kMargin, y, note, {.size = kNoteSize, .muted = true});
    width = std::max(width, kMargin + text_width(note, kNoteSize));
    y += 0.25 * kNoteSize;
  }

  // The heads, once, over the columns.
  y += 14 + 0.8 * kHeaderSize;
  for (int h = 0; h < grid.heads; ++h)
    canvas.text(cells_x(h) + cell * static_cast<double>(most_keys) / 2, y, fmt::format("head {}", h),
                {.size = kHeaderSize, .anchor = Anchor::Middle, .bold = true});
  y += 0.25 * kHeaderSize + 6;

  double first_top = 0, first_height = 0;
  for (size_t r = 0; r < grid.rows.size(); ++r) {
    const AttentionRow& row = grid.rows[r];
    // The keys' labels stand upright above each map; the map starts below the longest.
    const double top = y + widest(row.keys, font) + kLabelGap;
    const double height = cell * static_cast<double>(row.queries.size());
    if (r == 0) first_top = top, first_height = height;

    // The row's name, once, level with the top of its maps.
    double name_y = top + 0.8 * kHeaderSize;
    canvas.text(kMargin, name_y, row.heading, {.size = kHeaderSize, .bold = true});
    name_y += 0.25 * kHeaderSize + 4 + 0.8 * kKindSize;
    canvas.text(kMargin, name_y, row.kind, {.size = kKindSize});
    double names_bottom = name_y + 0.25 * kKindSize;
    if (!row.detail.empty()) {
      name_y += 0.25 * kKindSize + 4 + 0.8 * kDetailSize;
      canvas.text(kMargin, name_y, row.detail, {.size = kDetailSize, .muted = true});
      names_bottom = name_y + 0.25 * kDetailSize;
    }

    for (int h = 0; h < grid.heads; ++h) {
      const double x0 = cells_x(h);
      // Labels centred on their cells: a box spans 0.8 em above the baseline and 0.25 below.
      for (size_t q = 0; q < row.queries.size(); ++q)
        canvas.text(x0 - kLabelGap, top + cell * (static_cast<double>(q) + 0.5) + 0.275 * font, row.queries[q],
                    {.size = font, .anchor = Anchor::End});
      for (size_t k = 0; k < row.keys.size(); ++k)
        canvas.text(x0 + cell * (static_cast<double>(k) + 0.5) + 0.275 * font, top - kLabelGap, row.keys[k],
                    {.size = font, .upwards = true});
      const double map_width = cell * static_cast<double>(row.keys.size());
      if (!row.heads.empty()) draw_cells(canvas, x0, top, cell, row, row.heads[static_cast<size_t>(h)]);
      canvas.rect(x0, top, map_width, height, "none", kFrame);
      canvas.reserve({x0, top, x0 + map_width, top + height, "map"});
    }
    y = std::max(top + height, names_bottom) + kRowGap;
  }
  y -= kRowGap;

  // The colour bar beside the first row: 100 bands from 0 at the bottom to 1 at the top.
  const double bar_x = grid_right + 28, bar_w = 14;
  const double bar_h = std::clamp(first_height, 150.0, 240.0), bar_top = first_top;
  for (int i = 0; i < 100; ++i)
    canvas.rect(bar_x, bar_top + bar_h * (1 - (i + 1) / 100.0), bar_w, bar_h / 100 + 0.3, weight_color((i + 0.5) / 100));
  canvas.rect(bar_x, bar_top, bar_w, bar_h, "none", kFrame);
  canvas.reserve({bar_x, bar_top, bar_x + bar_w, bar_top + bar_h, "colour bar"});
  const std::vector<double> ticks = linear_ticks(0, 1, 6);
  double tick_labels = 0;
  for (double t : ticks) {
    const double ty = bar_top + bar_h * (1 - t);
    const std::string label = tick_label(t, tick_step(ticks));
    canvas.line(bar_x + bar_w, ty, bar_x + bar_w + 4, ty, kMuted);
    canvas.text(bar_x + bar_w + 6, ty + 0.275 * kTickSize, label, {.size = kTickSize});
    tick_labels = std::max(tick_labels, text_width(label, kTickSize));
  }
  const double bar_label_x = bar_x + bar_w + 6 + tick_labels + 8 + 0.8 * kKindSize;
  const std::string bar_label = "attention weight";
  canvas.text(bar_label_x, bar_top + bar_h / 2, bar_label,
              {.size = kKindSize, .anchor = Anchor::Middle, .upwards = true, .muted = true});
  width = std::max(width, bar_label_x + 0.25 * kKindSize);
  y = std::max(y, bar_top + bar_h / 2 + std::max(bar_h + 0.3, text_width(bar_label, kKindSize)) / 2);

  canvas.set_size(std::ceil(width + kMargin), std::ceil(y + kMargin));
  return canvas;
}

}  // namespace cppgrad::plot
