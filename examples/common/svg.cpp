#include "common/svg.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include <fmt/core.h>

using namespace cppgrad;

namespace examples {

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

void write_file(const std::string& path, const std::string& svg) {
  std::ofstream file(path);
  CPPGRAD_CHECK(file.good(), "svg: cannot open '{}' for writing", path);
  file << svg;
  CPPGRAD_CHECK(file.good(), "svg: writing '{}' failed", path);
}

std::string text(double x, double y, const std::string& s, const std::string& extra = "") {
  return fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" {}>{}</text>\n", x, y, extra, escape(s));
}

}  // namespace

void write_line_plot(const std::string& path, const std::string& title, const std::string& x_label,
                     const std::string& y_label, const std::vector<Series>& series) {
  const double width = 720, height = 420, left = 70, right = 150, top = 40, bottom = 50;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min, y_min = x_min, y_max = -x_min;
  for (const auto& s : series)
    for (auto [x, y] : s.points) {
      if (!std::isfinite(y)) continue;
      x_min = std::min(x_min, x), x_max = std::max(x_max, x);
      y_min = std::min(y_min, y), y_max = std::max(y_max, y);
    }
  if (!std::isfinite(x_min)) x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  if (x_max == x_min) x_max = x_min + 1;
  y_min = std::min(0.0, y_min);
  if (y_max == y_min) y_max = y_min + 1;
  auto px = [&](double x) { return left + (x - x_min) / (x_max - x_min) * plot_w; };
  auto py = [&](double y) { return top + plot_h - (y - y_min) / (y_max - y_min) * plot_h; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height);
  svg += text(width / 2, 22, title, "text-anchor=\"middle\" font-size=\"15\"");
  for (int i = 0; i <= 5; ++i) {  // grid and tick labels
    double y = y_min + (y_max - y_min) * i / 5.0, x = x_min + (x_max - x_min) * i / 5.0;
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", left, py(y),
                       left + plot_w, py(y));
    svg += text(left - 6, py(y) + 4, fmt::format("{:.3g}", y), "text-anchor=\"end\"");
    svg += text(px(x), top + plot_h + 18, fmt::format("{:.0f}", x), "text-anchor=\"middle\"");
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", left, top,
                     plot_w, plot_h);
  svg += text(left + plot_w / 2, height - 10, x_label, "text-anchor=\"middle\"");
  svg += text(16, top + plot_h / 2, y_label, fmt::format("transform=\"rotate(-90 16 {})\" text-anchor=\"middle\"", top + plot_h / 2));
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    std::string points;
    for (auto [x, y] : s.points)
      if (std::isfinite(y)) points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", s.color, points);
    double ly = top + 20 + 20 * static_cast<double>(k);
    svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"3\"/>\n",
                       left + plot_w + 12, ly - 4, left + plot_w + 32, ly - 4, s.color);
    svg += text(left + plot_w + 38, ly, s.name);
  }
  write_file(path, svg + "</svg>\n");
}

void write_heat_maps(const std::string& path, const std::string& title, const std::vector<HeatMap>& maps,
                     int columns) {
  CPPGRAD_CHECK(columns > 0, "svg: columns must be positive");
  const double cell = 18, label = 34, gap = 30, head = 24;
  double panel_w = 0, panel_h = 0;
  for (const auto& m : maps) {
    panel_w = std::max(panel_w, label + cell * static_cast<double>(m.values.size(1)));
    panel_h = std::max(panel_h, head + label + cell * static_cast<double>(m.values.size(0)));
  }
  const int rows = (static_cast<int>(maps.size()) + columns - 1) / columns;
  const double width = columns * (panel_w + gap) + gap, height = 40 + rows * (panel_h + gap);
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"10\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height);
  svg += text(width / 2, 24, title, "text-anchor=\"middle\" font-size=\"15\"");
  for (size_t i = 0; i < maps.size(); ++i) {
    const HeatMap& m = maps[i];
    const double x0 = gap + static_cast<double>(i % columns) * (panel_w + gap);
    const double y0 = 40 + static_cast<double>(i / columns) * (panel_h + gap);
    svg += text(x0 + label, y0 + 12, m.title, "font-size=\"12\"");
    const double gx = x0 + label, gy = y0 + head + label;
    Tensor v = m.values.to(kFloat64).contiguous();
    for (int64_t c = 0; c < v.size(1); ++c)  // key labels on top, written upwards
      svg += text(gx + cell * (c + 0.6), gy - 4, c < (int64_t)m.col_labels.size() ? m.col_labels[c] : "",
                  fmt::format("transform=\"rotate(-90 {:.1f} {:.1f})\"", gx + cell * (c + 0.6), gy - 4));
    for (int64_t r = 0; r < v.size(0); ++r) {
      svg += text(gx - 4, gy + cell * (r + 0.7), r < (int64_t)m.row_labels.size() ? m.row_labels[r] : "",
                  "text-anchor=\"end\"");
      for (int64_t c = 0; c < v.size(1); ++c) {
        double w = std::clamp(v.at<double>({r, c}), 0.0, 1.0);
        int shade = static_cast<int>(255 * (1 - w));
        svg += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{}\" height=\"{}\" fill=\"rgb({},{},255)\"><title>{:.3f}</title></rect>\n",
            gx + cell * c, gy + cell * r, cell, cell, shade, shade, w);
      }
    }
  }
  write_file(path, svg + "</svg>\n");
}

}  // namespace examples
