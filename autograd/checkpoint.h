// Activation checkpointing, as torch.utils.checkpoint: trade compute for memory.
//
//   Tensor y = autograd::checkpoint([&](const std::vector<Tensor>& in) { return layer->forward(in[0]); }, {x});
//
// The forward keeps only the function's inputs and output; every intermediate it made is freed
// as soon as it returns. The backward runs the function again (with the default generator put
// back where it was, so dropout draws the same masks and the recomputation is bit-identical),
// then back-propagates through that fresh graph. A model whose layers are each checkpointed
// holds one layer's activations at a time instead of all of them, for one extra forward pass.
#pragma once

#include <functional>
#include <vector>

#include "node.h"

namespace cppgrad::autograd {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs fn(inputs) without keeping its intermediates, and returns its output, whose backward
// recomputes them. Gradients reach the inputs and every tensor fn reads that requires grad and
// has no history (parameters). Rules, as PyTorch's:
// - fn must be a function of its inputs and the parameters it reads: a tensor with a history
//   (not a leaf) that fn reads without receiving it as an input is refused with an Error (pass
//   it in `inputs`).
// - Random draws must come from the default generator (dropout's default) to be replayed; a
//   generator of one's own is not restored. Inside a KeyedDropout scope (tensor/keyed_dropout.h)
//   the scope's call count is put back instead, and the backward must run in the same scope.
// - Double backward (create_graph) through a checkpoint is refused with an Error; nested
//   checkpoints work.
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);

}  // namespace cppgrad::autograd
