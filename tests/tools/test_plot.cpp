// The training pictures and progress line (tools/plot/, tools/progress.h): the
// one-call loss figure, writing SVG files, and the progress line's format. (The layouts of many
// figure shapes are checked in examples/common/test_pictures.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cppgrad.h"
#include "tools/tools.h"

using namespace cppgrad;
using namespace cppgrad::plot;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

Points falling_loss(int steps) {
  Points p;
  for (int s = 1; s <= steps; ++s) p.emplace_back(s, 3.0 * std::exp(-s / 300.0) + 0.1 * (1 + std::sin(s)));
  return p;
}

// What a FILE* received, read back from the start.
std::string contents(std::FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string text;
  for (int c; (c = std::fgetc(file)) != EOF;) text += static_cast<char>(c);
  return text;
}

}  // namespace

TEST_CASE("draw_loss_curves: the standard figure in one call, the same as built panel by panel") {
  const Points train = falling_loss(900), held_out = {{300, 1.5}, {600, 0.9}, {900, 0.7}};
  LossCurves figure{.title = "a run", .notes = {"d_model 8"}, .train = train, .held_out = held_out};
  Panel accuracy;
  accuracy.title = "held-out accuracy";
  accuracy.curves = {{"held-out", {{300, 10}, {900, 90}}, "#d62728", CurveStyle::Dots}};
  figure.more = {accuracy};
  const Canvas one_call = draw_loss_curves(figure);

  // By hand: every step faint, a running mean over a round window, the evaluations as dots.
  const int window = smoothing_window(train.size());
  CHECK(window == 20);
  Panel loss;
  loss.title = "loss", loss.y_label = "loss";
  loss.curves = {{"train, each step", train, "#1f77b4", CurveStyle::Faint},
                 {"train, mean of 20 steps", running_mean(train, window), "#1f77b4", CurveStyle::Line},
                 {"held-out", held_out, "#d62728", CurveStyle::Dots}};
  const Canvas by_hand = draw_training_curves({"a run", {"d_model 8"}, "training step", {loss, accuracy}});
  CHECK(one_call.svg() == by_hand.svg());
  CHECK(count(one_call.svg(), ">train, mean of 20 steps<") == 1);
  CHECK(count(one_call.svg(), ">held-out accuracy<") == 1);
  CHECK(layout_problems(one_call).empty());
}

TEST_CASE("draw_loss_curves: names, a second scale, and a run with no evaluation yet") {
  LossCurves figure{.title = "char_lm", .train = falling_loss(15)};
  figure.train_name = "train, dropout 0.1", figure.held_out_name = "held-out (64 windows)";
  figure.y_label = "nats per character", figure.right_scale = 1 / std::log(2.0), figure.right_label = "bits per character";
  const Canvas c = draw_loss_curves(figure);
  const std::string svg = c.svg();
  CHECK(count(svg, ">train, dropout 0.1, each step<") == 1);
  CHECK(count(svg, ">train, dropout 0.1, mean of 1 steps<") == 1);  // 15 steps: no smoothing
  CHECK(count(svg, ">held-out (64 windows)<") == 1);
  CHECK(count(svg, ">bits per character<") == 1);
  CHECK(layout_problems(c).empty());
}

TEST_CASE("Canvas::write: an SVG file, or an Error naming the path") {
  const auto dir = std::filesystem::temp_directory_path() / "cppgrad_test_plot";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "loss.svg").string();
  draw_loss_curves({.title = "t", .train = falling_loss(50)}).write(path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str().starts_with("<svg "));
  CHECK(text.str().ends_with("</svg>\n"));
  std::filesystem::remove_all(dir);
  const Canvas c(10, 10);
  const std::string missing = (dir / "no" / "such" / "dir.svg").string();
  CHECK_THROWS_WITH_AS(c.write(missing), doctest::Contains(("svg: " + missing + ": cannot create").c_str()), Error);
}

TEST_CASE("Progress: a line per report in a log, the held-out loss and its note after it") {
  std::FILE* log = std::tmpfile();
  REQUIRE(log != nullptr);
  Progress progress(100, 0, log);
  progress.update(10, 1.23456, 1e-3, 5000);
  progress.update(20, 0.5, 2.5e-4, 5000, false, 0.75, "97.0% right");
  progress.finish();
  const std::string text = contents(log);
  std::fclose(log);
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].starts_with("step    10/100  loss 1.2346  lr 1.00e-03  "));
  CHECK(lines[0].find(" tok/s  elapsed ") != std::string::npos);
  CHECK(lines[1].starts_with("step    20/100  loss 0.5000  lr 2.50e-04  "));
  CHECK(lines[1].ends_with("  held-out 0.7500, 97.0% right"));
  CHECK(text.find('\r') == std::string::npos);  // not a terminal: nothing rewritten in place
}

TEST_CASE("format_duration: seconds, minutes, hours") {
  CHECK(format_duration(4.24) == "4.2s");
  CHECK(format_duration(59.4) == "59.4s");
  CHECK(format_duration(187) == "3m07s");
  CHECK(format_duration(7500) == "2h05m");
}
