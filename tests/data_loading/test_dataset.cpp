// Example, TensorDataset, MapDataset, Subset, TextDataset and the character vocabulary.
#include <filesystem>

#include "helpers.h"

using namespace data_test;

TEST_CASE("Example: tensors by name and by position, set replaces, a missing name lists the others") {
  Example e{{"a", tensor({1.0})}, {"b", tensor({2.0})}};
  CHECK(e.size() == 2);
  CHECK(e["b"].item() == 2.0);
  CHECK(e.at(0).item() == 1.0);
  e.set("a", tensor({3.0})).set("c", tensor({4.0}));
  CHECK(e.names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(e["a"].item() == 3.0);
  CHECK(e.contains("c"));
  CHECK_FALSE(e.contains("d"));
  CHECK_THROWS_WITH_AS(e["d"], "Example: no tensor named 'd' (it has: a, b, c)", Error);
  CHECK_THROWS_AS(e.at(3), Error);
}

TEST_CASE("TensorDataset: example i is row i of every tensor, first dims must agree") {
  auto ds = numbered_dataset(5);
  CHECK(ds->size() == 5);
  Example e = ds->get(3);
  CHECK(e["x"].shape() == Shape{2});
  CHECK(e["x"].to_vector<float>() == std::vector<float>{3.0f, 3.5f});
  CHECK(e["y"].dim() == 0);
  CHECK(e["y"].item<int64_t>() == 3);
  CHECK_THROWS_WITH_AS(ds->get(5), "TensorDataset: index 5 out of range for 5 examples", Error);
  CHECK_THROWS_WITH_AS(ds->get(-1), "TensorDataset: index -1 out of range for 5 examples", Error);
  CHECK_THROWS_WITH_AS(TensorDataset(NamedTensors{{"x", zeros({3, 2})}, {"y", zeros({4})}}),
                       "TensorDataset: tensors must share their first dim, but 'x' is [3,2] and 'y' is [4]", Error);
  CHECK_THROWS_AS(TensorDataset(NamedTensors{}), Error);
  CHECK_THROWS_AS(TensorDataset(std::vector<Tensor>{scalar_tensor(1.0)}), Error);
  TensorDataset positional(std::vector<Tensor>{zeros({2, 3}), ones({2})});
  CHECK(positional.get(1).names() == std::vector<std::string>{"0", "1"});
}

TEST_CASE("MapDataset and Subset: a transform on each example, a chosen subset of indices") {
  auto doubled = map(numbered_dataset(4), [](Example e) {
    e.set("x", e["x"] * 2.0);
    return e;
  });
  CHECK(doubled->size() == 4);
  CHECK(doubled->get(2)["x"].to_vector<float>() == std::vector<float>{4.0f, 5.0f});
  Subset subset(numbered_dataset(10), {7, 2, 2});
  CHECK(subset.size() == 3);
  CHECK(subset.get(0)["y"].item<int64_t>() == 7);
  CHECK(subset.get(2)["y"].item<int64_t>() == 2);
  CHECK_THROWS_WITH_AS(Subset(numbered_dataset(3), {3}), "Subset: index 3 out of range for 3 examples", Error);
  CHECK_THROWS_AS(subset.get(3), Error);
}

TEST_CASE("TextDataset: (input, target) windows, the target shifted by one, size counts whole windows") {
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 11; ++i) tokens.push_back(100 + i);
  TextDataset chunks(tokens, 3);  // stride = seq_len: starts 0, 3, 6 (9 + 3 + 1 > 11)
  CHECK(chunks.size() == 3);
  Example e = chunks.get(2);
  CHECK(e["input"].to_vector<int64_t>() == std::vector<int64_t>{106, 107, 108});
  CHECK(e["target"].to_vector<int64_t>() == std::vector<int64_t>{107, 108, 109});
  TextDataset every(tokens, 3, 1);  // starts 0 .. 7
  CHECK(every.size() == 8);
  CHECK(every.get(7)["target"].to_vector<int64_t>() == std::vector<int64_t>{108, 109, 110});
  // size() = (n - seq_len - 1) / stride + 1: check it against counting by hand for many cases.
  for (int64_t n = 0; n < 12; ++n)
    for (int64_t len = 1; len < 5; ++len)
      for (int64_t stride = 1; stride < 5; ++stride) {
        int64_t count = 0;
        for (int64_t s = 0; s + len + 1 <= n; s += stride) ++count;
        CHECK(TextDataset(std::vector<int64_t>(static_cast<size_t>(n), 0), len, stride).size() == count);
      }
  CHECK_THROWS_AS(TextDataset(tokens, 0), Error);
  CHECK_THROWS_AS(TextDataset(zeros({4}), 2), Error);  // float tokens
}

TEST_CASE("read_char_text: a file's bytes as token ids of its vocabulary, and back") {
  const auto path = std::filesystem::temp_directory_path() / "cppgrad_test_text.txt";
  { std::ofstream(path) << "abca\nb"; }
  CharText text = read_char_text(path.string());
  CHECK(text.vocab.size() == 4);  // '\n' a b c
  CHECK(text.vocab.chars == std::vector<unsigned char>{'\n', 'a', 'b', 'c'});
  CHECK(text.tokens == std::vector<int64_t>{1, 2, 3, 1, 0, 2});
  CHECK(text.vocab.decode(text.tokens) == "abca\nb");
  CHECK_THROWS_WITH_AS(text.vocab.encode("abz"), "CharVocabulary::encode: the character 'z' is not in the vocabulary",
                       Error);
  CHECK_THROWS_AS(text.vocab.decode({4}), Error);
  std::filesystem::remove(path);
  CHECK_THROWS_WITH_AS(read_char_text(path.string()), fmt::format("read_file_bytes: cannot open '{}': No such file or directory", path.string()).c_str(), Error);
}
