// The training log (tools/metrics.h): CRC-32C and the TFRecord framing against published
// values, the JSONL lines, reading them back into the loss curves, and refusing what is not a
// log. (The event file's protobufs are read independently by tests/tools/tensorboard.)
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>

#include "runtime/error.h"
#include "tools/metrics.h"
#include "tools/plot/curves.h"

using namespace cppgrad;

namespace {

// A fresh directory under the system's temporary one, removed after the test.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name)
      : path((std::filesystem::temp_directory_path() / ("cppgrad_metrics_" + name + "_" + std::to_string(::getpid()))).string()) {
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("metrics: CRC-32C and the TFRecord framing") {
  // The check value every CRC-32C implementation publishes, and RFC 3720's 32 zero bytes.
  CHECK(metrics::crc32c("123456789") == 0xE3069283u);
  CHECK(metrics::crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  const std::string record = metrics::tfrecord("abc");
  REQUIRE(record.size() == 8 + 4 + 3 + 4);
  CHECK(record.substr(0, 8) == std::string("\x03\0\0\0\0\0\0\0", 8));  // the length, little-endian
  CHECK(record.substr(12, 3) == "abc");
  const uint32_t crc = metrics::crc32c("abc");
  CHECK(metrics::masked_crc32c("abc") == ((crc >> 15 | crc << 17) + 0xa282ead8u));
}

TEST_CASE("metrics: the JSONL lines, and the loss curves drawn from them") {
  TempDir dir("jsonl");
  {
    metrics::Logger log(dir.path + "/run", {.tensorboard = false, .csv = true});
    log.scalar("train/loss", 2.5, 10);
    log.scalar("eval/loss", 3.0, 10);
    log.scalar("train/loss", std::nan(""), 20);
    log.scalar("train/loss", 1.25, 30);
    log.histogram("weights/w", std::vector<float>{1, 2, 3, 4}, 30);
    CHECK(log.event_file().empty());
  }
  const std::string jsonl = read_all(dir.path + "/run/metrics.jsonl");
  CHECK(jsonl.find(R"("step":10,)") != std::string::npos);
  CHECK(jsonl.find(R"("tag":"train/loss","value":2.5})") != std::string::npos);
  CHECK(jsonl.find(R"("tag":"train/loss","value":null})") != std::string::npos);  // NaN: JSON has none
  CHECK(jsonl.find(R"("histogram":{"min":1.0,"max":4.0,"num":4,"sum":10.0,"sum_squares":30.0)") != std::string::npos);
  const std::string csv = read_all(dir.path + "/run/metrics.csv");
  CHECK(csv.rfind("step,wall_time,tag,value\n10,", 0) == 0);

  const auto train = metrics::read_scalars(dir.path + "/run/metrics.jsonl", "train/loss");
  REQUIRE(train.size() == 3);
  CHECK(train[0] == std::pair<double, double>(10, 2.5));
  CHECK(std::isnan(train[1].second));
  CHECK(train[2] == std::pair<double, double>(30, 1.25));
  const plot::Canvas canvas = plot::draw_loss_curves_from_log(dir.path + "/run/metrics.jsonl", {.title = "from the log"});
  CHECK(canvas.svg().find("from the log") != std::string::npos);
  CHECK(plot::layout_problems(canvas).empty());
  CHECK_THROWS_WITH_AS(plot::draw_loss_curves_from_log(dir.path + "/run/metrics.jsonl", {}, "no/such"),
                       doctest::Contains("has no value tagged 'no/such'"), Error);
}

TEST_CASE("metrics: a file that is not a log, and a directory that cannot be made, are refused") {
  TempDir dir("hostile");
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/metrics.jsonl";
  for (const char* bad : {"not json\n", "[1,2]\n", "{\"step\":1}\n", "{\"step\":1,\"tag\":\"a\",\"value\":\"x\"}\n",
                          "{\"step\":\"1\",\"tag\":\"a\",\"value\":1}\n"}) {
    CAPTURE(bad);
    std::ofstream(path, std::ios::binary) << "{\"step\":0,\"tag\":\"a\",\"value\":1}\n" << bad;
    CHECK_THROWS_WITH_AS(metrics::read_scalars(path, "a"), doctest::Contains("line 2"), Error);
  }
  CHECK_THROWS_AS(metrics::read_scalars(dir.path, "a"), Error);  // a directory
  std::ofstream(dir.path + "/file") << "x";
  CHECK_THROWS_WITH_AS(metrics::Logger(dir.path + "/file/sub"), doctest::Contains("cannot create the directory"), Error);
  CHECK_THROWS_AS(metrics::Logger(dir.path, {.histogram_bins = 0}), Error);
}

TEST_CASE("metrics: a log whose last line a killed run cut short is read up to it, with a warning") {
  TempDir dir("cut");
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/metrics.jsonl";
  const std::string whole = "{\"step\":1,\"tag\":\"a\",\"value\":1}\n{\"step\":2,\"tag\":\"a\",\"value\":2}\n";
  const std::string cut = "{\"step\":3,\"tag\":\"a\",\"val";
  std::ofstream(path, std::ios::binary) << whole << cut;
  std::vector<std::string> warnings;
  const auto points = metrics::read_scalars(path, "a", &warnings);
  CHECK(points == std::vector<std::pair<double, double>>{{1, 1}, {2, 2}});
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("line 3 has no newline at its end") != std::string::npos);
  CHECK(warnings[0].find("left out") != std::string::npos);

  // Cut inside a UTF-8 sequence, or ended by the zeros a crash can leave: the same.
  for (const std::string& tail : {std::string("{\"step\":3,\"tag\":\"\xc3"), std::string("{\"step\":3,\0\0\0", 13)}) {
    std::ofstream(path, std::ios::binary) << whole << tail;
    warnings.clear();
    CHECK(metrics::read_scalars(path, "a", &warnings).size() == 2);
    CHECK(warnings.size() == 1);
  }
  // The same line ended by a newline was written whole as it is: refused, not skipped.
  std::ofstream(path, std::ios::binary) << whole << cut << "\n";
  CHECK_THROWS_WITH_AS(metrics::read_scalars(path, "a"), doctest::Contains("line 3 is not JSON"), Error);
  // A whole last line without its newline is kept, and warns of nothing.
  std::ofstream(path, std::ios::binary) << whole << "{\"step\":3,\"tag\":\"a\",\"value\":3}";
  warnings.clear();
  CHECK(metrics::read_scalars(path, "a", &warnings).size() == 3);
  CHECK(warnings.empty());
  // Parsed, but not a logged value: refused even on the last line (a cut line never parses).
  std::ofstream(path, std::ios::binary) << whole << "{\"tag\":\"a\",\"value\":3}";
  CHECK_THROWS_WITH_AS(metrics::read_scalars(path, "a"), doctest::Contains("line 3 has no \"step\""), Error);
}

TEST_CASE("metrics: each problem of a log's line is named with the line's number") {
  TempDir dir("problems");
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/metrics.jsonl";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"step\":1,\"tag\":\"a\",\"value\":1e999}", "line 2 has a number too large for a double"},
      {"{\"step\":1e999,\"tag\":\"a\",\"value\":1}", "line 2 has a number too large for a double"},
      {std::string("{\"step\":1,\"tag\":\"a") + '\0' + "\",\"value\":1}", "line 2 holds a NUL byte at column 19"},
      {"{\"step\":1,\"tag\":\"a\xff\",\"value\":1}", "line 2 is not valid UTF-8 (byte 0xff at column 19)"},
      {"{\"step\":1,\"tag\":\"\xc0\xaf\",\"value\":1}", "line 2 is not valid UTF-8 (byte 0xc0"},  // overlong '/'
      {"{\"step\":1,\"tag\":\"\xed\xa0\x80\",\"value\":1}", "line 2 is not valid UTF-8 (byte 0xed"},  // a surrogate
      {"{\"tag\":\"a\",\"value\":1}", "line 2 has no \"step\""},
      {"{\"step\":1e30,\"tag\":\"a\",\"value\":1}", "line 2 has a \"step\" of 1e+30 (not a whole number in [0, 2^53])"},
      {"{\"step\":-1,\"tag\":\"a\",\"value\":1}", "line 2 has a \"step\" of -1"},
      {"{\"step\":1.5,\"tag\":\"a\",\"value\":1}", "line 2 has a \"step\" of 1.5"},
      {"{\"step\":1,\"value\":1}", "line 2 has no \"tag\""},
      {"{\"step\":1,\"tag\":\"a\",\"value\":[1]}", "line 2 has a \"value\" that is not a number"},
      {"{\"step\":1,\"tag\":\"a\",", "line 2 is not JSON"},
  };
  for (const auto& [line, message] : cases) {
    CAPTURE(message);
    // The bad line between two good ones, so that it is no cut last line.
    std::ofstream(path, std::ios::binary) << "{\"step\":0,\"tag\":\"a\",\"value\":1}\n"
                                          << line << "\n{\"step\":2,\"tag\":\"a\",\"value\":1}\n";
    CHECK_THROWS_WITH_AS(metrics::read_scalars(path, "a"), doctest::Contains(message.c_str()), Error);
  }
}

