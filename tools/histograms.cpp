#include "tools/histograms.h"

#include <fmt/format.h>

namespace cppgrad::metrics {

void log_histogram(Logger& log, std::string_view tag, const Tensor& tensor, int64_t step) {
  CPPGRAD_CHECK(tensor.defined() && tensor.is_floating_point(), "log_histogram: '{}' needs a floating tensor", tag);
  NoGradGuard no_grad;
  const Tensor values = tensor.detach().to(kFloat32).contiguous();
  log.histogram(tag, {values.data<float>(), static_cast<size_t>(values.numel())}, step);
}

void log_histograms(Logger& log, const nn::Module& module, int64_t step) {
  for (const auto& [name, p] : module.named_parameters()) {
    log_histogram(log, fmt::format("weights/{}", name), p, step);
    if (p.grad().defined()) log_histogram(log, fmt::format("grads/{}", name), p.grad(), step);
  }
}

}  // namespace cppgrad::metrics
