#include "seq2seq/tasks.h"

#include <algorithm>

using namespace cppgrad;

namespace seq2seq {

Task parse_task(const std::string& name) {
  if (name == "copy") return Task::Copy;
  if (name == "reverse") return Task::Reverse;
  if (name == "sort") return Task::Sort;
  throw Error("unknown task '" + name + "' (expected copy, reverse or sort)");
}

std::string task_name(Task task) {
  switch (task) {
    case Task::Copy: return "copy";
    case Task::Reverse: return "reverse";
    case Task::Sort: return "sort";
  }
  return "?";
}

Example make_example(Task task, int64_t seq_len, int64_t vocab, Generator& gen) {
  const int64_t len = gen.randint(1, seq_len + 1);
  std::vector<int64_t> symbols(len);
  for (auto& s : symbols) s = gen.randint(FIRST_SYMBOL, vocab);
  std::vector<int64_t> answer = symbols;
  if (task == Task::Reverse) std::reverse(answer.begin(), answer.end());
  if (task == Task::Sort) std::sort(answer.begin(), answer.end());
  Example e;
  e.src = symbols;
  e.src.push_back(EOS);
  e.tgt_in = {BOS};
  e.tgt_in.insert(e.tgt_in.end(), answer.begin(), answer.end());
  e.tgt_out = answer;
  e.tgt_out.push_back(EOS);
  return e;
}

Batch make_batch(Task task, int64_t batch, int64_t seq_len, int64_t vocab, Generator& gen) {
  const int64_t width = seq_len + 1;  // room for the end (or start) token
  std::vector<int64_t> src(batch * width, PAD), tgt_in(batch * width, PAD), tgt_out(batch * width, PAD);
  for (int64_t b = 0; b < batch; ++b) {
    const Example e = make_example(task, seq_len, vocab, gen);
    std::copy(e.src.begin(), e.src.end(), &src[b * width]);
    std::copy(e.tgt_in.begin(), e.tgt_in.end(), &tgt_in[b * width]);
    std::copy(e.tgt_out.begin(), e.tgt_out.end(), &tgt_out[b * width]);
  }
  Batch out;
  out.src = tensor(src, {batch, width});
  out.tgt_in = tensor(tgt_in, {batch, width});
  out.tgt_out = tensor(tgt_out, {batch, width});
  Tensor pad = scalar_tensor(PAD, kInt64);
  out.src_pad = out.src.eq(pad);
  out.tgt_pad = out.tgt_in.eq(pad);
  return out;
}

TaskDataset::TaskDataset(Task task, int64_t size, int64_t seq_len, int64_t vocab, uint64_t seed)
    : task_(task), size_(size), seq_len_(seq_len), vocab_(vocab), seed_(seed) {}

data::Example TaskDataset::get(int64_t index) const {
  data::check_index("TaskDataset", index, size_);
  // seed + i·(an odd constant): a different seed for every index, spread by the generator's own
  // seeding (splitmix64) over its whole state.
  Generator gen(seed_ + static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ULL);
  const Example e = make_example(task_, seq_len_, vocab_, gen);
  auto as_tensor = [](const std::vector<int64_t>& tokens) {
    return tensor(tokens, {static_cast<int64_t>(tokens.size())});
  };
  return {{"src", as_tensor(e.src)}, {"tgt_in", as_tensor(e.tgt_in)}, {"tgt_out", as_tensor(e.tgt_out)}};
}

std::unique_ptr<data::DataLoader> make_training_loader(Task task, int64_t batch, int64_t seq_len, int64_t vocab,
                                                       uint64_t seed) {
  // 2^20 examples: a default run (900 steps of 32) sees under 3% of them, so each is seen once;
  // a shuffled epoch's permutation takes a few milliseconds to draw.
  auto examples = std::make_shared<TaskDataset>(task, int64_t{1} << 20, seq_len, vocab, seed);
  return std::make_unique<data::DataLoader>(
      examples, data::DataLoaderOptions(batch).shuffle(true).drop_last(true).seed(seed).prefetch(2),
      data::pad_collate({{"src", PAD}, {"tgt_in", PAD}, {"tgt_out", PAD}}));
}

Batch from_padded(const data::Batch& padded) {
  // tgt_in and tgt_out have the same lengths: one mask serves the decoder's keys and the loss
  // ignores PAD targets by value (ignore_index).
  return {padded["src"], padded["tgt_in"], padded["tgt_out"], padded["src_padding_mask"], padded["tgt_in_padding_mask"]};
}

}  // namespace seq2seq
