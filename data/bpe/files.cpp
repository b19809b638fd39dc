// BPETokenizer's files: its own format, and GPT-2's encoder.json + vocab.bpe. Every file is
// untrusted: sizes are bounded, each line and entry is checked, and what index() checks (tokens
// distinct, all 256 bytes present, merges of existing tokens in an order that makes them) follows.

#include <charconv>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "data/bpe/bpe.h"
#include "runtime/error.h"
#include "runtime/files.h"

namespace cppgrad::data {

namespace {

constexpr int64_t kMaxFileBytes = int64_t{256} << 20;
constexpr std::string_view kMagic = "cppgrad-bpe 1";

std::string read_regular_file(const std::string& path, const char* what) {
  return files::read_regular_file(path, what, kMaxFileBytes);
}

// Splits `text` into lines at '\n' (a '\r' before it is dropped), each at most `max_line` bytes.
std::vector<std::string_view> lines_of(std::string_view text, size_t max_line, const std::string& source) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    CPPGRAD_CHECK(line.size() <= max_line, "BPETokenizer: {}: line {} is longer than {} bytes", source,
                  lines.size() + 1, max_line);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
  return lines;
}

int64_t parse_count(std::string_view field, const std::string& source, size_t line) {
  int64_t value = -1;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
  CPPGRAD_CHECK(ec == std::errc() && end == field.data() + field.size() && value >= 0 && !field.empty(),
                "BPETokenizer: {}: line {}: expected a non-negative integer, got '{}'", source, line,
                field.substr(0, 40));
  return value;
}

// ---- GPT-2's byte-to-unicode table: its files spell each byte as one printable character ----
// The printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68, in byte
// order, are U+0100, U+0101, ... (so the space 0x20 is 'Ġ' U+0120, the newline 0x0a 'Ċ' U+010A).
struct ByteToUnicode {
  std::array<char32_t, 256> of_byte{};
  std::unordered_map<char32_t, unsigned char> byte_of;
  ByteToUnicode() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      of_byte[b] = printable ? static_cast<char32_t>(b) : next++;
      byte_of[of_byte[b]] = static_cast<unsigned char>(b);
    }
  }
};
const ByteToUnicode& byte_to_unicode() {
  static const ByteToUnicode table;
  return table;
}

// encoder.json must be one flat object of "token": id; anything else stops the parse at once.
class VocabularyReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit VocabularyReader(std::string source) : source_(std::move(source)) {}
  std::vector<std::pair<std::string, int64_t>> entries;
  std::string problem;

  bool start_object(std::size_t) override { return depth_++ == 0 || refuse("an object inside the vocabulary"); }
  bool end_object() override { return --depth_, true; }
  bool key(string_t& token) override {
    if (static_cast<int64_t>(entries.size()) >= BPETokenizer::kMaxVocabSize)
      return refuse(fmt::format("more than {} tokens", BPETokenizer::kMaxVocabSize));
    if (!keys_.insert(token).second) return refuse(fmt::format("the token '{}' is listed twice", token.substr(0, 40)));
    key_ = token;
    return true;
  }
  bool number_unsigned(number_unsigned_t id) override {
    if (depth_ != 1) return refuse("a number, not an object");
    if (id >= static_cast<number_unsigned_t>(BPETokenizer::kMaxVocabSize))
      return refuse(fmt::format("the token '{}' has the id {}, beyond the limit of {}", key_.substr(0, 40), id,
                                BPETokenizer::kMaxVocabSize));
    entries.emplace_back(key_, static_cast<int64_t>(id));
    return true;
  }
  bool number_integer(number_integer_t id) override {
    return id >= 0 ? number_unsigned(static_cast<number_unsigned_t>(id))
                   : refuse(fmt::format("the token '{}' has the negative id {}", key_.substr(0, 40), id));
  }
  bool null() override { return refuse("null where an id was expected"); }
  bool boolean(bool) override { return refuse("a boolean where an id was expected"); }
  bool number_float(number_float_t, const string_t& s) override { return refuse("the id " + s + " is not an integer"); }
  bool string(string_t&) override { return refuse(depth_ == 0 ? "a string, not an object" : "a string where an id was expected"); }
  bool binary(binary_t&) override { return refuse("binary data"); }
  bool start_array(std::size_t) override { return refuse("an array where an id was expected"); }
  bool end_array() override { return false; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    return refuse(e.what());
  }

 private:
  bool refuse(std::string why) {
    if (problem.empty()) problem = std::move(why);
    return false;
  }
  std::string source_, key_;
  std::unordered_set<std::string> keys_;
  int depth_ = 0;
};

}  // namespace

