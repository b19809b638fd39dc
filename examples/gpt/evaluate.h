// How gpt judges its model, and the picture --plot draws: the loss on held-out windows.
#pragma once

#include "gpt/options.h"
#include "tools/plot/curves.h"

namespace gpt {

// The mean cross-entropy over a batch of windows, in nats per token: forward passes of at most 8
// windows in eval mode, without a graph; the model is left in training mode.
double loss_on(LanguageModel& model, const cppgrad::data::Batch& b);

// Prints the held-out loss at the end of training, in nats per token and in bits per byte (which
// compare tokenizers), with the time a step took; returns the loss.
double report_held_out(double held_out_loss, const Corpus& corpus, int64_t step, int64_t steps_taken, double seconds);

// The end of a run: --sample-length tokens written after --prompt (or after a held-out token
// drawn at random), printed. Its generator is its own, seeded from --seed: sampling draws
// nothing from the streams a checkpoint resumes.
void print_sample(LanguageModel& model, const Corpus& corpus, const Options& o);

// The loss of every step and at each evaluation, in nats per token.
cppgrad::plot::Canvas training_curves(const Options& o, const Corpus& corpus, int64_t step, double held_out_loss,
                                      int64_t held_out_windows, const cppgrad::plot::Points& train,
                                      const cppgrad::plot::Points& held_out);

}  // namespace gpt
