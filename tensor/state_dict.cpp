#include "tensor/state_dict.h"

#include <cmath>
#include <limits>

#include "tensor/kernels.h"
#include "tensor/tensor.h"

namespace cppgrad {

NamedTensors with_prefix(const std::string& prefix, const NamedTensors& tensors) {
  NamedTensors out;
  for (const auto& [name, t] : tensors) out.emplace_back(prefix + name, t);
  return out;
}

NamedTensors under_prefix(const std::string& prefix, const NamedTensors& tensors) {
  NamedTensors out;
  for (const auto& [name, t] : tensors)
    if (name.starts_with(prefix)) out.emplace_back(name.substr(prefix.size()), t);
  return out;
}

int64_t first_non_finite(const Tensor& t, DType as) {
  if (!t.defined() || !t.is_floating_point()) return -1;
  const Tensor plain = kernels::contiguous(t);
  const double largest = as == kFloat32 ? double{std::numeric_limits<float>::max()} : std::numeric_limits<double>::max();
  return dispatch_floating(plain.dtype(), "first_non_finite", [&](auto tag) -> int64_t {
    using T = decltype(tag);
    const T* data = plain.data<T>();
    for (int64_t i = 0; i < plain.numel(); ++i)
      if (!(std::abs(static_cast<double>(data[i])) <= largest)) return i;  // NaN fails every comparison
    return -1;
  });
}

void check_finite(const NamedTensors& state, const std::string& owner) {
  for (const auto& [name, t] : state) {
    const int64_t at = first_non_finite(t);
    if (at < 0) continue;
    const Tensor plain = kernels::contiguous(t);
    const double v = plain.dtype() == kFloat32 ? double{plain.data<float>()[at]} : plain.data<double>()[at];
    throw Error(fmt::format("{}: '{}' holds {} (element {} of {})", owner, excerpt(name), v, at,
                            excerpt(shape_str(t.shape()), 40)));
  }
}

bool Bounds::contains(double v) const {
  return (min_open ? v > min : v >= min) && v <= max;  // false for NaN
}

std::string Bounds::str() const {
  constexpr double kLargest = std::numeric_limits<double>::max();
  const bool no_min = min <= -kLargest, no_max = max >= kLargest;
  if (no_min && no_max) return std::isinf(min) || std::isinf(max) ? "a number" : "finite";
  if (no_max) return fmt::format("{} {}", min_open ? ">" : ">=", min);
  if (no_min) return fmt::format("<= {}", max);
  return fmt::format("in {}{}, {}]", min_open ? "(" : "[", min, max);
}

StateReader::StateReader(const NamedTensors& state, std::string owner) : state_(state), owner_(std::move(owner)) {}

bool StateReader::contains(const std::string& name) const {
  for (const auto& entry : state_)
    if (entry.first == name) return true;
  return false;
}

const Tensor& StateReader::tensor(const std::string& name, DType dtype, const Shape& shape) {
  for (const auto& [key, t] : state_) {
    if (key != name) continue;
    CPPGRAD_CHECK(t.defined() && t.dtype() == dtype && t.shape() == shape, "{}: '{}' must be {} {}, got {}", owner_,
                  name, dtype_name(dtype), shape_str(shape),
                  t.defined() ? fmt::format("{} {}", dtype_name(t.dtype()), excerpt(shape_str(t.shape()), 40))
                              : "an undefined tensor");
    read_.insert(name);
    return t;
  }
  throw Error(fmt::format("{}: '{}' is missing", owner_, name));
}

int64_t StateReader::int64(const std::string& name, Bounds bounds) {
  const int64_t v = tensor(name, kInt64, {}).item<int64_t>();
  CPPGRAD_CHECK(bounds.contains(static_cast<double>(v)), "{}: '{}' is {}, must be {}", owner_, name, v, bounds.str());
  return v;
}

double StateReader::float64(const std::string& name, Bounds bounds) {
  const double v = tensor(name, kFloat64, {}).item<double>();
  CPPGRAD_CHECK(bounds.contains(v), "{}: '{}' is {}, must be {}", owner_, name, v, bounds.str());
  return v;
}

bool StateReader::boolean(const std::string& name) { return tensor(name, kBool, {}).item<bool>(); }

void StateReader::load_part(const std::string& prefix, const std::function<void(const NamedTensors&)>& load) {
  for (const auto& entry : state_)
    if (entry.first.starts_with(prefix)) read_.insert(entry.first);
  const NamedTensors part = under_prefix(prefix, state_);
  try {
    load(part);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: in '{}*': {}", owner_, prefix, e.what()));
  }
}

void StateReader::finish() const {
  for (const auto& entry : state_)
    CPPGRAD_CHECK(read_.count(entry.first), "{}: unexpected entry '{}'", owner_, excerpt(entry.first));
}

}  // namespace cppgrad