TEST_CASE("metrics: a line longer than the limit is refused by its number, not read into memory whole") {
  TempDir dir("long");
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/metrics.jsonl";
  {
    std::ofstream out(path, std::ios::binary);
    out << "{\"step\":0,\"tag\":\"a\",\"value\":1}\n{\"step\":1,\"tag\":\"";
    out << std::string(metrics::kLongestLogLine, 'x') << "\",\"value\":1}\n";
  }
  CHECK_THROWS_WITH_AS(metrics::read_scalars(path, "a"),
                       doctest::Contains(fmt::format("line 2 is longer than the limit of {} bytes", metrics::kLongestLogLine).c_str()),
                       Error);
  // Just under the limit is read: the limit is on the line, not on the file.
  {
    std::ofstream out(path, std::ios::binary);
    out << "{\"step\":0,\"tag\":\"a\",\"value\":1}\n";
    const std::string head = "{\"step\":1,\"tag\":\"", tail = "\",\"value\":1}";
    out << head << std::string(metrics::kLongestLogLine - head.size() - tail.size(), 'x') << tail << "\n";
    out << "{\"step\":2,\"tag\":\"a\",\"value\":1}\n";
  }
  CHECK(metrics::read_scalars(path, "a").size() == 2);
}

TEST_CASE("metrics: each Logger starts its own event file, whose first record names the version") {
  TempDir dir("events");
  metrics::Logger a(dir.path), b(dir.path);
  CHECK(a.event_file() != b.event_file());
  CHECK(std::filesystem::path(a.event_file()).filename().string().rfind("events.out.tfevents.", 0) == 0);
  const std::string bytes = read_all(a.event_file());
  CHECK(bytes.find("brain.Event:2") != std::string::npos);
}
