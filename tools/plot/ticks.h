// Round axis ticks: 1-2-5 steps on a linear axis, powers of ten (and 2 and 5 times them) on a
// log axis, and their labels. Shared by the training curves and the attention grid's colour bar.
#pragma once

#include <string>
#include <vector>

namespace cppgrad::plot {

// The multiples of a 1-2-5 step (…, 0.1, 0.2, 0.5, 1, 2, 5, 10, …) inside [lo, hi]: the smallest
// step that gives at most max_count ticks.
std::vector<double> linear_ticks(double lo, double hi, int max_count);
// The 1-2-5 step linear_ticks() chose for these ticks (their spacing).
double tick_step(const std::vector<double>& ticks);
// Powers of ten inside [lo, hi] (lo > 0), with 2 and 5 times them when `with_2_and_5`, and only
// every `every`-th power when decades are crowded.
std::vector<double> log_ticks(double lo, double hi, bool with_2_and_5, int every = 1);
// A tick's label: as many decimals as the step needs, 20k and 1.5M for large values.
std::string tick_label(double value, double step);
// A log tick's label: 0.001, 0.02, 500, 1e+06.
std::string log_tick_label(double value);

// The next 1-2-5 step above `step`, itself one: 1 -> 2 -> 5 -> 10 -> 20.
double next_step(double step);

}  // namespace cppgrad::plot
