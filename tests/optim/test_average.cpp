// optim::ExponentialMovingAverage: the update rule, swapping in and out, state round trip, errors.
#include <doctest/doctest.h>

#include "cppgrad.h"
#include "optim_helpers.h"

using namespace cppgrad;
using optimtest::check_values;
using optimtest::param;

TEST_CASE("ExponentialMovingAverage follows average = decay * average + (1 - decay) * parameter") {
  Tensor w = param({1.0, -2.0});
  optim::ExponentialMovingAverage average({w}, 0.9);
  check_values(average.averages()[0], {1.0, -2.0});  // starts as a copy
  {
    NoGradGuard no_grad;
    w.copy_(tensor(std::vector<double>{2.0, 0.0}, {2}));
  }
  average.update();
  check_values(average.averages()[0], {0.9 * 1.0 + 0.1 * 2.0, 0.9 * -2.0 + 0.1 * 0.0});  // 1.1, -1.8
  average.update();
  check_values(average.averages()[0], {0.9 * 1.1 + 0.1 * 2.0, 0.9 * -1.8});  // 1.19, -1.62
  check_values(w, {2.0, 0.0});  // the parameter itself is untouched
}

TEST_CASE("ExponentialMovingAverage::swap exchanges parameters and averages, twice restores them") {
  Tensor w = param({1.0, 2.0, 3.0});
  optim::ExponentialMovingAverage average({w}, 0.5);
  {
    NoGradGuard no_grad;
    w.mul_(3.0);  // 3, 6, 9
  }
  average.update();  // 2, 4, 6
  average.swap();
  check_values(w, {2.0, 4.0, 6.0});
  check_values(average.averages()[0], {3.0, 6.0, 9.0});
  CHECK(w.requires_grad());
  average.swap();
  check_values(w, {3.0, 6.0, 9.0});
  check_values(average.averages()[0], {2.0, 4.0, 6.0});
}

TEST_CASE("ExponentialMovingAverage with decay 0 keeps the last values, so swap changes nothing") {
  Tensor w = param({4.0});
  optim::ExponentialMovingAverage average({w}, 0.0);
  {
    NoGradGuard no_grad;
    w.add_(1.0);
  }
  average.update();
  average.swap();
  check_values(w, {5.0}, 0.0);
}

TEST_CASE("ExponentialMovingAverage state saves and loads, bad input is a clear error") {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  optim::ExponentialMovingAverage average({a, b}, 0.9);
  {
    NoGradGuard no_grad;
    a.add_(10.0);
  }
  average.update();
  const nn::NamedTensors saved = average.state_dict();
  REQUIRE(saved.size() == 2);
  CHECK(saved[0].first == "0");
  CHECK(saved[1].first == "1");

  optim::ExponentialMovingAverage restored({param({0.0, 0.0}), param({0.0})}, 0.9);
  restored.load_state_dict(saved);
  check_values(restored.averages()[0], {2.0, 3.0});
  check_values(restored.averages()[1], {3.0});

  CHECK(optimtest::error_message([&] { restored.load_state_dict({saved[0]}); }).find("'1' is missing") !=
        std::string::npos);
  // A name no average writes, even one that reads as a number, is refused with its name.
  for (const char* name : {"00", "1 ", "2", "99999999999999999999999"})
    CHECK(optimtest::error_message([&] { restored.load_state_dict({saved[0], saved[1], {name, saved[0].second}}); })
              .find(fmt::format("unexpected entry '{}'", name)) != std::string::npos);
  CHECK(optimtest::error_message([&] {
          restored.load_state_dict({saved[0], {"1", zeros({2}, kFloat64)}});
        }).find("'1' is [2], the parameter [1]") != std::string::npos);
  CHECK(optimtest::error_message([] { optim::ExponentialMovingAverage bad({param({1.0})}, 1.0); })
            .find("decay must be in [0, 1), got 1") != std::string::npos);
}
