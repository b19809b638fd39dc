// Dropout keyed by example: masks that do not depend on how a batch is split between processes.
//
// Outside a scope, a dropout call draws one key from its generator, and element i of the tensor
// takes word i of that key's counter-based stream (kernels/counter_rng.h). The mask an example
// gets then depends on the generator's state and on where the example sits in the tensor, both
// of which differ between the ranks of a data-parallel run and between runs of 1, 2 or 4
// processes. Inside a KeyedDropout scope, which a training loop sets around a forward and its
// backward, the c-th dropout call of the scope gives the example at global position g of step s
// the stream keyed (seed, s, c, g), each element of it the word of its position within the
// example (kernels/counter_rng.h's example_word: a sequence padded to another length on another
// rank leaves the other elements' words as they were). An example gets the same mask whichever
// process holds it beside whichever others, and resuming needs no generator state (the step is
// in the checkpoint already).
//
//   // rank r of N, local batch b: its rows are positions r, r + N, ... of the global batch
//   KeyedDropout scope(seed, step, global_positions);
//   Tensor loss = criterion(model->forward(x), y);
//   loss.backward();
//
// The tensors dropout sees inside must be batch first: a leading dim of k·B for the scope's B
// examples, example-major ((B, ...), or (B·H, ...) with example b's H rows together, as the
// attention weights (B, H, T, S) and their fused form are), and an example's last two dims below
// 2^20 each. A tensor that is not is refused. Scopes nest (the innermost holds); a generator other
// than the default one keeps its own stream inside a scope.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "generator.h"
#include "shape.h"

namespace cppgrad {

class KeyedDropout {
 public:
  // The batches inside are the global examples `examples` (positions in the global batch of step
  // `step`, each at most once), their rows in that order.
  KeyedDropout(uint64_t seed, int64_t step, std::vector<int64_t> examples);
  ~KeyedDropout();
  KeyedDropout(const KeyedDropout&) = delete;
  KeyedDropout& operator=(const KeyedDropout&) = delete;

  // The dropout calls made inside so far. Activation checkpointing (autograd/checkpoint.h) puts
  // the count back to replay a forward's masks, as it puts the default generator back.
  int64_t calls() const { return calls_; }
  void set_calls(int64_t calls) { calls_ = calls; }

  // The innermost scope of this thread, or null.
  static KeyedDropout* current();

 private:
  friend std::optional<std::vector<uint64_t>> example_keys(const char* op, const Shape& shape, Generator& gen);
  uint64_t seed_;
  int64_t step_;
  std::vector<int64_t> examples_;
  int64_t calls_ = 0;
  KeyedDropout* outer_;
};

// The keys of dropout call `op` on a tensor of `shape` inside the innermost scope, one per example
// (for kernels::example_dropout_mask), the call counted; an Error naming `op` and the shape when
// the tensor does not fit the scope (above). Outside any scope, or for a generator other than the
// default: nullopt, and the caller draws one key from `gen`, as dropout always did.
std::optional<std::vector<uint64_t>> example_keys(const char* op, const Shape& shape, Generator& gen);

}  // namespace cppgrad
