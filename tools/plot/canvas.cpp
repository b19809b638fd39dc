#include "tools/plot/canvas.h"

#include <algorithm>

#include <fmt/core.h>

#include "runtime/error.h"
#include "runtime/files.h"

namespace cppgrad::plot {

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

const char* anchor_name(Anchor anchor) {
  switch (anchor) {
    case Anchor::Start: return "start";
    case Anchor::Middle: return "middle";
    case Anchor::End: return "end";
  }
  return "start";
}

// How far along the text (0 to 1) the anchor point sits.
double anchor_fraction(Anchor anchor) {
  return anchor == Anchor::Start ? 0.0 : anchor == Anchor::Middle ? 0.5 : 1.0;
}

}  // namespace

double text_width(const std::string& text, double font_size, bool bold) {
  double ems = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {  // a UTF-8 sequence: one character, counted once at its lead byte
      if ((c & 0xC0) == 0xC0) ems += 1.0;
    } else if (c == 'm' || c == 'M' || c == 'W' || c == '@' || c == '%') {
      ems += 1.0;
    } else if ((c >= 'A' && c <= 'Z') || c == 'w' || c == '<' || c == '>' || c == '=' || c == '+' || c == '~' ||
               c == '#' || c == '&') {
      ems += 0.85;
    } else {
      ems += 0.68;
    }
  }
  return ems * font_size * (bold ? 1.15 : 1.0);
}

Box text_box(double x, double y, const std::string& text, const TextStyle& style) {
  const double w = text_width(text, style.size, style.bold), a = anchor_fraction(style.anchor);
  const double above = 0.8 * style.size, below = 0.25 * style.size;
  if (!style.upwards) return {x - a * w, y - above, x + (1 - a) * w, y + below, {}};
  // Turned by -90° about (x, y): the text runs upwards from the anchor, the ascenders point left.
  return {x - above, y - (1 - a) * w, x + below, y + a * w, {}};
}

void Canvas::text(double x, double y, const std::string& text, const TextStyle& style) {
  texts_.push_back({x, y, text, style, text_box(x, y, text, style)});
}

void Canvas::rect(double x, double y, double width, double height, const std::string& fill,
                  const std::string& stroke, double opacity) {
  shapes_svg_ += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"", x, y, width,
                       height, fill);
  if (stroke != "none") shapes_svg_ += fmt::format(" stroke=\"{}\"", stroke);
  if (opacity != 1.0) shapes_svg_ += fmt::format(" fill-opacity=\"{:.2f}\"", opacity);
  shapes_svg_ += "/>\n";
  const double half_stroke = stroke == "none" ? 0.0 : 0.5;
  shapes_.push_back({x - half_stroke, y - half_stroke, x + width + half_stroke, y + height + half_stroke, "rect"});
}

void Canvas::line(double x0, double y0, double x1, double y1, const std::string& color, double width,
                  const std::string& dash) {
  shapes_svg_ += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\"", x0, y0, x1, y1,
                       color);
  if (width != 1.0) shapes_svg_ += fmt::format(" stroke-width=\"{:.3g}\"", width);
  if (!dash.empty()) shapes_svg_ += fmt::format(" stroke-dasharray=\"{}\"", dash);
  shapes_svg_ += "/>\n";
  shapes_.push_back({std::min(x0, x1) - width / 2, std::min(y0, y1) - width / 2, std::max(x0, x1) + width / 2,
                      std::max(y0, y1) + width / 2, "line"});
}

void Canvas::polyline(const std::vector<std::pair<double, double>>& points, const std::string& color, double width,
                      double opacity) {
  if (points.empty()) return;
  std::string coordinates;
  Box extent{points[0].first, points[0].second, points[0].first, points[0].second, "polyline"};
  for (auto [x, y] : points) {
    coordinates += fmt::format("{:.1f},{:.1f} ", x, y);
    extent.x0 = std::min(extent.x0, x), extent.x1 = std::max(extent.x1, x);
    extent.y0 = std::min(extent.y0, y), extent.y1 = std::max(extent.y1, y);
  }
  coordinates.pop_back();
  shapes_svg_ += fmt::format(
      "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{:.3g}\" stroke-linejoin=\"round\"{} points=\"{}\"/>\n",
      color, width, opacity != 1.0 ? fmt::format(" stroke-opacity=\"{:.2f}\"", opacity) : "", coordinates);
  shapes_.push_back(extent);
}

void Canvas::circle(double x, double y, double radius, const std::string& fill) {
  shapes_svg_ += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.3g}\" fill=\"{}\"/>\n", x, y, radius, fill);
  shapes_.push_back({x - radius, y - radius, x + radius, y + radius, "circle"});
}

void Canvas::ring(double x, double y, double radius, const std::string& color) {
  shapes_svg_ += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.3g}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                             x, y, radius, color);
  shapes_.push_back({x - radius - 1, y - radius - 1, x + radius + 1, y + radius + 1, "ring"});
}

