// One training step of examples/seq2seq's copy-task model (forward, cross-entropy, backward,
// Adam), the step the suite's copy-step row and bench_stalls time.
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "cppgrad.h"
#include "rows.h"
#include "seq2seq/model.h"
#include "seq2seq/tasks.h"

namespace bench {

// Adam as examples/seq2seq sets it, at a fixed rate (the schedule costs nothing measurable).
inline cppgrad::optim::AdamOptions adam_options() { return cppgrad::optim::AdamOptions(1e-4).beta1(0.9).beta2(0.98).eps(1e-9); }

// examples/seq2seq's model at the copy task's shapes.
inline seq2seq::ModelConfig copy_task_model(const CopyTaskConfig& c) {
  seq2seq::ModelConfig m;
  m.vocab = c.vocab;
  m.d_model = c.d_model;
  m.heads = c.heads;
  m.layers = c.layers;
  m.ff = c.ff;
  m.dropout = c.dropout;
  m.max_len = c.positions();
  return m;
}

inline constexpr int kBatches = 8;  // made before timing and used in turn: data making is not timed

// What a training row keeps besides its model: Adam over the model's parameters, and the loss of
// the last step, which update() ends with.
class TrainingRow {
 public:
  double last_loss = NAN;

 protected:
  void make_optimizer(const std::vector<cppgrad::Tensor>& parameters) {
    adam_ = std::make_unique<cppgrad::optim::Adam>(parameters, adam_options());
  }
  void update(const cppgrad::Tensor& loss) {
    adam_->zero_grad();
    loss.backward();
    adam_->step();
    last_loss = loss.item();
  }
  size_t next_ = 0;  // the batch the next step takes, in turn

 private:
  std::unique_ptr<cppgrad::optim::Adam> adam_;
};

// One training step of examples/seq2seq's model on the copy task.
class CopyTaskRow : public TrainingRow {
 public:
  explicit CopyTaskRow(const CopyTaskConfig& c) : vocab_(c.vocab) {
    const seq2seq::ModelConfig m = copy_task_model(c);
    model_ = std::make_shared<seq2seq::Seq2SeqModel>(m);
    model_->train();
    make_optimizer(model_->parameters());
    cppgrad::Generator data(1);
    for (int i = 0; i < kBatches; ++i)
      batches_.push_back(seq2seq::make_batch(seq2seq::Task::Copy, c.batch, c.length, c.vocab, data));
  }

  void step() {
    const seq2seq::Batch& b = batches_[next_++ % batches_.size()];
    namespace F = cppgrad::nn::functional;
    cppgrad::Tensor logits = model_->forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);  // (B, T, vocab)
    cppgrad::Tensor loss = F::cross_entropy(logits.reshape({-1, vocab_}), b.tgt_out.reshape({-1}),
                                            F::CrossEntropyOptions().ignore_index(seq2seq::PAD));
    update(loss);
  }

  int64_t parameter_count() const { return model_->parameter_count(); }

 private:
  int64_t vocab_;
  std::shared_ptr<seq2seq::Seq2SeqModel> model_;
  std::vector<seq2seq::Batch> batches_;
};

}  // namespace bench
