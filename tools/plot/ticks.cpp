#include "tools/plot/ticks.h"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>

namespace cppgrad::plot {

double next_step(double step) {
  const double power = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double mantissa = step / power;
  return mantissa < 1.5 ? 2 * power : mantissa < 3.5 ? 5 * power : 10 * power;
}

std::vector<double> linear_ticks(double lo, double hi, int max_count) {
  if (!(hi > lo) || max_count < 1) return {lo};
  double step = std::pow(10.0, std::floor(std::log10((hi - lo) / max_count)) - 1);
  auto count = [&](double st) { return std::floor(hi / st + 1e-9) - std::ceil(lo / st - 1e-9) + 1; };
  while (count(step) > max_count) step = next_step(step);
  std::vector<double> ticks;
  for (double k = std::ceil(lo / step - 1e-9); k <= std::floor(hi / step + 1e-9); ++k)
    ticks.push_back(k * step == 0 ? 0.0 : k * step);  // no "-0"
  return ticks;
}

double tick_step(const std::vector<double>& ticks) { return ticks.size() < 2 ? 1.0 : ticks[1] - ticks[0]; }

std::vector<double> log_ticks(double lo, double hi, bool with_2_and_5, int every) {
  std::vector<double> ticks;
  if (!(lo > 0) || !(hi > lo)) return ticks;
  const int first = static_cast<int>(std::floor(std::log10(lo))), last = static_cast<int>(std::ceil(std::log10(hi)));
  for (int k = first; k <= last; ++k) {
    const double decade = std::pow(10.0, k);
    const bool labelled_decade = ((k % every) + every) % every == 0;
    for (double m : {1.0, 2.0, 5.0}) {
      if (m != 1.0 && !with_2_and_5) continue;
      if (m == 1.0 && !labelled_decade) continue;
      const double v = m * decade;
      if (v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12)) ticks.push_back(v);
    }
  }
  return ticks;
}

std::string tick_label(double value, double step) {
  if (std::abs(value) < 1e-9 * step) value = 0;  // neither "-0" nor "1e-17"
  // Thousands and millions as 20k and 1.5M, when the step is a whole number of them.
  if (std::abs(value) >= 1e6 && step >= 1e5) return tick_label(value / 1e6, step / 1e6) + "M";
  if (std::abs(value) >= 1e4 && step >= 1e2) return tick_label(value / 1e3, step / 1e3) + "k";
  const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  return fmt::format("{:.{}f}", value + 0.0, decimals);  // + 0.0 turns -0 into 0
}

std::string log_tick_label(double value) { return fmt::format("{:g}", value); }

}  // namespace cppgrad::plot
