// Small SVG writers for the examples: a line plot and a grid of heat maps. An SVG file is
// text that any browser opens.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cppgrad.h"

namespace examples {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y)
  std::string color;                              // "#1f77b4"
};

void write_line_plot(const std::string& path, const std::string& title, const std::string& x_label,
                     const std::string& y_label, const std::vector<Series>& series);

struct HeatMap {
  std::string title;
  cppgrad::Tensor values;               // (rows, cols), values in [0, 1]
  std::vector<std::string> row_labels;  // one per row (queries)
  std::vector<std::string> col_labels;  // one per column (keys)
};

// Maps laid out `columns` to a row, each cell shaded from white (0) to dark blue (1).
void write_heat_maps(const std::string& path, const std::string& title, const std::vector<HeatMap>& maps,
                     int columns);

}  // namespace examples
