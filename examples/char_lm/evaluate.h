// How char_lm judges its model, and the picture --plot draws: the loss on held-out windows of
// the text's last tenth.
#pragma once

#include "char_lm/model.h"
#include "char_lm/options.h"
#include "tools/plot/curves.h"

namespace char_lm {

// Back-to-back windows over the held-out tenth, at most 64 of them, spread evenly: "input"
// (B, T) and "target" (B, T), the input shifted by one character.
cppgrad::data::Batch held_out_windows(const Text& text, int64_t seq_len);
// The mean cross-entropy over a batch of windows, in nats per character: one forward pass in
// eval mode, without a graph; the model is left in training mode.
double loss_on(CharLM& model, const cppgrad::data::Batch& b);

// Prints the held-out loss at the end of training, in nats and bits per character, with the
// steps and time taken; returns the loss.
double report_held_out(double held_out_loss, int64_t step, double train_seconds);

// The end of a run: --sample-length characters written after --prompt (or after a training
// character drawn at random), printed. Its generator is its own, seeded from --seed: sampling
// draws nothing from the streams a checkpoint resumes.
void print_sample(CharLM& model, const Text& text, const Options& o);

// The loss of every step and at each evaluation, in nats per character and bits on the right.
cppgrad::plot::Canvas training_curves(const Options& o, const Text& text, int64_t step, double held_out_loss,
                                      int64_t held_out_windows, const cppgrad::plot::Points& train,
                                      const cppgrad::plot::Points& held_out);

}  // namespace char_lm
