// Text for language models: a file read as characters (bytes) with their vocabulary, and a
// dataset that cuts a token sequence into (input, target) windows, the target being the input
// shifted by one token.
//
//   auto text = data::read_char_text("book.txt");             // vocabulary + token ids
//   data::TextDataset train(text.tokens, /*seq_len=*/64, /*stride=*/1);
//   data::Example e = train.get(0);    // e["input"] = tokens[0, 64), e["target"] = tokens[1, 65)
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dataset.h"

namespace cppgrad::data {

// The distinct bytes of a text, in byte order: token id k is the k-th smallest byte present.
struct CharVocabulary {
  std::vector<unsigned char> chars;  // token id -> byte
  std::array<int64_t, 256> ids{};    // byte -> token id, -1 for a byte the text lacks

  static CharVocabulary of(std::string_view text);
  int64_t size() const { return static_cast<int64_t>(chars.size()); }
  bool contains(unsigned char c) const { return ids[c] >= 0; }
  // Throws Error naming the first byte that is not in the vocabulary.
  std::vector<int64_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int64_t>& tokens) const;
};

// A whole file's bytes; throws Error naming the file when it cannot be read.
std::string read_file_bytes(const std::string& path);

struct CharText {
  CharVocabulary vocab;
  std::vector<int64_t> tokens;  // the file, one id per byte
};
// A file as characters: its vocabulary and its token ids.
CharText read_char_text(const std::string& path);

// Windows over a token sequence. Example i starts at s = i * stride:
//   "input"  = tokens[s, s + seq_len)          (seq_len) int64
//   "target" = tokens[s + 1, s + seq_len + 1)  (seq_len) int64
// stride = seq_len (the default) cuts the text into back-to-back windows; stride = 1 gives every
// start, as a language model's random windows draw from. Windows that would run past the end are
// left out, so size() = (n - seq_len - 1) / stride + 1 for n > seq_len tokens, else 0.
class TextDataset : public Dataset {
 public:
  TextDataset(const std::vector<int64_t>& tokens, int64_t seq_len, int64_t stride = 0);
  TextDataset(Tensor tokens, int64_t seq_len, int64_t stride = 0);  // 1-D int64; shared, not copied
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;

  int64_t seq_len() const { return seq_len_; }
  int64_t stride() const { return stride_; }
  const Tensor& tokens() const { return tokens_; }

 private:
  Tensor tokens_;
  int64_t seq_len_ = 0, stride_ = 0, size_ = 0;
};

}  // namespace cppgrad::data
