// A seq2seq run as seq2seq's main builds it (model, Adam, the paper's schedule, the moving
// average, the shuffling data loader), at a size that trains a step in a millisecond: what the
// checkpoint tests (common/test_checkpoint.cpp) and the checkpoint fuzzer
// (tests/fuzz/fuzz_checkpoint.cpp) save and load.
#pragma once

#include <memory>

#include "common/run_state.h"
#include "seq2seq/model.h"
#include "seq2seq/tasks.h"

namespace examples {

struct TinyRun {
  seq2seq::ModelConfig config = [] {
    seq2seq::ModelConfig c;
    c.vocab = 6, c.d_model = 4, c.heads = 2, c.layers = 1, c.ff = 8, c.max_len = 5;
    return c;
  }();
  std::shared_ptr<seq2seq::Seq2SeqModel> model;
  std::unique_ptr<cppgrad::optim::Adam> opt;
  std::unique_ptr<cppgrad::optim::NoamLR> schedule;
  std::unique_ptr<cppgrad::optim::ExponentialMovingAverage> average;
  cppgrad::data::DataLoader loader{std::make_shared<seq2seq::TaskDataset>(seq2seq::Task::Copy, 64, 3, config.vocab, 1),
                                   cppgrad::data::DataLoaderOptions(2).shuffle(true).seed(1), seq2seq::task_collate()};

  TinyRun() {
    cppgrad::manual_seed(0);
    model = std::make_shared<seq2seq::Seq2SeqModel>(config);
    opt = std::make_unique<cppgrad::optim::Adam>(model->parameters(), cppgrad::optim::AdamOptions(1.0).beta1(0.9).beta2(0.98).eps(1e-9));
    schedule = std::make_unique<cppgrad::optim::NoamLR>(*opt, config.d_model, 4, 0.5);
    average = std::make_unique<cppgrad::optim::ExponentialMovingAverage>(model->parameters(), 0.99);
  }
  Run run() { return {*model, *opt, *schedule, loader, average.get()}; }

  void train_step() {
    seq2seq::Batch b = seq2seq::to_batch(loader.next());
    cppgrad::Tensor logits = model->forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);
    cppgrad::Tensor loss = cppgrad::nn::functional::cross_entropy(logits.reshape({-1, config.vocab}), b.tgt_out.reshape({-1}),
                                                cppgrad::nn::functional::CrossEntropyOptions().ignore_index(seq2seq::PAD));
    opt->zero_grad();
    loss.backward();
    opt->step();
    average->update();
    schedule->step();
  }
};

}  // namespace examples