std::string gpt2_spelling(std::string_view bytes) {
  const auto& table = byte_to_unicode();
  std::string out;
  for (unsigned char b : bytes) {
    const char32_t c = table.of_byte[b];  // below U+0800: one or two bytes of UTF-8
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

std::string gpt2_spelt_bytes(std::string_view spelt, const std::string& where) {
  const auto& table = byte_to_unicode();
  std::string bytes;
  size_t i = 0;
  while (i < spelt.size()) {
    const auto lead = static_cast<unsigned char>(spelt[i]);
    const size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
    CPPGRAD_CHECK(length > 0 && i + length <= spelt.size(), "BPETokenizer: {}: '{}' is not valid UTF-8", where,
                  spelt.substr(0, 40));
    char32_t c = length == 1 ? lead : lead & (0x7F >> length);
    for (size_t k = 1; k < length; ++k) {
      const auto cont = static_cast<unsigned char>(spelt[i + k]);
      CPPGRAD_CHECK((cont >> 6) == 0x2, "BPETokenizer: {}: '{}' is not valid UTF-8", where, spelt.substr(0, 40));
      c = (c << 6) | (cont & 0x3F);
    }
    const auto it = table.byte_of.find(c);
    CPPGRAD_CHECK(it != table.byte_of.end(), "BPETokenizer: {}: '{}' has the character U+{:04X}, which GPT-2's "
                  "byte-to-unicode table has not", where, spelt.substr(0, 40), static_cast<uint32_t>(c));
    bytes += static_cast<char>(it->second);
    i += length;
  }
  CPPGRAD_CHECK(!bytes.empty(), "BPETokenizer: {}: an empty token", where);
  return bytes;
}

// ---- GPT-2's files ----

namespace {

// A token that is no byte and that no merge makes is never produced by encode(): a vocabulary of
// such tokens (a merges file cut short) would give a model rows the text never reaches. Special
// tokens, spelt <|...|> as GPT-2's <|endoftext|>, are placed by the user instead. After index().
void refuse_unreachable_tokens(const BPETokenizer& tok, const std::string& source) {
  std::vector<bool> made(static_cast<size_t>(tok.vocab_size()), false);
  for (const auto& [left, right] : tok.merges())
    made[static_cast<size_t>(tok.token_id(tok.token_bytes(left) + tok.token_bytes(right)))] = true;
  for (int64_t id = 0; id < tok.vocab_size(); ++id) {
    const std::string& bytes = tok.token_bytes(id);
    const bool special = bytes.size() > 4 && bytes.starts_with("<|") && bytes.ends_with("|>");
    CPPGRAD_CHECK(bytes.size() == 1 || made[static_cast<size_t>(id)] || special,
                  "BPETokenizer: {}: token {} '{}' is no byte and no merge makes it ({} merges for {} tokens; only a "
                  "special token spelt <|...|> may be neither)",
                  source, id, bytes.substr(0, 40), tok.merges().size(), tok.vocab_size());
  }
}

}  // namespace

BPETokenizer BPETokenizer::parse_gpt2(std::string_view encoder_json, std::string_view vocab_bpe,
                                      const std::string& source) {
  BPETokenizer tok;
  const std::string vocabulary = source + " (encoder.json)";
  VocabularyReader reader(vocabulary);
  const bool parsed = nlohmann::json::sax_parse(encoder_json.begin(), encoder_json.end(), &reader);
  CPPGRAD_CHECK(parsed && reader.problem.empty(), "BPETokenizer: {}: not a JSON object of token ids: {}", vocabulary,
                reader.problem.empty() ? std::string("the JSON is not an object") : reader.problem);
  // Ids must be 0..N-1, each once.
  tok.tokens_.resize(reader.entries.size());
  std::vector<std::string_view> spelt(reader.entries.size());
  for (const auto& [token, id] : reader.entries) {
    CPPGRAD_CHECK(id < static_cast<int64_t>(reader.entries.size()), "BPETokenizer: {}: the token '{}' has the id {}, "
                  "but {} tokens have the ids 0..{}: some id is missing", vocabulary, token.substr(0, 40), id,
                  reader.entries.size(), reader.entries.size() - 1);
    const auto slot = static_cast<size_t>(id);
    CPPGRAD_CHECK(spelt[slot].empty(), "BPETokenizer: {}: the tokens '{}' and '{}' both have the id {}", vocabulary,
                  spelt[slot].substr(0, 40), token.substr(0, 40), id);
    spelt[slot] = token;
    tok.tokens_[slot] = gpt2_spelt_bytes(token, vocabulary);
  }
  tok.index(vocabulary);  // the bytes' tokens and distinct tokens are checked before the merges

  const std::string merges = source + " (vocab.bpe)";
  const auto lines = lines_of(vocab_bpe, 4 * 2 * kMaxTokenBytes + 1, merges);
  size_t first = (!lines.empty() && lines[0].starts_with("#")) ? 1 : 0;  // "#version: 0.2"
  size_t last = lines.size();
  while (last > first && lines[last - 1].empty()) --last;  // the file's final newline
  for (size_t i = first; i < last; ++i) {
    const std::string where = fmt::format("{} line {}", merges, i + 1);
    const std::string_view line = lines[i];
    const size_t space = line.find(' ');
    CPPGRAD_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                  line.find(' ', space + 1) == std::string_view::npos,
                  "BPETokenizer: {}: expected two tokens separated by one space, got '{}'", where, line.substr(0, 80));
    int64_t parts[2];
    for (int k = 0; k < 2; ++k) {
      const std::string_view token = k == 0 ? line.substr(0, space) : line.substr(space + 1);
      const int64_t id = tok.token_id(gpt2_spelt_bytes(token, where));
      CPPGRAD_CHECK(id >= 0, "BPETokenizer: {}: the token '{}' is not in the vocabulary", where, token.substr(0, 40));
      parts[k] = id;
    }
    tok.merges_.emplace_back(parts[0], parts[1]);
  }
  tok.index(merges);
  refuse_unreachable_tokens(tok, merges);
  return tok;
}

BPETokenizer BPETokenizer::load_gpt2(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
  return parse_gpt2(read_regular_file(encoder_json_path, "BPETokenizer::load_gpt2"),
                    read_regular_file(vocab_bpe_path, "BPETokenizer::load_gpt2"),
                    fmt::format("'{}' + '{}'", encoder_json_path, vocab_bpe_path));
}

// ---- the own format ----
// Text, one item per line:
//   cppgrad-bpe 1
//   tokens N           then N lines: token id i's bytes in hexadecimal (lower case), ids in order
//   merges M           then M lines: "left right", the token ids a merge joins, merges in rank order
std::string BPETokenizer::serialize() const {
  std::string out = fmt::format("{}\ntokens {}\n", kMagic, tokens_.size());
  static constexpr char kHex[] = "0123456789abcdef";
  for (const std::string& token : tokens_) {
    for (unsigned char c : token) {
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
    out += '\n';
  }
  out += fmt::format("merges {}\n", merges_.size());
  for (const auto& [left, right] : merges_) out += fmt::format("{} {}\n", left, right);
  return out;
}

BPETokenizer BPETokenizer::parse(std::string_view bytes, const std::string& source) {
  const auto lines = lines_of(bytes, 2 * kMaxTokenBytes, source);
  CPPGRAD_CHECK(!lines.empty() && lines[0] == kMagic, "BPETokenizer: {}: not a cppgrad BPE file (the first line "
                "should be '{}')", source, kMagic);
  size_t at = 1;
  auto header = [&](std::string_view name) {
    CPPGRAD_CHECK(at < lines.size() && lines[at].starts_with(name) && lines[at].size() > name.size() &&
                  lines[at][name.size()] == ' ', "BPETokenizer: {}: line {}: expected '{} COUNT'", source, at + 1, name);
    const int64_t count = parse_count(lines[at].substr(name.size() + 1), source, at + 1);
    ++at;
    CPPGRAD_CHECK(count <= static_cast<int64_t>(lines.size() - at), "BPETokenizer: {}: line {}: {} {} announced, "
                  "but only {} lines follow", source, at, count, name, lines.size() - at);
    return count;
  };
  BPETokenizer tok;
  const int64_t n_tokens = header("tokens");
  CPPGRAD_CHECK(n_tokens <= kMaxVocabSize, "BPETokenizer: {}: {} tokens, more than the limit of {}", source, n_tokens,
                kMaxVocabSize);
  for (int64_t i = 0; i < n_tokens; ++i, ++at) {
    const std::string_view hex = lines[at];
    CPPGRAD_CHECK(!hex.empty() && hex.size() % 2 == 0, "BPETokenizer: {}: line {}: token {} is not an even number "
                  "of hexadecimal digits", source, at + 1, i);
    std::string token(hex.size() / 2, '\0');
    for (size_t k = 0; k < token.size(); ++k) {
      unsigned value = 0;
      const auto [end, ec] = std::from_chars(hex.data() + 2 * k, hex.data() + 2 * k + 2, value, 16);
      CPPGRAD_CHECK(ec == std::errc() && end == hex.data() + 2 * k + 2, "BPETokenizer: {}: line {}: token {} has a "
                    "character that is not a hexadecimal digit", source, at + 1, i);
      token[k] = static_cast<char>(value);
    }
    tok.tokens_.push_back(std::move(token));
  }
  const int64_t n_merges = header("merges");
  for (int64_t i = 0; i < n_merges; ++i, ++at) {
    const std::string_view line = lines[at];
    const size_t space = line.find(' ');
    CPPGRAD_CHECK(space != std::string_view::npos, "BPETokenizer: {}: line {}: expected 'LEFT RIGHT' for merge {}",
                  source, at + 1, i);
    tok.merges_.emplace_back(parse_count(line.substr(0, space), source, at + 1),
                             parse_count(line.substr(space + 1), source, at + 1));
  }
  CPPGRAD_CHECK(at == lines.size(), "BPETokenizer: {}: line {}: unexpected text after the last merge", source, at + 1);
  tok.index(source);
  refuse_unreachable_tokens(tok, source);
  return tok;
}

BPETokenizer BPETokenizer::load(const std::string& path) {
  return parse(read_regular_file(path, "BPETokenizer::load"), "'" + path + "'");
}

void BPETokenizer::save(const std::string& path) const {
  // Whole or not at all: a failed save leaves the old file whole and no temporary behind.
  files::write_file_atomically(path, std::string_view(serialize()), "BPETokenizer::save");
}

}  // namespace cppgrad::data
