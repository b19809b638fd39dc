#include "lessons/measure.h"

#include <algorithm>
#include <cmath>

using namespace cppgrad;

namespace lessons {

std::vector<double> values(const Tensor& t) { return t.detach().to(kFloat64).contiguous().to_vector<double>(); }

double max_abs_diff(const Tensor& a, const Tensor& b) {
  CPPGRAD_CHECK(a.shape() == b.shape(), "max_abs_diff: shapes {} and {} differ", shape_str(a.shape()),
                shape_str(b.shape()));
  std::vector<double> x = values(a), y = values(b);
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(x[i] - y[i]);
    if (std::isnan(d)) return std::nan("");  // std::max would quietly drop it
    worst = std::max(worst, d);
  }
  return worst;
}

double cosine(const Tensor& a, const Tensor& b) {
  std::vector<double> x = values(a), y = values(b);
  CPPGRAD_CHECK(x.size() == y.size(), "cosine: {} and {} elements", x.size(), y.size());
  double dot = 0.0, xx = 0.0, yy = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    dot += x[i] * y[i];
    xx += x[i] * x[i];
    yy += y[i] * y[i];
  }
  return dot / std::sqrt(xx * yy);
}

double mean_pairwise_cosine(const std::vector<Tensor>& items) {
  double total = 0.0;
  int64_t pairs = 0;
  for (size_t i = 0; i < items.size(); ++i)
    for (size_t j = i + 1; j < items.size(); ++j) {
      total += cosine(items[i], items[j]);
      ++pairs;
    }
  return pairs > 0 ? total / static_cast<double>(pairs) : std::nan("");
}

int64_t count_nonfinite(const Tensor& t) {
  std::vector<double> x = values(t);
  return std::count_if(x.begin(), x.end(), [](double v) { return !std::isfinite(v); });
}

double norm(const Tensor& t) {
  double total = 0.0;
  for (double v : values(t)) total += v * v;
  return std::sqrt(total);
}

double mean(const std::vector<double>& scores) {
  double total = 0.0;
  for (double v : scores) total += v;
  return scores.empty() ? std::nan("") : total / static_cast<double>(scores.size());
}

double spread(const std::vector<double>& scores) {
  if (scores.size() < 2) return 0.0;
  const double m = mean(scores);
  double squares = 0.0;
  for (double v : scores) squares += (v - m) * (v - m);
  return std::sqrt(squares / static_cast<double>(scores.size() - 1));
}

bool clearly_higher(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() < 2 || a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] > b[i])) return false;
  return mean(a) - mean(b) > std::max(spread(a), spread(b));
}

}  // namespace lessons
