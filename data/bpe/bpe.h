// Byte-level byte-pair encoding (BPE), the tokenizer of GPT-2 and its descendants.
//
// A text is first cut into pre-tokens by GPT-2's pattern (words with their leading space, runs of
// digits, of punctuation, of whitespace), then each pre-token, as bytes, is merged pair by pair in
// the order of a learned list of merges. The 256 single bytes are all tokens, so every byte
// sequence encodes and decodes back to itself, invalid UTF-8 included.
//
//   auto tok = data::BPETokenizer::train(text, /*vocab_size=*/1000);   // merges learned on a text
//   auto gpt2 = data::BPETokenizer::load_gpt2("encoder.json", "vocab.bpe");  // GPT-2's own files
//   std::vector<int64_t> ids = gpt2.encode("Hello world");                   // {15496, 995}
//   std::string again = gpt2.decode(ids);                                    // "Hello world"
//   tok.save("tok.bpe");  auto same = data::BPETokenizer::load("tok.bpe");
//
// Pre-tokenisation. GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// needs Unicode's letter and number classes, which std::regex lacks; it runs on PCRE2 in UTF mode
// with Unicode properties (JIT-compiled where PCRE2 can). A byte that is not part of valid UTF-8
// matches nothing: a run of such bytes is a pre-token of its own, and the valid text on each side
// of it is cut as if the text ended or began there.
//
// Loaders treat every file as untrusted: a path must name a regular file, and a malformed file
// (a token named twice, ids with gaps, a merge of tokens the vocabulary lacks or that no earlier
// merge made, over-long lines, JSON that is not a flat object of ids or not UTF-8) is refused
// with a cppgrad::Error naming the file, the line or token, and what is wrong.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cppgrad::data {

class BPETokenizer {
 public:
  // Longest token, in bytes: training makes none longer, loaders refuse longer ones.
  static constexpr int64_t kMaxTokenBytes = 1024;
  // Largest vocabulary a loader accepts.
  static constexpr int64_t kMaxVocabSize = int64_t{1} << 24;

  // Learns merges on `text` until the vocabulary has `vocab_size` tokens (at least 256: the
  // bytes) or no two tokens stand side by side any more. Token ids: 0..255 are the bytes, merge k
  // makes token 256 + k. Each merge joins the pair of adjacent tokens that occurs most often
  // within the text's pre-tokens (overlapping occurrences counted, as in "aaa": two of "aa");
  // ties go to the pair with the smaller left token id, then the smaller right token id. A pair
  // whose token would exceed kMaxTokenBytes is never merged.
  static BPETokenizer train(std::string_view text, int64_t vocab_size);

  // GPT-2's vocabulary (encoder.json: token -> id, tokens spelt through GPT-2's byte-to-unicode
  // table) and merges (vocab.bpe: one merge per line, first line "#version: ..." optional).
  static BPETokenizer load_gpt2(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
  static BPETokenizer parse_gpt2(std::string_view encoder_json, std::string_view vocab_bpe,
                                 const std::string& source = "<memory>");

  // This class's own format (serialize() documents it).
  void save(const std::string& path) const;  // written to a temporary file, then renamed
  static BPETokenizer load(const std::string& path);
  std::string serialize() const;
  static BPETokenizer parse(std::string_view bytes, const std::string& source = "<memory>");

  std::vector<int64_t> encode(std::string_view text) const;
  // Throws Error on an id outside [0, vocab_size()).
  std::string decode(const std::vector<int64_t>& ids) const;

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  const std::string& token_bytes(int64_t id) const;  // the bytes a token stands for
  int64_t token_id(std::string_view bytes) const;     // -1 for bytes that are no token
  // The merges in rank order: (left id, right id); merge k joins them into token_id(left + right).
  const std::vector<std::pair<int64_t, int64_t>>& merges() const { return merges_; }

  bool operator==(const BPETokenizer& other) const { return tokens_ == other.tokens_ && merges_ == other.merges_; }

 private:
  BPETokenizer() = default;  // made only by train() and the loaders: never without its 256 bytes
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  // Builds the lookups from tokens_ and merges_, checking every rule the loaders promise.
  void index(const std::string& source);
  void encode_pretoken(std::string_view bytes, std::vector<int32_t>& out) const;
  static uint64_t pair_key(int64_t left, int64_t right) {
    return (static_cast<uint64_t>(left) << 32) | static_cast<uint64_t>(right);
  }

  std::vector<std::string> tokens_;                      // id -> bytes
  std::vector<std::pair<int64_t, int64_t>> merges_;      // rank -> (left, right)
  std::unordered_map<std::string, int32_t> ids_;         // bytes -> id
  std::array<int32_t, 256> byte_ids_{};                  // byte -> id of its one-byte token
  std::unordered_map<uint64_t, Merge> merge_of_pair_;    // pair_key(left, right) -> rank, result
};

// GPT-2's files spell every byte as one printable character (its byte-to-unicode table: the space
// is 'Ġ'). The spelling of `bytes`, in UTF-8; and the bytes a spelling stands for, refusing (naming
// `where`) invalid UTF-8, a character outside the table or an empty text.
std::string gpt2_spelling(std::string_view bytes);
std::string gpt2_spelt_bytes(std::string_view spelt, const std::string& where);

// GPT-2's pre-tokens of `text`, in order; their concatenation is `text`.
std::vector<std::string_view> gpt2_pretokens(std::string_view text);

}  // namespace cppgrad::data
