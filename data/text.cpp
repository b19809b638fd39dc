#include "data/text.h"

#include <cctype>
#include <limits>

#include "runtime/files.h"
#include "tensor/kernels.h"

namespace cppgrad::data {

CharVocabulary CharVocabulary::of(std::string_view text) {
  std::array<bool, 256> seen{};
  for (unsigned char c : text) seen[c] = true;
  CharVocabulary vocab;
  vocab.ids.fill(-1);
  for (int c = 0; c < 256; ++c)
    if (seen[c]) {
      vocab.ids[c] = static_cast<int64_t>(vocab.chars.size());
      vocab.chars.push_back(static_cast<unsigned char>(c));
    }
  return vocab;
}

static std::string describe_byte(unsigned char c) {
  return std::isprint(c) ? fmt::format("'{}'", static_cast<char>(c)) : fmt::format("byte {}", int{c});
}

std::vector<int64_t> CharVocabulary::encode(std::string_view text) const {
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    CPPGRAD_CHECK(ids[c] >= 0, "CharVocabulary::encode: the character {} is not in the vocabulary", describe_byte(c));
    out.push_back(ids[c]);
  }
  return out;
}

std::string CharVocabulary::decode(const std::vector<int64_t>& tokens) const {
  std::string out;
  out.reserve(tokens.size());
  for (int64_t t : tokens) {
    CPPGRAD_CHECK(t >= 0 && t < size(), "CharVocabulary::decode: token {} out of range for a vocabulary of {}", t, size());
    out += static_cast<char>(chars[static_cast<size_t>(t)]);
  }
  return out;
}

std::string read_file_bytes(const std::string& path) {
  return files::read_regular_file(path, "read_file_bytes", std::numeric_limits<int64_t>::max());
}

CharText read_char_text(const std::string& path) {
  const std::string text = read_file_bytes(path);
  CharText out{CharVocabulary::of(text), {}};
  out.tokens = out.vocab.encode(text);
  return out;
}

static Tensor token_tensor(const std::vector<int64_t>& tokens) {
  return tensor(tokens, {static_cast<int64_t>(tokens.size())});
}

TextDataset::TextDataset(const std::vector<int64_t>& tokens, int64_t seq_len, int64_t stride)
    : TextDataset(token_tensor(tokens), seq_len, stride) {}

TextDataset::TextDataset(Tensor tokens, int64_t seq_len, int64_t stride)
    : tokens_(std::move(tokens)), seq_len_(seq_len), stride_(stride == 0 ? seq_len : stride) {
  CPPGRAD_CHECK(tokens_.defined() && tokens_.dim() == 1 && tokens_.dtype() == kInt64,
                "TextDataset: expected a 1-D int64 tensor of tokens, got {}",
                tokens_.defined() ? fmt::format("{} {}", dtype_name(tokens_.dtype()), shape_str(tokens_.shape()))
                                  : std::string("an undefined tensor"));
  CPPGRAD_CHECK(seq_len_ >= 1, "TextDataset: seq_len must be positive, got {}", seq_len_);
  CPPGRAD_CHECK(stride_ >= 1, "TextDataset: stride must be positive, got {}", stride_);
  const int64_t n = tokens_.size(0);
  size_ = n > seq_len_ ? (n - seq_len_ - 1) / stride_ + 1 : 0;
}

Example TextDataset::get(int64_t index) const {
  check_index("TextDataset", index, size_);
  const int64_t start = index * stride_;
  return {{"input", kernels::slice(tokens_, 0, start, start + seq_len_, 1)},
          {"target", kernels::slice(tokens_, 0, start + 1, start + seq_len_ + 1, 1)}};
}

}  // namespace cppgrad::data
