#include "lessons/training.h"

using namespace cppgrad;
using namespace seq2seq;
namespace F = cppgrad::nn::functional;

namespace lessons {

ModelConfig config_of(const SmallSeq2Seq& o) {
  ModelConfig c;
  c.vocab = o.vocab;
  c.d_model = o.d_model;
  c.heads = o.heads;
  c.layers = o.layers;
  c.ff = o.ff;
  c.dropout = 0.0;
  c.max_len = o.seq_len + 2;
  return c;
}

void train(Seq2SeqModel& model, Task task, const SmallSeq2Seq& o, Generator& data,
           const std::function<bool(int64_t)>& after_step) {
  optim::Adam opt(model.parameters(), optim::AdamOptions(1.0).beta1(0.9).beta2(0.98).eps(1e-9));
  optim::NoamLR schedule(opt, o.d_model, o.warmup);
  model.train();
  for (int64_t step = 0; step < o.steps; ++step) {
    Batch b = make_batch(task, o.batch, o.seq_len, o.vocab, data);
    Tensor logits = model.forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);  // (B, T, vocab)
    Tensor loss = F::cross_entropy(logits.reshape({-1, o.vocab}), b.tgt_out.reshape({-1}),
                                   F::CrossEntropyOptions().ignore_index(PAD));
    opt.zero_grad();
    loss.backward();
    opt.step();
    schedule.step();
    if (after_step) {
      model.eval();
      const bool go_on = after_step(step + 1);
      model.train();
      if (!go_on) break;
    }
  }
  model.eval();
}

double accuracy(Seq2SeqModel& model, const Batch& held_out) {
  NoGradGuard no_grad;
  Tensor decoded = model.greedy_decode(held_out.src, held_out.src_pad, held_out.tgt_out.size(1));
  int64_t correct = 0;
  const int64_t B = held_out.src.size(0);
  for (int64_t b = 0; b < B; ++b) {
    bool same = true;
    for (int64_t t = 0; t < held_out.tgt_out.size(1); ++t) {
      const int64_t want = held_out.tgt_out.at<int64_t>({b, t});
      same = same && decoded.at<int64_t>({b, t}) == want;
      if (want == EOS) break;
    }
    correct += same;
  }
  return 100.0 * static_cast<double>(correct) / static_cast<double>(B);
}

std::vector<std::pair<std::string, std::shared_ptr<nn::MultiheadAttention>>> attention_layers(Seq2SeqModel& model) {
  std::vector<std::pair<std::string, std::shared_ptr<nn::MultiheadAttention>>> out;
  for (auto& [name, module] : model.named_modules())
    if (auto layer = std::dynamic_pointer_cast<nn::MultiheadAttention>(module)) out.emplace_back(name, layer);
  return out;
}

}  // namespace lessons
