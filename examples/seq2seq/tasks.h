// The synthetic tasks: copy, reverse or sort a random sequence of symbols.
//
// Tokens: 0 = padding, 1 = start, 2 = end, 3 .. vocab-1 = symbols. For a source "5 3 7":
//   src     = 5 3 7 <end> <pad> ...        what the encoder reads
//   tgt_in  = <start> 7 3 5 <pad> ...      what the decoder reads (reverse task)
//   tgt_out = 7 3 5 <end> <pad> ...        what it must predict at each position
// Lengths vary from 1 to seq_len symbols; padding is masked in attention (key_padding_mask)
// and ignored by the loss (ignore_index = PAD).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cppgrad.h"

namespace seq2seq {

constexpr int64_t PAD = 0, BOS = 1, EOS = 2, FIRST_SYMBOL = 3;

enum class Task { Copy, Reverse, Sort };
Task parse_task(const std::string& name);  // throws cppgrad::Error on an unknown name
std::string task_name(Task task);

struct Batch {
  cppgrad::Tensor src;      // (B, L+1) int64
  cppgrad::Tensor tgt_in;   // (B, L+1) int64
  cppgrad::Tensor tgt_out;  // (B, L+1) int64
  cppgrad::Tensor src_pad;  // (B, L+1) bool, true at padding
  cppgrad::Tensor tgt_pad;  // (B, L+1) bool
};

// One example of 1 to seq_len symbols drawn from gen: its length, then its symbols.
struct Example {
  std::vector<int64_t> src, tgt_in, tgt_out;  // (len + 1) tokens each
};
Example make_example(Task task, int64_t seq_len, int64_t vocab, cppgrad::Generator& gen);

// `batch` random examples of up to `seq_len` symbols drawn from gen, padded to seq_len + 1.
Batch make_batch(Task task, int64_t batch, int64_t seq_len, int64_t vocab, cppgrad::Generator& gen);

// ---- the training data, through cppgrad::data ------------------------------------------------

// `size` examples; example i is drawn from a generator seeded from (seed, i) alone, so any
// example is made again the same, in any order, on any thread.
class TaskDataset : public cppgrad::data::Dataset {
 public:
  TaskDataset(Task task, int64_t size, int64_t seq_len, int64_t vocab, uint64_t seed);
  int64_t size() const override { return size_; }
  // "src", "tgt_in", "tgt_out": (len + 1) int64 each
  cppgrad::data::Example get(int64_t index) const override;

 private:
  Task task_;
  int64_t size_, seq_len_, vocab_;
  uint64_t seed_;
};

// Shuffled batches of `batch` examples of a TaskDataset, padded with PAD to the longest in the
// batch, prepared on a background thread; the loader's position goes into checkpoints.
std::unique_ptr<cppgrad::data::DataLoader> make_training_loader(Task task, int64_t batch, int64_t seq_len,
                                                                int64_t vocab, uint64_t seed);
// The model's inputs from a padded batch: the masks are pad_collate's.
Batch from_padded(const cppgrad::data::Batch& padded);

}  // namespace seq2seq
