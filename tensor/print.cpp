// Printing in PyTorch's style:
//   tensor([[1.0000, 2.5000],
//           [3.0000, 4.0000]], shape=[2,2])
// Large tensors show the first and last three entries of each dim around "...".
#include <algorithm>
#include <cmath>
#include <ostream>

#include "tensor/kernels.h"
#include "tensor/tensor.h"

namespace cppgrad {

namespace {

constexpr int64_t kElideAbove = 1000;  // elements
constexpr int64_t kEdgeItems = 3;

struct NumberStyle {
  bool integral = false;    // every value a whole number: print "3."
  bool scientific = false;  // magnitudes too far apart: print "1.0000e+04"
  size_t width = 0;
};

std::string format_number(double v, DType dtype, const NumberStyle& style) {
  if (dtype == kBool) return v != 0 ? "True" : "False";
  if (dtype == kInt64) return fmt::format("{}", static_cast<int64_t>(v));
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (style.scientific) return fmt::format("{:.4e}", v);
  if (style.integral) return fmt::format("{:.0f}.", v);
  return fmt::format("{:.4f}", v);
}

// Which indices of a dim of `size` are shown; -1 marks the "..." gap.
std::vector<int64_t> shown_indices(int64_t size, bool elide) {
  std::vector<int64_t> idx;
  if (!elide || size <= 2 * kEdgeItems) {
    for (int64_t i = 0; i < size; ++i) idx.push_back(i);
    return idx;
  }
  for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
  idx.push_back(-1);
  for (int64_t i = size - kEdgeItems; i < size; ++i) idx.push_back(i);
  return idx;
}

void collect(const Tensor& t, bool elide, std::vector<double>& out) {
  if (t.dim() == 0) {
    out.push_back(t.item<double>());
    return;
  }
  for (int64_t i : shown_indices(t.shape()[0], elide))
    if (i >= 0) collect(kernels::select(t, 0, i), elide, out);
}

void render(const Tensor& t, bool elide, const NumberStyle& style, size_t indent, std::string& out) {
  if (t.dim() == 0) {
    std::string s = format_number(t.item<double>(), t.dtype(), style);
    out += std::string(style.width - std::min(style.width, s.size()), ' ') + s;
    return;
  }
  out += '[';
  auto idx = shown_indices(t.shape()[0], elide);
  for (size_t j = 0; j < idx.size(); ++j) {
    if (j > 0) {
      out += ',';
      if (t.dim() == 1) {
        out += ' ';
      } else {
        out += std::string(t.dim() - 1, '\n');
        out += std::string(indent + 1, ' ');
      }
    }
    if (idx[j] < 0)
      out += t.dim() == 1 ? " ..." : "...";  // PyTorch pads the gap in a row: "2,  ..., 7"
    else
      render(kernels::select(t, 0, idx[j]), elide, style, indent + 1, out);
  }
  out += ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const bool elide = numel() > kElideAbove;
  std::vector<double> values;
  collect(*this, elide, values);
  NumberStyle style;
  if (is_floating_point()) {
    std::vector<double> finite;
    for (double v : values)
      if (std::isfinite(v)) finite.push_back(std::abs(v));
    style.integral = std::all_of(finite.begin(), finite.end(), [](double v) { return v == std::floor(v); });
    if (!finite.empty()) {
      double hi = *std::max_element(finite.begin(), finite.end());
      double lo = hi;
      for (double v : finite)
        if (v != 0) lo = std::min(lo, v);
      style.scientific = hi > 1e8 || (!style.integral && (lo < 1e-4 || (lo > 0 && hi / lo > 1000)));
    }
  }
  for (double v : values) style.width = std::max(style.width, format_number(v, dtype(), style).size());
  std::string body = "tensor(";
  render(*this, elide, style, 7, body);
  body += fmt::format(", shape={}", shape_str(shape()));
  if (dtype() != kFloat32) body += fmt::format(", dtype={}", dtype_name(dtype()));
  return body + ")";
}

}  // namespace cppgrad
