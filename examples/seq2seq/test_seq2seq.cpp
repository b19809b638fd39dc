// seq2seq's data and decoding: the task as a dataset read through the DataLoader, and greedy
// decoding with cached keys and values against recomputing the whole prefix at every step.
#include <doctest/doctest.h>

#include "seq2seq/model.h"
#include "seq2seq/tasks.h"

using namespace cppgrad;
using namespace seq2seq;

TEST_CASE("seq2seq: example i of the task dataset is the same every time, and well formed") {
  const TaskDataset copy(Task::Copy, 100, 7, 12, 5), reverse(Task::Reverse, 100, 7, 12, 5);
  for (int64_t i : {0, 1, 57, 99}) {
    CAPTURE(i);
    const data::Example a = copy.get(i), again = copy.get(i), r = reverse.get(i);
    const auto src = a["src"].to_vector<int64_t>(), tgt_in = a["tgt_in"].to_vector<int64_t>(),
               tgt_out = a["tgt_out"].to_vector<int64_t>();
    CHECK(src == again["src"].to_vector<int64_t>());
    const size_t len = src.size() - 1;  // symbols, then <end>
    REQUIRE((len >= 1 && len <= 7));
    CHECK(src.back() == EOS);
    CHECK(tgt_in.front() == BOS);
    CHECK(tgt_out.back() == EOS);
    for (size_t t = 0; t < len; ++t) {
      CHECK((src[t] >= FIRST_SYMBOL && src[t] < 12));
      CHECK(tgt_out[t] == src[t]);     // copy
      CHECK(tgt_in[t + 1] == src[t]);  // the answer shifted right behind <start>
      CHECK(r["tgt_out"].to_vector<int64_t>()[t] == src[len - 1 - t]);  // reverse: same source, reversed
    }
  }
  CHECK(copy.get(3)["src"].to_vector<int64_t>() != copy.get(4)["src"].to_vector<int64_t>());
  CHECK_THROWS_WITH_AS(copy.get(100), doctest::Contains("TaskDataset"), Error);
}

TEST_CASE("seq2seq: mirror-sum's output t is symbol t plus symbol len-1-t, modulo the symbols") {
  const int64_t vocab = FIRST_SYMBOL + 4;  // 4 symbols
  Generator gen(5);
  for (int trial = 0; trial < 20; ++trial) {
    auto example = make_example(Task::MirrorSum, 8, vocab, gen);
    const auto src = example["src"].to_vector<int64_t>();
    const auto out = example["tgt_out"].to_vector<int64_t>();
    const int64_t len = static_cast<int64_t>(src.size()) - 1;
    for (int64_t t = 0; t < len; ++t)
      CHECK(out[static_cast<size_t>(t)] - FIRST_SYMBOL ==
            (src[static_cast<size_t>(t)] - FIRST_SYMBOL + src[static_cast<size_t>(len - 1 - t)] - FIRST_SYMBOL) % 4);
    CHECK(out.back() == EOS);
  }
  CHECK(parse_task("mirror-sum") == Task::MirrorSum);
  CHECK(task_name(Task::MirrorSum) == "mirror-sum");
}

TEST_CASE("seq2seq: batches are padded to their longest sequence, with masks that mark the padding") {
  auto dataset = std::make_shared<TaskDataset>(Task::Sort, 64, 9, 10, 1);
  data::DataLoader loader(dataset, data::DataLoaderOptions(8).seed(0), task_collate());
  for (int i = 0; i < 8; ++i) {
    const Batch b = to_batch(loader.next());
    int64_t longest = 0;
    for (int64_t row = 0; row < 8; ++row) {
      const int64_t length = b.src.size(1) - b.src_pad.select(0, row).sum().item<int64_t>();
      longest = std::max(longest, length);
      for (int64_t t = 0; t < b.src.size(1); ++t) {
        CHECK((b.src.at<int64_t>({row, t}) == PAD) == (t >= length));
        CHECK(b.src_pad.at<bool>({row, t}) == (t >= length));
        CHECK(b.tgt_pad.at<bool>({row, t}) == (t >= length));  // the answer is as long as the source
      }
    }
    CHECK(b.src.size(1) == longest);  // no column of padding only
  }
}

TEST_CASE("seq2seq: make_batch pads to seq_len + 1 whatever the lengths drawn") {
  Generator gen(3);
  const Batch b = make_batch(Task::Copy, 4, 30, 8, gen);  // lengths of 1 to 30: rarely 30 in 4
  CHECK(b.src.shape() == Shape{4, 31});
  CHECK(b.tgt_out.shape() == Shape{4, 31});
  CHECK(b.src_pad.dtype() == kBool);
}

TEST_CASE("seq2seq: cached greedy decoding gives the tokens and logits of recomputing the prefix") {
  ModelConfig config;
  config.vocab = 11, config.d_model = 32, config.heads = 4, config.layers = 2, config.ff = 64, config.max_len = 14;
  manual_seed(4);
  Seq2SeqModel model(config);
  model.eval();
  // A random model's argmax is decided by small margins: any difference in the cached path
  // would show as another token somewhere in 6 sequences of 12.
  auto dataset = std::make_shared<TaskDataset>(Task::Reverse, 6, 10, config.vocab, 2);
  data::DataLoader loader(dataset, data::DataLoaderOptions(6).seed(0), task_collate());
  const Batch b = to_batch(loader.next());
  const Tensor cached = model.greedy_decode(b.src, b.src_pad, 12, /*cached=*/true);
  const Tensor recomputed = model.greedy_decode(b.src, b.src_pad, 12, /*cached=*/false);
  CHECK(cached.shape() == Shape{6, 12});
  CHECK(cached.to_vector<int64_t>() == recomputed.to_vector<int64_t>());

  // The logits of the whole decoded prefix, in one pass and step by step with the cache: equal
  // within float32 rounding (the same sums in other groupings: 1e-5 of logits of size ~1).
  NoGradGuard no_grad;
  const Tensor tgt_in = cat({full({6, 1}, BOS, kInt64), cached.narrow(1, 0, 11)}, 1);  // (6, 12)
  const Tensor memory = model.encode(b.src, b.src_pad);
  const Tensor whole = model.decode(tgt_in, memory, b.src_pad, {});  // (6, 12, vocab)
  std::vector<nn::DecoderLayerCache> cache;
  double worst = 0;
  for (int64_t t = 0; t < 12; ++t) {
    const Tensor x = model.positions->forward(
        model.embed->forward(tgt_in.narrow(1, t, 1)) * std::sqrt(static_cast<double>(config.d_model)), t);
    const Tensor step = model.generator->forward(model.transformer->decoder->forward_step(x, memory, cache, b.src_pad));
    worst = std::max(worst, (step.select(1, 0) - whole.select(1, t)).abs().max().item<double>());
  }
  CHECK(worst < 1e-5);
}
