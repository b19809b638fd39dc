#include "nn/init.h"

#include <cmath>

#include "autograd/node.h"
#include "tensor/kernels.h"

namespace cppgrad::nn::init {

std::pair<int64_t, int64_t> fans(const Tensor& t) {
  CPPGRAD_CHECK(t.dim() >= 2, "init: fan_in and fan_out need a tensor of at least 2 dims, got shape {}", shape_str(t.shape()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.shape()[d];
  return {t.shape()[1] * receptive, t.shape()[0] * receptive};
}

namespace {
// Draws in row-major order on the calling thread, so a seed fixes the values.
template <class Draw>
void fill_with(const Tensor& t, std::string_view op, Draw draw) {
  NoGradGuard no_grad;
  Tensor values = empty(t.shape(), t.dtype());
  dispatch_floating(t.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* p = values.data<T>();
    for (int64_t i = 0; i < values.numel(); ++i) p[i] = static_cast<T>(draw());
  });
  kernels::copy_(t, values);
}
}  // namespace

void uniform_(const Tensor& t, double low, double high, Generator& gen) {
  CPPGRAD_CHECK(low <= high, "uniform_: low {} is above high {}", low, high);
  fill_with(t, "uniform_", [&] { return low + (high - low) * gen.uniform(); });
}

void normal_(const Tensor& t, double mean, double std, Generator& gen) {
  CPPGRAD_CHECK(std >= 0, "normal_: negative std {}", std);
  fill_with(t, "normal_", [&] { return mean + std * gen.normal(); });
}

void zeros_(const Tensor& t) { constant_(t, 0.0); }
void ones_(const Tensor& t) { constant_(t, 1.0); }
void constant_(const Tensor& t, double value) {
  check_fill_value(value, t.dtype(), "constant_");
  NoGradGuard no_grad;
  kernels::fill_(t, value);
}

void xavier_uniform_(const Tensor& t, double gain, Generator& gen) {
  auto [fan_in, fan_out] = fans(t);
  double a = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  uniform_(t, -a, a, gen);
}

void xavier_normal_(const Tensor& t, double gain, Generator& gen) {
  auto [fan_in, fan_out] = fans(t);
  normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), gen);
}

namespace {
// fan_in, and leaky_relu's gain √(2 / (1 + a²)) for its negative slope a: the kaiming inits' terms.
std::pair<double, double> fan_in_and_gain(const char* op, const Tensor& t, double a) {
  auto [fan_in, fan_out] = fans(t);
  CPPGRAD_CHECK(fan_in > 0, "{}: fan_in is 0 for shape {}", op, shape_str(t.shape()));
  return {static_cast<double>(fan_in), std::sqrt(2.0 / (1.0 + a * a))};
}
}  // namespace

void kaiming_uniform_(const Tensor& t, double a, Generator& gen) {
  auto [fan_in, gain] = fan_in_and_gain("kaiming_uniform_", t, a);
  const double bound = gain * std::sqrt(3.0 / fan_in);
  uniform_(t, -bound, bound, gen);
}

void kaiming_normal_(const Tensor& t, double a, Generator& gen) {
  auto [fan_in, gain] = fan_in_and_gain("kaiming_normal_", t, a);
  normal_(t, 0.0, gain / std::sqrt(fan_in), gen);
}

}  // namespace cppgrad::nn::init
