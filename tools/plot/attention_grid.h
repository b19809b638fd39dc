// Attention maps as a grid: one row per layer and kind of attention (encoder self-attention,
// decoder self-attention, decoder cross-attention), one column per head. Each map is a square
// of cells, queries down and keys across, shaded by the weight from white (0) to dark blue (1),
// with its tokens on both axes; a colour bar gives the scale.
#pragma once

#include <string>
#include <vector>

#include "canvas.h"

namespace cppgrad::plot {

struct AttentionRow {
  std::string heading;  // named once at the row's start: "encoder · layer 0"
  std::string kind;     // "self-attention"
  std::string detail;   // smaller, e.g. the module's name "encoder.layers.0.self_attn"
  std::vector<std::string> queries, keys;  // token labels: the rows and the columns of each map
  // One map per head: queries.size() × keys.size() weights in [0, 1], row by row. A row
  // without maps draws empty frames: the tests lay grids out that way, quickly.
  std::vector<std::vector<double>> heads;
};

struct AttentionGrid {
  std::string title;
  std::vector<std::string> notes;  // lines under the title
  int heads = 1;                   // the grid's columns
  std::vector<AttentionRow> rows;
};

// Throws cppgrad::Error when a row has maps of the wrong number or size, or the grid no rows.
Canvas draw_attention_grid(const AttentionGrid& grid);

// The colour of a weight w in [0, 1] as "#rrggbb": white, light blue, blue, navy.
std::string weight_color(double w);

}  // namespace cppgrad::plot
