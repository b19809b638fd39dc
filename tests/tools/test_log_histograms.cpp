// A module's weights and gradients into a training log as histograms (tools/histograms.h).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "cppgrad.h"
#include "tools/tools.h"

using namespace cppgrad;

TEST_CASE("log_histograms: a histogram per parameter, and per gradient once there is one") {
  const std::string dir = (std::filesystem::temp_directory_path() / ("cppgrad_hist_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  manual_seed(3);
  nn::Linear fc(4, 3);
  {
    metrics::Logger log(dir, {.tensorboard = false});
    metrics::log_histograms(log, fc, 0);  // no gradients yet
    fc.forward(ones({2, 4})).sum().backward();
    metrics::log_histograms(log, fc, 1);
    metrics::log_histogram(log, "float64", ones({3}, kFloat64), 1);
    CHECK_THROWS_AS(metrics::log_histogram(log, "ints", ones({3}, kInt64), 1), Error);
  }
  std::ifstream f(dir + "/metrics.jsonl");
  std::stringstream s;
  s << f.rdbuf();
  const std::string text = s.str();
  std::filesystem::remove_all(dir);
  auto count = [&](const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  CHECK(count(R"("tag":"weights/weight")") == 2);
  CHECK(count(R"("tag":"weights/bias")") == 2);
  CHECK(count(R"("tag":"grads/weight")") == 1);
  // The bias's gradient of a sum over 2 rows is 2 everywhere: one bin, all three values.
  CHECK(text.find(R"("tag":"grads/bias","histogram":{"min":2.0,"max":2.0,"num":3,"sum":6.0,"sum_squares":12.0,"bucket_limit":[2.0],"bucket":[3]})") !=
        std::string::npos);
  CHECK(text.find(R"("tag":"float64","histogram":{"min":1.0,"max":1.0,"num":3)") != std::string::npos);
}
