#include "seq2seq/evaluate.h"

#include <fmt/core.h>

#include "seq2seq/show.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace seq2seq {

Batch held_out_batch(Task task, int64_t size, int64_t seq_len, int64_t vocab, uint64_t seed) {
  const TaskDataset held_out_set(task, size, seq_len, vocab, seed);
  std::vector<data::Example> examples;
  for (int64_t i = 0; i < size; ++i) examples.push_back(held_out_set.get(i));
  return to_batch(task_collate()(examples));
}

HeldOut held_out_eval(Seq2SeqModel& model, const Batch& data) {
  NoGradGuard no_grad;
  model.eval();
  Tensor logits = model.forward(data.src, data.tgt_in, data.src_pad, data.tgt_pad);
  model.train();
  const double loss =
      F::cross_entropy(logits.reshape({-1, model.config.vocab}), data.tgt_out.reshape({-1}), F::CrossEntropyOptions().ignore_index(PAD))
          .item();
  const auto predicted = logits.argmax(-1).to_vector<int64_t>(), expected = data.tgt_out.to_vector<int64_t>();
  const int64_t batch = data.tgt_out.size(0), length = data.tgt_out.size(1);
  int64_t right = 0;
  for (int64_t b = 0; b < batch; ++b) {
    bool all = true;
    for (int64_t t = b * length; t < (b + 1) * length; ++t)
      all = all && (expected[t] == PAD || predicted[t] == expected[t]);
    right += all;
  }
  return {loss, 100.0 * static_cast<double>(right) / static_cast<double>(batch)};
}

double decode_held_out(Seq2SeqModel& model, const Batch& data, int64_t show) {
  model.eval();
  const int64_t size = data.src.size(0);
  Tensor decoded = model.greedy_decode(data.src, data.src_pad, data.tgt_out.size(1));
  int64_t correct = 0;
  for (int64_t b = 0; b < size; ++b)
    if (until_end(decoded, b) == until_end(data.tgt_out, b)) ++correct;
  fmt::print("\n{:<40} {:<40} {}\n", "source", "expected", "got");
  for (int64_t b = 0; b < std::min(show, size); ++b)
    fmt::print("{:<40} {:<40} {}\n", show_tokens(until_end(data.src, b)), show_tokens(until_end(data.tgt_out, b)),
               show_tokens(until_end(decoded, b)));
  return 100.0 * static_cast<double>(correct) / static_cast<double>(size);
}


HeldOut evaluate_averaged(Seq2SeqModel& model, optim::ExponentialMovingAverage& average, const Batch& held_out,
                          examples::TrainingLog& log) {
  average.swap();
  const HeldOut eval = held_out_eval(model, held_out);
  examples::stop_if_non_finite(log.step, "the held-out loss of the averaged weights", eval.loss, model);
  average.swap();
  log.eval_curve.emplace_back(static_cast<double>(log.step), eval.loss);
  log.accuracy_curve.emplace_back(static_cast<double>(log.step), eval.accuracy);
  return eval;
}

double report_accuracy(Seq2SeqModel& model, optim::ExponentialMovingAverage& average, const Batch& held_out,
                       const Options& o, int64_t step, double train_seconds) {
  average.swap();
  const double accuracy = decode_held_out(model, held_out, o.show);
  average.swap();  // the trained weights again: what a checkpoint resumes from
  fmt::print("\nsequence accuracy on {} held-out sequences: {:.1f}% ({} steps, {} of training{})\n", o.eval_size,
             accuracy, step, format_duration(train_seconds),
             o.average > 0 ? fmt::format("; weights averaged, decay {}", o.average) : "");
  return accuracy;
}
}  // namespace seq2seq