void Canvas::path(const std::string& d, const std::string& fill, const Box& extent, double dx, double dy) {
  const std::string move = dx != 0 || dy != 0 ? fmt::format(" transform=\"translate({:.2f} {:.2f})\"", dx, dy) : "";
  shapes_svg_ += fmt::format("<path fill=\"{}\"{} d=\"{}\"/>\n", fill, move, d);
  shapes_.push_back(extent);
}

std::string Canvas::svg() const {
  // DejaVu Sans first: the font text_width() was measured on, where it is installed.
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} {1:.0f}\" "
      "font-family=\"DejaVu Sans, Verdana, sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width_, height_);
  svg += shapes_svg_;
  for (const PlacedText& t : texts_) {
    const TextStyle& s = t.style;
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{:.3g}\"", t.x, t.y, s.size);
    if (s.anchor != Anchor::Start) svg += fmt::format(" text-anchor=\"{}\"", anchor_name(s.anchor));
    if (s.upwards) svg += fmt::format(" transform=\"rotate(-90 {:.1f} {:.1f})\"", t.x, t.y);
    if (s.bold) svg += " font-weight=\"bold\"";
    if (s.muted) svg += " fill=\"#555\"";
    svg += fmt::format(">{}</text>\n", escape(t.text));
  }
  return svg + "</svg>\n";
}

void Canvas::write(const std::string& path) const {
  // Whole or not at all: a full disk must not leave half a picture that looks like the run's.
  const std::string text = svg();
  files::write_file_atomically(path, std::string_view(text), "svg");
}

std::vector<std::string> layout_problems(const Canvas& canvas) {
  std::vector<std::string> problems;
  auto where = [](const Box& b) { return fmt::format("[{:.1f}, {:.1f}] x [{:.1f}, {:.1f}]", b.x0, b.x1, b.y0, b.y1); };
  // The boxes to compare: texts first, then areas; `name` describes one for a message.
  std::vector<const Box*> boxes;
  for (const PlacedText& t : canvas.texts()) boxes.push_back(&t.box);
  const size_t n_texts = boxes.size();
  for (const Box& a : canvas.areas()) boxes.push_back(&a);
  auto name = [&](size_t i) {
    return (i < n_texts ? "'" + canvas.texts()[i].text + "' " : std::string(boxes[i]->what) + " ") + where(*boxes[i]);
  };

  // Rounding to the pixel may move an element by a hair; the canvas is whole pixels.
  const double slack = 1e-6;
  auto outside = [&](const Box& b) {
    return b.x0 < -slack || b.y0 < -slack || b.x1 > canvas.width() + slack || b.y1 > canvas.height() + slack;
  };
  const std::string canvas_size = fmt::format("the {:.0f} x {:.0f} canvas", canvas.width(), canvas.height());
  for (size_t i = 0; i < n_texts; ++i)
    if (outside(*boxes[i])) problems.push_back(name(i) + " falls outside " + canvas_size);
  for (const Box& b : canvas.shape_extents())
    if (outside(b)) problems.push_back(std::string(b.what) + " " + where(b) + " falls outside " + canvas_size);

  // Each box goes into every bucket it touches; two boxes that overlap share a bucket, and are
  // reported once: in the bucket that holds the top left corner of their overlap.
  constexpr double bucket = 64;
  const auto columns = static_cast<long>(std::ceil(std::max(canvas.width(), 1.0) / bucket)) + 2;
  const auto rows = static_cast<long>(std::ceil(std::max(canvas.height(), 1.0) / bucket)) + 2;
  auto cell = [&](double v, long count) { return std::clamp(static_cast<long>(std::floor(v / bucket)) + 1, 0L, count - 1); };
  std::vector<std::vector<size_t>> buckets(static_cast<size_t>(columns * rows));
  for (size_t i = 0; i < boxes.size(); ++i)
    for (long r = cell(boxes[i]->y0, rows); r <= cell(boxes[i]->y1, rows); ++r)
      for (long c = cell(boxes[i]->x0, columns); c <= cell(boxes[i]->x1, columns); ++c)
        buckets[static_cast<size_t>(r * columns + c)].push_back(i);
  for (long r = 0; r < rows; ++r)
    for (long c = 0; c < columns; ++c) {
      const auto& in = buckets[static_cast<size_t>(r * columns + c)];
      for (size_t a = 0; a < in.size(); ++a)
        for (size_t b = a + 1; b < in.size(); ++b) {
          const size_t i = in[a], j = in[b];
          if (i >= n_texts && j >= n_texts) continue;  // areas may nest: a map inside a panel
          const Box &p = *boxes[i], &q = *boxes[j];
          if (!p.overlaps(q)) continue;
          if (cell(std::max(p.x0, q.x0), columns) != c || cell(std::max(p.y0, q.y0), rows) != r) continue;
          problems.push_back(name(i) + " overlaps " + name(j));
        }
    }
  return problems;
}

}  // namespace cppgrad::plot
