// The fast form of relu_dropout (skip it on a first reading: its reference is dropout(relu(x)),
// autograd/ops_nn.cpp): one kernel each way, saving x alone, not relu's output and the mask.
#pragma once

#include <cstdint>

#include "../node.h"

namespace cppgrad::fast {

// dropout(relu(x)) with the mask of the stream `key`.
Tensor relu_dropout(const Tensor& x, double p, uint64_t key);

}  // namespace cppgrad::fast
