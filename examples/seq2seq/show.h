// What seq2seq shows of its held-out sequences: tokens as text, and every head's attention on
// one example as a grid (examples/common/attention_grid.h draws it).
#pragma once

#include <string>
#include <vector>

#include "common/attention_grid.h"
#include "seq2seq/model.h"
#include "seq2seq/tasks.h"

namespace seq2seq {

// The tokens of row `b` up to and including the first <end>.
std::vector<int64_t> until_end(const cppgrad::Tensor& tokens, int64_t b);
// Symbols as numbers from 0 ("4 0 7"), up to the first <end> or padding.
std::string show_tokens(const std::vector<int64_t>& tokens);
// The held-out example to draw: `asked`, or (when -1) the first of the longest.
int64_t attention_example(const Batch& data, int64_t asked);
// Every head of every attention layer on one held-out example, as a grid: a row per layer and
// kind of attention, a column per head.
examples::AttentionGrid attention_grid(Seq2SeqModel& model, const Batch& data, int64_t example,
                                       const std::string& title, const std::string& how_chosen);

}  // namespace seq2seq
