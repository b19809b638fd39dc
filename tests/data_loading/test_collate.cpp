// Collate: stacking equal shapes, padding variable lengths (1 to 64) with masks that
// MultiheadAttention takes as its key_padding_mask.
#include "helpers.h"

using namespace data_test;

TEST_CASE("stack_collate: equal shapes stacked under a new batch dim, views and all dtypes") {
  auto ds = numbered_dataset(4);
  Batch b = stack_collate({ds->get(2), ds->get(0)});
  CHECK(b.names() == std::vector<std::string>{"x", "y"});
  CHECK(b["x"].shape() == Shape{2, 2});
  CHECK(b["x"].to_vector<float>() == std::vector<float>{2.0f, 2.5f, 0.0f, 0.5f});
  CHECK(ids_of(b) == std::vector<int64_t>{2, 0});
  // A transposed view is stacked in logical order.
  Tensor m = tensor({{1, 2}, {3, 4}}).t();
  CHECK(stack_tensors({m, m}).to_vector<float>() == std::vector<float>{1, 3, 2, 4, 1, 3, 2, 4});
  Tensor flags = tensor(std::vector<bool>{true, false}, {2});
  CHECK(stack_tensors({flags, flags}).to_vector<bool>() == std::vector<bool>{true, false, true, false});
  CHECK_THROWS_WITH_AS(stack_collate({Example{{"x", zeros({2})}}, Example{{"x", zeros({3})}}}),
                       "stack_collate: field 'x': cannot stack shapes [2] (example 0) and [3] (example 1); pad variable "
                       "lengths with pad_collate",
                       Error);
  CHECK_THROWS_AS(stack_collate({Example{{"x", zeros({2})}}, Example{{"y", zeros({2})}}}), Error);
  CHECK_THROWS_AS(stack_collate({Example{{"x", zeros({2})}}, Example{{"x", zeros({2}, kFloat64)}}}), Error);
  CHECK_THROWS_AS(stack_collate({}), Error);
}

TEST_CASE("pad_sequences: every length from 1 to 64, padding value, mask true exactly at padding, lengths") {
  Generator gen(4);
  for (int64_t trial = 0; trial < 20; ++trial) {
    // A batch of random lengths in [1, 64], one of them always 64 or 1 in turn, so both ends occur.
    std::vector<Tensor> seqs;
    std::vector<int64_t> lengths;
    for (int64_t b = 0; b < 7; ++b) {
      const int64_t len = b == 0 ? (trial % 2 ? 64 : 1) : gen.randint(1, 65);
      lengths.push_back(len);
      seqs.push_back(arange(int64_t{1}, len + 1));  // 1..len, never the padding value
    }
    for (int64_t len = 1; len <= 64; ++len) {  // and every length at least once over the trials
      if (len % 20 != trial) continue;
      lengths.push_back(len);
      seqs.push_back(arange(int64_t{1}, len + 1));
    }
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    PaddedSequences p = pad_sequences(seqs, -7);
    const auto batch = static_cast<int64_t>(seqs.size());
    REQUIRE(p.padded.shape() == Shape{batch, longest});
    REQUIRE(p.padding_mask.shape() == Shape{batch, longest});
    CHECK(p.padding_mask.dtype() == kBool);
    CHECK(p.lengths.to_vector<int64_t>() == lengths);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < longest; ++t) {
        const bool padding = t >= lengths[static_cast<size_t>(b)];
        CHECK(p.padding_mask.at<bool>({b, t}) == padding);
        CHECK(p.padded.at<int64_t>({b, t}) == (padding ? -7 : t + 1));
      }
  }
}

TEST_CASE("pad_sequences: trailing dims kept, dtypes kept, wrong padding values and shapes refused") {
  PaddedSequences p = pad_sequences({ones({2, 3}), full({4, 3}, 2.0)}, 0.5);
  CHECK(p.padded.shape() == Shape{2, 4, 3});
  CHECK(p.padded.at<float>({0, 1, 2}) == 1.0f);
  CHECK(p.padded.at<float>({0, 2, 0}) == 0.5f);
  CHECK(p.padded.at<float>({1, 3, 2}) == 2.0f);
  PaddedSequences empty_one = pad_sequences({zeros({0, 3}), ones({1, 3})}, 0);
  CHECK(empty_one.padding_mask.to_vector<bool>() == std::vector<bool>{true, false});
  CHECK_THROWS_WITH_AS(pad_sequences({zeros({2, 3}), zeros({2, 4})}, 0),
                       "pad_sequences: sequences [2,3] (sequence 0) and [2,4] (sequence 1) differ beyond their length",
                       Error);
  CHECK_THROWS_WITH_AS(pad_sequences({arange(3)}, 0.5), "pad_sequences: padding value 0.5 is not an int64", Error);
  CHECK_THROWS_AS(pad_sequences({scalar_tensor(1.0)}, 0), Error);
  CHECK_THROWS_AS(pad_sequences({arange(3), zeros({3})}, 0), Error);
}

TEST_CASE("pad_collate: named fields padded with masks and lengths after the fields, the rest stacked") {
  std::vector<Example> examples;
  for (int64_t len : {3, 1, 2})
    examples.push_back(Example{{"src", arange(int64_t{10}, 10 + len)}, {"label", scalar_tensor(1.0)}});
  Batch b = pad_collate({{"src", 0}})(examples);
  CHECK(b.names() == std::vector<std::string>{"src", "label", "src_padding_mask", "src_lengths"});
  CHECK(b["src"].to_vector<int64_t>() == std::vector<int64_t>{10, 11, 12, 10, 0, 0, 10, 11, 0});
  CHECK(b["src_padding_mask"].to_vector<bool>() ==
        std::vector<bool>{false, false, false, false, true, true, false, false, true});
  CHECK(b["src_lengths"].to_vector<int64_t>() == std::vector<int64_t>{3, 1, 2});
  CHECK(b["label"].shape() == Shape{3});
  CHECK_THROWS_WITH_AS(pad_collate({{"tgt", 0}})(examples),
                       "pad_collate: the examples have no field 'tgt' to pad (they have: src, label)", Error);
}

TEST_CASE("pad_collate's mask is MultiheadAttention's key_padding_mask: padded rows attend as the unpadded ones") {
  // Each sequence alone (no padding) and in a padded batch must give the same outputs at its
  // real positions. float64, so the only differences are summation order: 1e-12 is generous.
  manual_seed(0);
  nn::MultiheadAttention attention(8, 2);
  attention.to(kFloat64);
  attention.eval();
  NoGradGuard no_grad;
  std::vector<Example> examples;
  for (int64_t len : {5, 1, 3}) examples.push_back(Example{{"x", randn({len, 8}, kFloat64)}});
  Batch b = pad_collate({{"x", 0}})(examples);
  Tensor out =
      attention.forward(b["x"], b["x"], b["x"], {.key_padding_mask = b["x_padding_mask"]}).output;  // (3, 5, 8)
  for (int64_t i = 0; i < 3; ++i) {
    const Tensor& x = examples[static_cast<size_t>(i)]["x"];
    Tensor alone = attention.forward(x.unsqueeze(0), x.unsqueeze(0), x.unsqueeze(0)).output.select(0, 0);
    Tensor mine = out.select(0, i).narrow(0, 0, x.size(0));
    CHECK((mine - alone).abs().max().item() < 1e-12);
  }
}
