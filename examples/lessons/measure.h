// The few measurements the lessons share: how far apart two tensors are, how alike two
// tensors point, whether anything in a tensor is NaN or infinite, and when one set of runs
// learned better than another.
#pragma once

#include <cmath>
#include <vector>

#include "cppgrad.h"

namespace lessons {

// The elements as doubles, row-major, whatever the dtype or layout.
std::vector<double> values(const cppgrad::Tensor& t);

// Largest |a - b| over the elements (shapes must agree). NaN if either holds a NaN: a lesson
// must never report "equal" for two tensors that are both broken.
double max_abs_diff(const cppgrad::Tensor& a, const cppgrad::Tensor& b);
// The larger of a running maximum and a new value, NaN if either is NaN (std::max(worst, NaN)
// keeps `worst`, and a check of the maximum would pass a NaN).
inline double worst_of(double so_far, double value) {
  if (std::isnan(so_far) || std::isnan(value)) return std::nan("");
  return value > so_far ? value : so_far;
}

// a·b / (|a| |b|) of the two tensors flattened: 1 = same direction, 0 = unrelated.
double cosine(const cppgrad::Tensor& a, const cppgrad::Tensor& b);

// The mean of cosine(items[i], items[j]) over all pairs i < j.
double mean_pairwise_cosine(const std::vector<cppgrad::Tensor>& items);

// How many elements are NaN or ±inf.
int64_t count_nonfinite(const cppgrad::Tensor& t);

// √(Σ x²) of all elements.
double norm(const cppgrad::Tensor& t);

// The mean of the scores, and their sample standard deviation (0 for a single score): a lesson's
// figure over seeds and its "spread".
double mean(const std::vector<double>& scores);
double spread(const std::vector<double>& scores);

// Whether the scores a (one per seed) beat b's on the same seeds clearly: higher on every seed,
// and the means apart by more than the larger of the two spreads. Never with one seed, whose
// spread is unknown. A mean beyond the spread alone is not enough: on three seeds a single
// lucky seed makes one, and which seed is lucky moves with the BLAS kernel.
bool clearly_higher(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace lessons
