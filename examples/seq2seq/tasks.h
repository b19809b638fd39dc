// The synthetic tasks: copy, reverse or sort a random sequence of symbols, or mirror-sum it:
// output t is the sum of symbols t and len-1-t (counting symbols from 0, modulo their number), a
// task that needs two source positions at once for every output.
//
// Tokens: 0 = padding, 1 = start, 2 = end, 3 .. vocab-1 = symbols. For a source "5 3 7":
//   src     = 5 3 7 <end> <pad> ...        what the encoder reads
//   tgt_in  = <start> 7 3 5 <pad> ...      what the decoder reads (reverse task)
//   tgt_out = 7 3 5 <end> <pad> ...        what it must predict at each position
// Lengths vary from 1 to seq_len symbols; padding is masked in attention (key_padding_mask)
// and ignored by the loss (ignore_index = PAD).
//
// Training reads the task as a dataset (TaskDataset) through a data::DataLoader whose collate
// pads each batch to its longest example; make_batch draws a batch of fixed width directly.
#pragma once

#include <string>

#include "cppgrad.h"

namespace seq2seq {

constexpr int64_t PAD = 0, BOS = 1, EOS = 2, FIRST_SYMBOL = 3;

enum class Task { Copy, Reverse, Sort, MirrorSum };
Task parse_task(const std::string& name);  // throws cppgrad::Error on an unknown name
std::string task_name(Task task);

struct Batch {
  cppgrad::Tensor src;      // (B, L+1) int64
  cppgrad::Tensor tgt_in;   // (B, L+1) int64
  cppgrad::Tensor tgt_out;  // (B, L+1) int64
  cppgrad::Tensor src_pad;  // (B, L+1) bool, true at padding
  cppgrad::Tensor tgt_pad;  // (B, L+1) bool
};

// One example of 1 to seq_len symbols drawn from gen: "src", "tgt_in" and "tgt_out", each a
// (len + 1) int64 sequence without padding.
cppgrad::data::Example make_example(Task task, int64_t seq_len, int64_t vocab, cppgrad::Generator& gen);

// `batch` examples drawn from gen, padded to seq_len + 1 positions whatever their lengths.
Batch make_batch(Task task, int64_t batch, int64_t seq_len, int64_t vocab, cppgrad::Generator& gen);

// `size` examples of a task; example i is drawn from a generator seeded by (seed, i), so it is
// the same every time it is asked for, on any thread or process, and no state is kept.
class TaskDataset : public cppgrad::data::Dataset {
 public:
  TaskDataset(Task task, int64_t size, int64_t seq_len, int64_t vocab, uint64_t seed);
  int64_t size() const override { return size_; }
  cppgrad::data::Example get(int64_t index) const override;

 private:
  Task task_;
  int64_t size_, seq_len_, vocab_;
  uint64_t seed_;
};

// The collate for TaskDataset: the three sequences padded with PAD to the longest in the batch.
cppgrad::data::Collate task_collate();
// A collated batch (its src_padding_mask and tgt_in_padding_mask) as the model takes it.
Batch to_batch(const cppgrad::data::Batch& batch);

}  // namespace seq2seq
