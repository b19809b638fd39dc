// The few measurements the lessons share: how far apart two tensors are, how alike two
// tensors point, and whether anything in a tensor is NaN or infinite.
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

}  // namespace lessons
