// How seq2seq judges a model: on held-out sequences (another seed's, never trained on), by the
// loss, by how many sequences it predicts whole, and by greedy decoding.
#pragma once

#include "common/run_state.h"
#include "seq2seq/model.h"
#include "seq2seq/options.h"
#include "seq2seq/tasks.h"

namespace seq2seq {

// `size` sequences of another seed than training's, padded to the longest of them.
Batch held_out_batch(Task task, int64_t size, int64_t seq_len, int64_t vocab, uint64_t seed);

struct HeldOut {
  double loss;
  // The percentage of sequences whose every token, <end> included, is the most likely one given
  // the right tokens before it: exactly those greedy decoding gets right (it starts from the
  // same prefix and, token by token, extends it the same way).
  double accuracy;
};
// One forward pass in eval mode, without a graph; the model is left in training mode.
HeldOut held_out_eval(Seq2SeqModel& model, const Batch& data);

// Greedy-decodes every sequence of `data` (in eval mode), prints the first `show` beside what was
// expected, and returns the percentage decoded right to the last token.
double decode_held_out(Seq2SeqModel& model, const Batch& data, int64_t show);

// During training: held_out_eval with the averaged weights (those the run decodes with), the
// trained ones put back after; the loss and accuracy join the log's curves. A NaN or an
// infinity in the loss stops the run (exit 4).
HeldOut evaluate_averaged(Seq2SeqModel& model, cppgrad::optim::ExponentialMovingAverage& average, const Batch& held_out,
                          examples::TrainingLog& log);

// At the end: decode_held_out with the averaged weights, printed with the steps and time taken;
// returns the accuracy.
double report_accuracy(Seq2SeqModel& model, cppgrad::optim::ExponentialMovingAverage& average, const Batch& held_out,
                       const Options& o, int64_t step, double train_seconds);

}  // namespace seq2seq
