// A module's weights and gradients as histograms in a training log (tools/metrics.h), as
// PyTorch users write them with SummaryWriter.add_histogram in a loop over named_parameters().
#pragma once

#include <cstdint>

#include "../nn/module.h"
#include "metrics.h"

namespace cppgrad::metrics {

// The values of `tensor` (any floating dtype, any layout) as a histogram tagged `tag`.
void log_histogram(Logger& log, std::string_view tag, const Tensor& tensor, int64_t step);
// Every parameter of `module` as "weights/NAME", and its gradient, when it has one, as "grads/NAME".
void log_histograms(Logger& log, const nn::Module& module, int64_t step);

}  // namespace cppgrad::metrics
