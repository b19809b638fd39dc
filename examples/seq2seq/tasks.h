// The synthetic tasks: copy, reverse or sort a random sequence of symbols.
//
// Tokens: 0 = padding, 1 = start, 2 = end, 3 .. vocab-1 = symbols. For a source "5 3 7":
//   src     = 5 3 7 <end> <pad> ...        what the encoder reads
//   tgt_in  = <start> 7 3 5 <pad> ...      what the decoder reads (reverse task)
//   tgt_out = 7 3 5 <end> <pad> ...        what it must predict at each position
// Lengths vary from 1 to seq_len symbols; padding is masked in attention (key_padding_mask)
// and ignored by the loss (ignore_index = PAD).
#pragma once

#include <string>

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

// `batch` random examples of up to `seq_len` symbols drawn from gen.
Batch make_batch(Task task, int64_t batch, int64_t seq_len, int64_t vocab, cppgrad::Generator& gen);

}  // namespace seq2seq
