#include "nn/rotary.h"

#include <cmath>

#include "autograd/trace.h"

namespace cppgrad::nn {

namespace functional {

Tensor rotary_angles(int64_t length, int64_t dim, int64_t position_offset, double base) {
  CPPGRAD_CHECK(dim > 0 && dim % 2 == 0, "rotary: dim {} must be positive and even (features turn in pairs)", dim);
  CPPGRAD_CHECK(base > 0.0 && std::isfinite(base), "rotary: base {} must be positive and finite", base);
  CPPGRAD_CHECK(length >= 0 && position_offset >= 0, "rotary: length {} and position_offset {} must not be negative",
                length, position_offset);
  // The positions are counted in float64, exact below 2⁵³, as attention's are.
  CPPGRAD_CHECK(length <= (int64_t{1} << 53) - position_offset, "rotary: position_offset {} + length {} passes 2^53, "
                "where the positions, counted in float64, stop being exact", position_offset, length);
  autograd::TraceScope trace;  // positions 0 .. length−1: ONNX takes the length from the graph
  // θ_i = base^(−2i/d): (1, d/2);  m: (length, 1)  ->  m·θ_i: (length, d/2)
  Tensor i = arange(static_cast<double>(dim / 2), kFloat64).reshape({1, dim / 2});
  Tensor theta = (i * (-2.0 * std::log(base) / static_cast<double>(dim))).exp();
  Tensor m = arange(static_cast<double>(position_offset), static_cast<double>(position_offset + length), 1.0, kFloat64)
                 .reshape({length, 1});
  return trace.note(m * theta, [&] {
    return autograd::TracedOp{"rotary_angles", {}, {{"dim", dim}, {"position_offset", position_offset}, {"base", base}}};
  });
}

namespace {

void check_rotatable(const Tensor& x) {
  CPPGRAD_CHECK(x.dim() >= 2 && x.is_floating_point(),
                "apply_rotary: x {} ({}) must be floating and at least (T, d)", shape_str(x.shape()),
                dtype_name(x.dtype()));
  CPPGRAD_CHECK(x.size(-1) % 2 == 0, "apply_rotary: the last dim {} of x {} must be even (features turn in pairs)",
                x.size(-1), shape_str(x.shape()));
}

// Turns x's pairs by `angles` (float64, (T, d/2) or anything that broadcasts to x's (..., T, d/2)).
Tensor rotate_pairs(const Tensor& x, const Tensor& angles, RotaryLayout layout) {
  const int64_t d = x.size(-1);
  Tensor cos = angles.cos().to(x.dtype()), sin = angles.sin().to(x.dtype());
  if (layout == RotaryLayout::Halves) {
    Tensor a = x.narrow(-1, 0, d / 2), b = x.narrow(-1, d / 2, d / 2);  // (..., T, d/2) each
    return cat({a * cos - b * sin, a * sin + b * cos}, -1);            // (..., T, d)
  }
  Shape pairs_shape = x.shape();
  pairs_shape.back() = d / 2;
  pairs_shape.push_back(2);
  Tensor pairs = x.reshape(pairs_shape);                 // (..., T, d) -> (..., T, d/2, 2)
  Tensor a = pairs.select(-1, 0), b = pairs.select(-1, 1);  // (..., T, d/2) each
  return stack({a * cos - b * sin, a * sin + b * cos}, -1).reshape(x.shape());  // (..., T, d/2, 2) -> (..., T, d)
}

}  // namespace

Tensor apply_rotary(const Tensor& x, int64_t position_offset, double base, RotaryLayout layout) {
  check_rotatable(x);
  return rotate_pairs(x, rotary_angles(x.size(-2), x.size(-1), position_offset, base), layout);  // angles (T, d/2)
}

Tensor apply_rotary(const Tensor& x, const Tensor& positions, double base, RotaryLayout layout) {
  check_rotatable(x);
  const int64_t T = x.size(-2), d = x.size(-1);
  CPPGRAD_CHECK(x.dim() >= 3 && positions.dtype() == kInt64 && (positions.shape() == Shape{x.size(0), T}),
                "apply_rotary: positions {} ({}) must be int64 (B, T) = [{},{}] for x {}", shape_str(positions.shape()),
                dtype_name(positions.dtype()), x.dim() >= 3 ? x.size(0) : 0, T, shape_str(x.shape()));
  CPPGRAD_CHECK(positions.numel() == 0 || positions.min().item<int64_t>() >= 0,
                "apply_rotary: positions must not be negative, got a minimum of {}", positions.min().item<int64_t>());
  // θ_i for positions 0 and 1 gives the rates; m·θ_i: (B, T, 1) · (1, 1, d/2) -> (B, T, d/2)
  Tensor theta = rotary_angles(1, d, 1, base).reshape({1, 1, d / 2});
  Tensor angles = positions.to(kFloat64).unsqueeze(-1) * theta;
  Shape angles_shape(static_cast<size_t>(x.dim()), 1);  // (B, 1, ..., 1, T, d/2): the same for every head
  angles_shape.front() = x.size(0);
  angles_shape[angles_shape.size() - 2] = T;
  angles_shape.back() = d / 2;
  return rotate_pairs(x, angles.reshape(angles_shape), layout);
}

}  // namespace functional

RotaryEmbedding::RotaryEmbedding(const RotaryEmbeddingOptions& opts) : options(opts) {
  CPPGRAD_CHECK(options.dim() > 0 && options.dim() % 2 == 0,
                "RotaryEmbedding: dim {} must be positive and even (features turn in pairs)", options.dim());
  CPPGRAD_CHECK(options.base() > 0.0 && std::isfinite(options.base()), "RotaryEmbedding: base {} must be positive",
                options.base());
}

Tensor RotaryEmbedding::forward(const Tensor& x, int64_t position_offset) const {
  CPPGRAD_CHECK(x.dim() >= 2 && x.size(-1) == options.dim(), "RotaryEmbedding: x {} must end in dim {}",
                shape_str(x.shape()), options.dim());
  return functional::apply_rotary(x, position_offset, options.base(), options.layout());
}

std::string RotaryEmbedding::extra_repr() const {
  return fmt::format("dim={}, base={}, layout={}", options.dim(), options.base(),
                     options.layout() == RotaryLayout::Halves ? "halves" : "interleaved");
}

}  // namespace cppgrad::nn
