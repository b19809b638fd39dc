// How gpt judges its model, the picture --plot draws (the loss on held-out windows), and the
// model it exports for ONNX Runtime.
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

// Writes `model` in eval mode as an ONNX file (--export-onnx): input tokens (B, T) int64, output
// logits (B, T, vocab), B and T open (T at most seq_len for gpt2's learned positions).
void export_onnx_file(LanguageModel& model, const std::string& path);

// The loss of every step and at each evaluation, in nats per token.
cppgrad::plot::Canvas training_curves(const Options& o, const Corpus& corpus, int64_t step, double held_out_loss,
                                      int64_t held_out_windows, const cppgrad::plot::Points& train,
                                      const cppgrad::plot::Points& held_out);

}  // namespace gpt
