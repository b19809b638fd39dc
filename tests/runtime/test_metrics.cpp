// The training log (runtime/metrics.h): CRC-32C and the TFRecord framing against published
// values, the JSONL lines, reading them back into the loss curves, and refusing what is not a
// log. (The event file's protobufs are read independently by tests/runtime/tensorboard.)
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "runtime/error.h"
#include "runtime/metrics.h"
#include "runtime/plot/curves.h"

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
  CHECK(jsonl.find(R"("histogram":{"min":1,"max":4,"num":4,"sum":10,"sum_squares":30)") != std::string::npos);
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

TEST_CASE("metrics: each Logger starts its own event file, whose first record names the version") {
  TempDir dir("events");
  metrics::Logger a(dir.path), b(dir.path);
  CHECK(a.event_file() != b.event_file());
  CHECK(std::filesystem::path(a.event_file()).filename().string().rfind("events.out.tfevents.", 0) == 0);
  const std::string bytes = read_all(a.event_file());
  CHECK(bytes.find("brain.Event:2") != std::string::npos);
}
