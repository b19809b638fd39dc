// A canvas for the training pictures (loss curves, attention grids): it collects text, rectangles,
// lines and polylines, writes them as SVG (hand-written: a browser opens it, and no library is
// needed), and remembers the box every text and every drawing area occupies, so that a test can
// show no label covers another label or a plot, and nothing falls off the canvas.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace cppgrad::plot {

struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // left, top, right, bottom (SVG's y points down)
  const char* what = "";                  // a shape's or an area's name, for test messages

  double width() const { return x1 - x0; }
  double height() const { return y1 - y0; }
  // True when the interiors meet; boxes that only touch along an edge do not overlap.
  bool overlaps(const Box& other) const {
    return x0 < other.x1 && other.x0 < x1 && y0 < other.y1 && other.y0 < y1;
  }
};

enum class Anchor { Start, Middle, End };

struct TextStyle {
  double size = 12;               // font size, px
  Anchor anchor = Anchor::Start;  // where (x, y) sits along the text
  bool upwards = false;           // rotated by -90°: the text reads from bottom to top
  bool bold = false;
  bool muted = false;  // grey (#555), not near-black (#222): notes, axis names
};

// A width the text does not exceed in the usual sans-serif fonts. DejaVu Sans, the sans-serif
// of Debian's fontconfig and among the widest, measured as rsvg-convert renders it: digits
// 0.64 em, lower case 0.56 em on average (m 0.97, w 0.82), upper case 0.67 (W 0.99), '<' and
// '>' 0.84. So each character counts 0.68 em, upper case, 'w', '<', '>' and '=' 0.85, 'm', 'M', 'W', '@',
// '%' and any non-ASCII character (·, ×, →, ≤) a full em; bold is 10% wider (measured: 9% for
// digits, 13% for lower case), so it counts 1.15 times that. Arial and Liberation Sans are narrower.
double text_width(const std::string& text, double font_size, bool bold = false);

// The box text drawn at (x, y) with the style covers. The baseline is at y; ascenders reach
// 0.8 em above it (DejaVu's ascent is 0.76 em) and descenders 0.25 em below (0.24 em).
Box text_box(double x, double y, const std::string& text, const TextStyle& style);

// A text as placed: where, what, how, and the box it covers.
struct PlacedText {
  double x, y;
  std::string text;
  TextStyle style;
  Box box;
};

class Canvas {
 public:
  Canvas(double width = 0, double height = 0) : width_(width), height_(height) {}

  void set_size(double width, double height) { width_ = width, height_ = height; }
  double width() const { return width_; }
  double height() const { return height_; }

  // Room for this many texts, when a layout knows it will place thousands.
  void expect_texts(size_t count) { texts_.reserve(texts_.size() + count); }
  // Texts are written after every shape, so that no line is drawn across a label.
  void text(double x, double y, const std::string& text, const TextStyle& style = {});
  // A rectangle; `stroke` "none" draws no outline.
  void rect(double x, double y, double width, double height, const std::string& fill,
            const std::string& stroke = "none", double opacity = 1.0);
  void line(double x0, double y0, double x1, double y1, const std::string& color, double width = 1.0,
            const std::string& dash = "");
  void polyline(const std::vector<std::pair<double, double>>& points, const std::string& color, double width = 1.5,
                double opacity = 1.0);
  void circle(double x, double y, double radius, const std::string& fill);
  void ring(double x, double y, double radius, const std::string& color);  // a hollow circle, 2 px wide
  // A filled path: `d` is SVG path data ("M0 0h10v10h-10z..."), moved by (dx, dy); `extent` is
  // the box it stays in, on the canvas.
  void path(const std::string& d, const std::string& fill, const Box& extent, double dx = 0, double dy = 0);
  // A region no text may cover (a plot area, a heat map, the colour bar). It draws nothing.
  void reserve(const Box& area) { areas_.push_back(area); }

  const std::vector<PlacedText>& texts() const { return texts_; }
  const std::vector<Box>& areas() const { return areas_; }
  // Every shape's extent, with its stroke, to check all fall on the canvas.
  const std::vector<Box>& shape_extents() const { return shapes_; }

  // The SVG is written when asked for: a layout can be checked without it, which keeps the
  // tests of thousands of layouts fast.
  std::string svg() const;
  // Writes svg() to path, whole or not at all (files::write_file_atomically); throws
  // cppgrad::Error naming the path when it cannot.
  void write(const std::string& path) const;

 private:
  double width_, height_;
  std::string shapes_svg_;  // the shapes' SVG elements, in drawing order
  std::vector<PlacedText> texts_;
  std::vector<Box> areas_, shapes_;
};

// Pairs of texts that overlap, texts over a reserved area, and texts or shapes outside
// [0, width] x [0, height]: one line each, empty when the layout is clean. Boxes are sorted into
// buckets of 64 x 64 px and compared within a bucket, so that pictures with thousands of labels
// check quickly.
std::vector<std::string> layout_problems(const Canvas& canvas);

}  // namespace cppgrad::plot
