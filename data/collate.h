// Collate: B examples in, one batch out.
//
// stack_collate stacks each field: tensors of equal shapes (S...) become one (B, S...).
// pad_collate pads the fields it is given, sequences whose first dim is their length, to the
// longest in the batch, and adds what attention and the loss need to ignore the padding:
//
//   auto collate = data::pad_collate({{"src", PAD}, {"tgt", PAD}});
//   batch["src"]               (B, L_max, ...)  the sequences, padded with PAD at the end
//   batch["src_padding_mask"]  (B, L_max) bool  true at padding: MultiheadAttention's key_padding_mask
//   batch["src_lengths"]       (B) int64        each sequence's length
// Other fields are stacked.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dataset.h"

namespace cppgrad::data {

using Collate = std::function<Batch(const std::vector<Example>&)>;

// One (B, S...) tensor from B tensors of shape (S...) and one dtype; `what` names them in errors.
Tensor stack_tensors(const std::vector<Tensor>& tensors, const std::string& what = "stack_tensors");

struct PaddedSequences {
  Tensor padded;        // (B, L_max, ...): sequence b in rows [0, length_b), padding_value after
  Tensor padding_mask;  // (B, L_max) bool, true at padding
  Tensor lengths;       // (B) int64
};
// Sequences (L_b, ...) of one dtype whose other dims agree, as torch.nn.utils.rnn.pad_sequence
// with batch_first=True, plus the mask and the lengths. An int64 or bool padding value must be
// exact in that dtype.
PaddedSequences pad_sequences(const std::vector<Tensor>& sequences, double padding_value,
                              const std::string& what = "pad_sequences");

// Every field stacked; the examples must have the same field names.
Batch stack_collate(const std::vector<Example>& examples);

// The named fields padded with their value (and given _padding_mask and _lengths), the rest
// stacked. Throws Error at collate time when a named field is missing.
Collate pad_collate(std::vector<std::pair<std::string, double>> padding_values);

}  // namespace cppgrad::data
