// What seq2seq shows: tokens as text, the training curves (--plot) and every head's attention on
// one held-out example (--attention), drawn by cppgrad's plot pieces (tools/plot/).
#pragma once

#include <string>
#include <vector>

#include "cppgrad.h"
#include "seq2seq/model.h"
#include "seq2seq/options.h"
#include "seq2seq/tasks.h"
#include "tools/tools.h"

namespace seq2seq {

// The tokens of row `b` up to and including the first <end>.
std::vector<int64_t> until_end(const cppgrad::Tensor& tokens, int64_t b);
// Symbols as numbers from 0 ("4 0 7"), up to the first <end> or padding.
std::string show_tokens(const std::vector<int64_t>& tokens);

// The loss of every step and at each evaluation, then the held-out accuracy at each evaluation
// and at the end (`accuracy`, after `step` steps).
cppgrad::plot::Canvas training_curves(const Options& o, int64_t step, double accuracy,
                                      const cppgrad::plot::Points& train, const cppgrad::plot::Points& held_out,
                                      const cppgrad::plot::Points& held_out_accuracy);

// --profile: times the kernels of one training step (the 10th of the run, when caches and
// buffers have settled) and prints the table after it.
class StepProfile {
 public:
  StepProfile(bool on, int64_t step) : on_(on), step_(step) {}
  void before(int64_t step);  // `step` is the step about to run
  void after(int64_t step, cppgrad::Progress& progress, int64_t batch);  // after it ran

 private:
  bool on_;
  int64_t step_;
};

// --attention: every head of every attention layer on one held-out example (--attention-example,
// or the first of the longest), as a grid: a row per layer and kind of attention, a column per
// head. `step`: the steps the model was trained.
cppgrad::plot::AttentionGrid attention_grid(Seq2SeqModel& model, const Batch& held_out, const Options& o, int64_t step);
// --attention FILE: the grid of the averaged weights (those that decoded the held-out set), drawn.
void write_attention_grid(Seq2SeqModel& model, cppgrad::optim::ExponentialMovingAverage& average, const Batch& held_out,
                          const Options& o, int64_t step);

}  // namespace seq2seq
