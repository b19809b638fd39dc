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

Batch make_batch(Task task, int64_t batch, int64_t seq_len, int64_t vocab, Generator& gen) {
  const int64_t width = seq_len + 1;  // room for the end (or start) token
  std::vector<int64_t> src(batch * width, PAD), tgt_in(batch * width, PAD), tgt_out(batch * width, PAD);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = gen.randint(1, seq_len + 1);
    std::vector<int64_t> symbols(len);
    for (auto& s : symbols) s = gen.randint(FIRST_SYMBOL, vocab);
    std::vector<int64_t> answer = symbols;
    if (task == Task::Reverse) std::reverse(answer.begin(), answer.end());
    if (task == Task::Sort) std::sort(answer.begin(), answer.end());
    int64_t* s = &src[b * width];
    int64_t* in = &tgt_in[b * width];
    int64_t* out = &tgt_out[b * width];
    in[0] = BOS;
    for (int64_t i = 0; i < len; ++i) {
      s[i] = symbols[i];
      in[i + 1] = answer[i];
      out[i] = answer[i];
    }
    s[len] = EOS;
    out[len] = EOS;
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

}  // namespace seq2seq
