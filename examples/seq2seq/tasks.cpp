#include "seq2seq/tasks.h"

#include <algorithm>

using namespace cppgrad;

namespace seq2seq {

Task parse_task(const std::string& name) {
  if (name == "copy") return Task::Copy;
  if (name == "reverse") return Task::Reverse;
  if (name == "sort") return Task::Sort;
  if (name == "mirror-sum") return Task::MirrorSum;
  throw Error("unknown task '" + name + "' (expected copy, reverse, sort or mirror-sum)");
}

std::string task_name(Task task) {
  switch (task) {
    case Task::Copy: return "copy";
    case Task::Reverse: return "reverse";
    case Task::Sort: return "sort";
    case Task::MirrorSum: return "mirror-sum";
  }
  return "?";
}

data::Example make_example(Task task, int64_t seq_len, int64_t vocab, Generator& gen) {
  const int64_t len = gen.randint(1, seq_len + 1);
  std::vector<int64_t> symbols(static_cast<size_t>(len));
  for (auto& s : symbols) s = gen.randint(FIRST_SYMBOL, vocab);
  std::vector<int64_t> answer = symbols;
  if (task == Task::Reverse) std::reverse(answer.begin(), answer.end());
  if (task == Task::Sort) std::sort(answer.begin(), answer.end());
  if (task == Task::MirrorSum) {  // answer t = symbol t + symbol len-1-t, modulo the symbols
    const int64_t symbols_count = vocab - FIRST_SYMBOL;
    for (int64_t t = 0; t < len; ++t)
      answer[static_cast<size_t>(t)] = FIRST_SYMBOL + (symbols[static_cast<size_t>(t)] - FIRST_SYMBOL +
                                                       symbols[static_cast<size_t>(len - 1 - t)] - FIRST_SYMBOL) %
                                                          symbols_count;
  }
  std::vector<int64_t> src = symbols, tgt_in = {BOS}, tgt_out = answer;
  src.push_back(EOS);
  tgt_in.insert(tgt_in.end(), answer.begin(), answer.end());
  tgt_out.push_back(EOS);
  return {{"src", tensor(src, {len + 1})}, {"tgt_in", tensor(tgt_in, {len + 1})}, {"tgt_out", tensor(tgt_out, {len + 1})}};
}

Batch make_batch(Task task, int64_t batch, int64_t seq_len, int64_t vocab, Generator& gen) {
  std::vector<data::Example> examples;
  for (int64_t b = 0; b < batch; ++b) examples.push_back(make_example(task, seq_len, vocab, gen));
  // One example of the full width, padded out, fixes the width at seq_len + 1 for all of them.
  const Tensor full = cppgrad::full({seq_len + 1}, static_cast<double>(PAD), kInt64);
  data::Collate collate = task_collate();
  examples.push_back({{"src", full}, {"tgt_in", full}, {"tgt_out", full}});
  Batch out = to_batch(collate(examples));
  auto first = [batch](const Tensor& t) { return t.narrow(0, 0, batch); };
  return {first(out.src), first(out.tgt_in), first(out.tgt_out), first(out.src_pad), first(out.tgt_pad)};
}

TaskDataset::TaskDataset(Task task, int64_t size, int64_t seq_len, int64_t vocab, uint64_t seed)
    : task_(task), size_(size), seq_len_(seq_len), vocab_(vocab), seed_(seed) {
  CPPGRAD_CHECK(size >= 1 && seq_len >= 1 && vocab > FIRST_SYMBOL,
                "TaskDataset: size {} and seq_len {} must be >= 1 and vocab {} > {}", size, seq_len, vocab, FIRST_SYMBOL);
}

data::Example TaskDataset::get(int64_t index) const {
  data::check_index("TaskDataset", index, size_);
  // Seeds (seed, i) spread by an odd multiplier; the generator's own seeding scrambles them further.
  Generator gen(seed_ * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(index));
  return make_example(task_, seq_len_, vocab_, gen);
}

data::Collate task_collate() { return data::pad_collate({{"src", PAD}, {"tgt_in", PAD}, {"tgt_out", PAD}}); }

Batch to_batch(const data::Batch& batch) {
  return {batch["src"], batch["tgt_in"], batch["tgt_out"], batch["src_padding_mask"], batch["tgt_in_padding_mask"]};
}

}  // namespace seq2seq
