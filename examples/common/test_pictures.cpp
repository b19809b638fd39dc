// The pictures' layout: round ticks, the log-axis rule, and no text over another text or a plot,
// nothing off the canvas, for attention grids of 1 to 8 heads, 1 to 6 layers and 3 to 64
// positions, and for training curves of many shapes. (examples/common/check_pictures.sh renders
// the programs' own pictures to PNG.)
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "cppgrad.h"
#include "tools/tools.h"

using namespace cppgrad::plot;

namespace {

// The first few problems, for the failure message.
std::string summary(const std::vector<std::string>& problems) {
  std::string s;
  for (size_t i = 0; i < std::min<size_t>(problems.size(), 5); ++i) s += problems[i] + "\n";
  return s;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The tokens seq2seq labels a sequence of `length` positions with: symbols up to two digits,
// then </s> (source), or <s> first (decoder input), the widest labels it writes.
std::vector<std::string> source_tokens(size_t length) {
  std::vector<std::string> t;
  for (size_t i = 0; i + 1 < length; ++i) t.push_back(std::to_string(10 + i % 90));
  t.push_back("</s>");
  return t;
}
std::vector<std::string> target_tokens(size_t length) {
  std::vector<std::string> t{"<s>"};
  for (size_t i = 0; i + 1 < length; ++i) t.push_back(std::to_string(10 + i % 90));
  return t;
}

// The rows seq2seq draws for `layers` encoder and decoder layers: encoder self-attention per
// layer, then decoder self- and cross-attention per layer. Without maps: layout only.
AttentionGrid seq2seq_grid(int heads, int layers, size_t source, size_t target) {
  AttentionGrid grid{"copy task: attention of every head, held-out example 123",
                     {"source: 10 11 12 (16 symbols) · output: 10 11 12",
                      "rows: queries, columns: keys; each row of a map sums to 1"},
                     heads,
                     {}};
  const auto src = source_tokens(source), tgt = target_tokens(target);
  for (int l = 0; l < layers; ++l)
    grid.rows.push_back({fmt::format("encoder · layer {}", l), "self-attention",
                         fmt::format("encoder.layers.{}.self_attn", l), src, src, {}});
  for (int l = 0; l < layers; ++l) {
    grid.rows.push_back({fmt::format("decoder · layer {}", l), "self-attention (causal)",
                         fmt::format("decoder.layers.{}.self_attn", l), tgt, tgt, {}});
    grid.rows.push_back({fmt::format("decoder · layer {}", l), "cross-attention",
                         fmt::format("decoder.layers.{}.multihead_attn", l), tgt, src, {}});
  }
  return grid;
}

// A loss falling from `first` to `last` over `steps` steps, with some noise.
Points loss_curve(int steps, double first, double last) {
  Points p;
  for (int s = 1; s <= steps; s += std::max(1, steps / 3000))  // a point every step, up to 3000
    p.emplace_back(s, first * std::pow(last / first, (s - 1.0) / std::max(1, steps - 1)) * (1 + 0.2 * std::sin(s)));
  return p;
}

// The curves a seq2seq or char_lm run draws: the loss, and maybe an accuracy panel and bits.
Canvas curves_figure(int steps, double first, double last, bool accuracy_panel, double right_scale) {
  Points train = loss_curve(steps, first, last), held_out;
  for (size_t i = 0; i < train.size(); i += std::max<size_t>(1, train.size() / 9)) held_out.push_back(train[i]);
  TrainingCurves f{"copy task: loss and held-out accuracy",
                   {"d_model 128 · 4 heads · 2+2 layers · batch 32 · length ≤ 16 · lr factor 0.5 · seed 0",
                    "held-out loss 0.0021 after 900 steps"},
                   "training step",
                   {}};
  Panel loss;
  loss.title = "cross-entropy loss", loss.y_label = "nats per token";
  loss.curves = {{"train, each step", train, "#1f77b4", CurveStyle::Faint},
                 {"train, mean of 20 steps", running_mean(train, 20), "#1f77b4", CurveStyle::Line},
                 {"held-out (256 sequences)", held_out, "#d62728", CurveStyle::Dots}};
  loss.right_scale = right_scale, loss.right_label = "bits per character";
  f.panels.push_back(loss);
  if (accuracy_panel) {
    Panel accuracy;
    accuracy.title = "held-out sequence accuracy", accuracy.y_label = "% of sequences right";
    accuracy.curves = {{"held-out, last weights", {{100, 3}, {steps, 99.6}}, "#d62728", CurveStyle::Dots},
                       {"averaged weights: 100.0%", {{steps, 100}}, "#2ca02c", CurveStyle::Ring}};
    accuracy.range = std::pair{0.0, 100.0};
    f.panels.push_back(accuracy);
  }
  return draw_training_curves(f);
}

}  // namespace

TEST_CASE("text boxes: anchors and upward text") {
  const Box start = text_box(100, 50, "abc", {.size = 10});
  CHECK(start.x0 == 100);
  CHECK(start.x1 == doctest::Approx(100 + 3 * 0.68 * 10));
  CHECK(start.y0 == doctest::Approx(42));
  CHECK(start.y1 == doctest::Approx(52.5));
  const Box end = text_box(100, 50, "abc", {.size = 10, .anchor = Anchor::End});
  CHECK(end.x1 == 100);
  // Turned upwards about its anchor: the text runs up from (100, 50), its ascenders to the left.
  const Box up = text_box(100, 50, "abc", {.size = 10, .upwards = true});
  CHECK(up.x0 == doctest::Approx(92));
  CHECK(up.x1 == doctest::Approx(102.5));
  CHECK(up.y1 == 50);
  CHECK(up.y0 == doctest::Approx(50 - 3 * 0.68 * 10));
  // Wide letters, bold and non-ASCII characters count more; a UTF-8 character counts once.
  CHECK(text_width("mm", 10) > text_width("nn", 10));
  CHECK(text_width("ab", 10, true) > text_width("ab", 10));
  CHECK(text_width("·", 10) == doctest::Approx(10));
}

TEST_CASE("layout_problems finds overlapping texts, texts over areas and elements off the canvas") {
  Canvas canvas(200, 100);
  canvas.text(10, 20, "left");
  CHECK(layout_problems(canvas).empty());
  canvas.text(20, 22, "over");  // on top of "left"
  CHECK(layout_problems(canvas).size() == 1);
  Canvas off(100, 100);
  off.text(90, 50, "too long for the edge");
  CHECK(layout_problems(off).size() == 1);
  Canvas area(200, 100);
  area.reserve({0, 0, 50, 50, "plot"});
  area.text(40, 30, "x");
  CHECK(layout_problems(area).size() == 1);
}

TEST_CASE("linear ticks are multiples of a 1-2-5 step inside the range") {
  // The old axes cut the range in five: 0.612, 1.22, 1.84 ...
  CHECK(linear_ticks(0.612, 3.1, 6) == std::vector<double>{1.0, 1.5, 2.0, 2.5, 3.0});
  CHECK(linear_ticks(0, 900, 10) == std::vector<double>{0, 100, 200, 300, 400, 500, 600, 700, 800, 900});
  CHECK(linear_ticks(0, 900, 6) == std::vector<double>{0, 200, 400, 600, 800});
  CHECK(linear_ticks(-3, 100, 3) == std::vector<double>{0, 50, 100});
  for (double lo : {0.0, 0.013, 1.7, 123.0})
    for (double span : {0.05, 1.0, 7.3, 950.0, 1e6})
      for (int max_count : {2, 5, 9}) {
        const auto ticks = linear_ticks(lo, lo + span, max_count);
        CAPTURE(lo);
        CAPTURE(span);
        CAPTURE(max_count);
        REQUIRE(!ticks.empty());
        CHECK(static_cast<int>(ticks.size()) <= max_count);
        CHECK(ticks.front() >= lo - 1e-9 * span);
        CHECK(ticks.back() <= lo + span + 1e-9 * span);
        if (ticks.size() >= 2) {
          const double step = tick_step(ticks), power = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
          const double mantissa = step / power;
          CHECK((std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 || std::abs(mantissa - 5) < 1e-6));
        }
      }
}

TEST_CASE("log ticks and tick labels") {
  CHECK(log_ticks(0.0015, 3, false) == std::vector<double>{0.01, 0.1, 1});
  const auto with_2_and_5 = log_ticks(0.0015, 3, true);
  REQUIRE(with_2_and_5.size() == 10);  // 0.002 0.005 0.01 0.02 0.05 0.1 0.2 0.5 1 2
  CHECK(with_2_and_5.front() == doctest::Approx(0.002));
  CHECK(with_2_and_5.back() == doctest::Approx(2));
  CHECK(log_ticks(1e-6, 10, false, 2) == std::vector<double>{1e-6, 1e-4, 0.01, 1});
  CHECK(log_tick_label(0.005) == "0.005");
  CHECK(log_tick_label(1e-5) == "1e-05");
  CHECK(tick_label(0.5, 0.1) == "0.5");
  CHECK(tick_label(2, 0.5) == "2.0");
  CHECK(tick_label(400, 100) == "400");
  CHECK(tick_label(20000, 5000) == "20k");
  CHECK(tick_label(1500000, 500000) == "1.5M");
  CHECK(tick_label(-0.0, 0.2) == "0.0");
}

TEST_CASE("smoothing: a round window, and a running mean") {
  CHECK(smoothing_window(10) == 1);
  CHECK(smoothing_window(900) == 20);
  CHECK(smoothing_window(1000) == 20);
  CHECK(smoothing_window(4000) == 100);
  const Points mean = running_mean({{1, 4}, {2, 2}, {3, 6}, {4, 0}}, 2);
  REQUIRE(mean.size() == 4);
  CHECK(mean[0].second == 4);
  CHECK(mean[1].second == 3);
  CHECK(mean[2].second == 4);
  CHECK(mean[3].second == 3);
}

TEST_CASE("training curves: a log axis only past a decade") {
  SUBCASE("the copy task's loss falls three decades: log axis") {
    const Canvas c = curves_figure(900, 2.8, 0.002, true, 0);
    CHECK(count(c.svg(), "(log scale)") == 1);
    CHECK(count(c.svg(), ">0.01<") == 1);  // a decade's label
    CHECK(layout_problems(c).empty());
  }
  SUBCASE("char_lm's falls from 4.3 to 1.5: linear, with bits on the right") {
    const Canvas c = curves_figure(1000, 4.3, 1.5, false, 1 / std::log(2.0));
    CHECK(count(c.svg(), "(log scale)") == 0);
    CHECK(count(c.svg(), "bits per character") == 1);
    CHECK(layout_problems(c).empty());
  }
}

TEST_CASE("training curves: clean layouts for runs of 1 to 20 million steps, losses over 0 to 7 decades") {
  for (int steps : {1, 2, 7, 60, 900, 12345, 20'000'000})
    for (double last : {3.0, 1.0, 0.3, 1e-3, 1e-7})
      for (bool accuracy : {false, true})
        for (double right : {0.0, 1.4427}) {
          CAPTURE(steps);
          CAPTURE(last);
          CAPTURE(accuracy);
          CAPTURE(right);
          const Canvas c = curves_figure(steps, 3.0, last, accuracy, right);
          const auto problems = layout_problems(c);
          CHECK_MESSAGE(problems.empty(), summary(problems));
        }
}

// Every grid of heads_from to heads_to heads, 1 to 6 layers and 3 to 64 positions lays out clean.
static void check_grids(int heads_from, int heads_to) {
  size_t layouts = 0;
  for (int heads = heads_from; heads <= heads_to; ++heads)
    for (int layers = 1; layers <= 6; ++layers)
      for (size_t length = 3; length <= 64; ++length) {
        const Canvas c = draw_attention_grid(seq2seq_grid(heads, layers, length, length));
        const auto problems = layout_problems(c);
        CAPTURE(heads);
        CAPTURE(layers);
        CAPTURE(length);
        REQUIRE_MESSAGE(problems.empty(), summary(problems));
        // Every label was placed: 2 × length per map, one header per head, 3 names per row.
        REQUIRE(c.texts().size() >=
                static_cast<size_t>(3 * layers * heads) * 2 * length + static_cast<size_t>(heads + 9 * layers));
        ++layouts;
      }
  CHECK(layouts == static_cast<size_t>(heads_to - heads_from + 1) * 6 * 62);
}

// Four cases, so that each runs in well under a second.
TEST_CASE("attention grid: a clean layout for 1 and 2 heads, 1 to 6 layers, 3 to 64 positions") { check_grids(1, 2); }
TEST_CASE("attention grid: a clean layout for 3 and 4 heads, 1 to 6 layers, 3 to 64 positions") { check_grids(3, 4); }
TEST_CASE("attention grid: a clean layout for 5 and 6 heads, 1 to 6 layers, 3 to 64 positions") { check_grids(5, 6); }
TEST_CASE("attention grid: a clean layout for 7 and 8 heads, 1 to 6 layers, 3 to 64 positions") { check_grids(7, 8); }

TEST_CASE("attention grid: maps of unequal lengths, and cells drawn square in 64 shades") {
  const Canvas c = draw_attention_grid(seq2seq_grid(3, 2, 5, 12));
  CHECK(layout_problems(c).empty());

  AttentionGrid grid = seq2seq_grid(2, 1, 4, 4);
  for (auto& row : grid.rows) {
    std::vector<double> diagonal(16, 0.0);
    for (int i = 0; i < 4; ++i) diagonal[static_cast<size_t>(5 * i)] = 1.0;
    row.heads = {diagonal, std::vector<double>(16, 0.25)};
  }
  const std::string svg = draw_attention_grid(grid).svg();
  CHECK(weight_color(0) == "#ffffff");
  CHECK(weight_color(1) == "#0a2464");
  // Each shade is one path of square cells: "M x y h c v c h -c z".
  CHECK(count(svg, "<path fill=\"" + weight_color(1) + "\"") == 3);     // the diagonals
  CHECK(count(svg, "<path fill=\"" + weight_color(0.25) + "\"") == 3);  // the uniform maps
  CHECK(count(svg, "h24v24h-24z") == 3 * 2 * 16);                       // 4 positions: 24 px cells

  grid.rows[0].heads.pop_back();
  CHECK_THROWS_AS(draw_attention_grid(grid), cppgrad::Error);
}
