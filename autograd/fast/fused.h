// The one pattern of a fused op's fast form (skip it on a first reading). A fused op's
// reference is its formula as differentiable tensor ops, which autograd differentiates (and
// differentiates again); its fast form computes the same numbers with one kernel forward and
// one backward, the only place its derivative is written. A gradient that must itself be
// differentiated (create_graph) is not taken from the kernel: autograd differentiates the
// reference at the saved inputs instead. tests/autograd/test_fast_forms.cpp checks each fast
// form against its reference.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "../node.h"

namespace cppgrad::fast {

// The reference: the op as tensor ops of its inputs (undefined where an input is absent).
using Reference = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// record(op, out, inputs, saved, backward) for a fused kernel's output `out`: `backward` (run
// without create_graph) reads `saved` alone, as record's backward would; under create_graph the
// gradients are those of reference(inputs).
Tensor record_fused(std::string op, Tensor out, const std::vector<Tensor>& inputs, const std::vector<Tensor>& saved,
                    autograd::BackwardFn backward, Reference reference);

}  // namespace cppgrad::fast
