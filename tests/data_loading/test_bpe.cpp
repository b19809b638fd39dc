// data::BPETokenizer: training picks the most frequent pairs in order, every byte sequence round-
// trips, its own files and GPT-2's load and save, and malformed files are refused by name.
// (Agreement with GPT-2's own encoder on its real vocabulary: CTest data/bpe_matches_gpt3_encoder.)
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <random>

#include "helpers.h"
#include "data/bpe/bpe.h"

namespace {

using namespace data_test;
namespace fs = std::filesystem;

// GPT-2's byte-to-unicode table, written out again here so that the tests do not trust the
// library's: printable bytes stand for themselves, the others are U+0100, U+0101, ... in order.
std::string gpt2_spelling(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    int code = b, extra = 0;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174;
      if (!printable && c == b) code = 256 + extra;
      if (!printable) ++extra;
    }
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }
  return out;
}

// A GPT-2-style vocabulary: the 256 bytes at ids 0..255 (in byte order), then `extra` tokens.
std::string encoder_json(const std::vector<std::string>& extra) {
  std::string json = "{";
  int id = 0;
  auto add = [&](const std::string& bytes) {
    std::string key;
    for (char c : gpt2_spelling(bytes)) key += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    json += fmt::format("{}\"{}\": {}", id == 0 ? "" : ", ", key, id);
    ++id;
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
  for (const auto& token : extra) add(token);
  return json + "}";
}

const std::string kTheJson = encoder_json({" t", "he", " the", "<|endoftext|>"});
const std::string kTheMerges = "#version: 0.2\n\xc4\xa0 t\nh e\n\xc4\xa0t he\n";  // "Ġ t", "h e", "Ġt he"

// The pair counts of words (each with its count), as the documentation of train() defines them.
std::map<std::pair<int64_t, int64_t>, int64_t> pair_counts(const std::map<std::vector<int64_t>, int64_t>& words) {
  std::map<std::pair<int64_t, int64_t>, int64_t> counts;
  for (const auto& [word, count] : words)
    for (size_t i = 0; i + 1 < word.size(); ++i) counts[{word[i], word[i + 1]}] += count;
  return counts;
}

std::string random_bytes(std::mt19937& rng, size_t n) {
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xFF);
  return out;
}

}  // namespace

TEST_CASE("BPETokenizer::train: the classic example, merges in order with ties broken by token id") {
  // "aaabdaaabac" is one pre-token. Pairs: aa 4 (overlapping), ab 2, the others 1 -> merge (a, a).
  // Then (aa, a) and (a, b) both occur twice: the smaller left id wins, 'a' (97) < "aa" (256).
  // Then (aa, ab) occurs twice, every other pair once.
  const auto tok = BPETokenizer::train("aaabdaaabac", 259);
  const std::vector<std::pair<int64_t, int64_t>> expected{{'a', 'a'}, {'a', 'b'}, {256, 257}};
  CHECK(tok.merges() == expected);
  CHECK(tok.vocab_size() == 259);
  CHECK(tok.token_bytes(258) == "aaab");
  CHECK(tok.encode("aaabdaaabac") == std::vector<int64_t>{258, 'd', 258, 'a', 'c'});
}

TEST_CASE("BPETokenizer::train: each merge is the most frequent pair of the text merged so far") {
  const std::string text =
      "the cat sat on the mat; the rat sat on the hat. That cat's hat is the mat's! 1234 1234 12\n\n"
      "then they thought, the three thieves: there, then, thereafter. Tatata tatata";
  const auto tok = BPETokenizer::train(text, 256 + 40);
  REQUIRE(tok.merges().size() == 40);
  // Recount from scratch before every merge (the library counts incrementally).
  std::map<std::vector<int64_t>, int64_t> words;
  for (std::string_view piece : gpt2_pretokens(text)) ++words[std::vector<int64_t>(piece.begin(), piece.end())];
  for (size_t k = 0; k < tok.merges().size(); ++k) {
    const auto counts = pair_counts(words);
    std::pair<int64_t, int64_t> best{-1, -1};
    int64_t best_count = 0;
    for (const auto& [pair, count] : counts)  // std::map: pairs in (left, right) order, so the first max wins ties
      if (count > best_count) best = pair, best_count = count;
    CAPTURE(k);
    CHECK(tok.merges()[k] == best);
    const int64_t made = 256 + static_cast<int64_t>(k);
    std::map<std::vector<int64_t>, int64_t> merged;
    for (const auto& [word, count] : words) {
      std::vector<int64_t> out;
      for (size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == best.first && word[i + 1] == best.second) {
          out.push_back(made);
          ++i;
        } else {
          out.push_back(word[i]);
        }
      }
      merged[out] += count;
    }
    words = std::move(merged);
  }
  CHECK(tok.decode(tok.encode(text)) == text);
  // Training stops when no two tokens stand side by side: "ab" can make one merge only.
  CHECK(BPETokenizer::train("ab", 1000).vocab_size() == 257);
}

TEST_CASE("BPETokenizer: every byte sequence round-trips, invalid UTF-8 included") {
  std::mt19937 rng(27);
  const std::string corpus = "Hello, world! Héllo wörld, 日本語 😀 " + random_bytes(rng, 2000);
  const auto tok = BPETokenizer::train(corpus, 600);
  for (size_t n : {0, 1, 2, 7, 100, 5000}) {
    const std::string bytes = random_bytes(rng, n);
    CAPTURE(n);
    CHECK(tok.decode(tok.encode(bytes)) == bytes);
  }
  std::string all(256, '\0');
  for (int b = 0; b < 256; ++b) all[static_cast<size_t>(b)] = static_cast<char>(b);
  CHECK(tok.decode(tok.encode(all + all)) == all + all);
  // A run of invalid bytes is a pre-token of its own; the valid text around it is cut as usual.
  const auto pieces = gpt2_pretokens("ab\xff\xfe cd \xe6\x97 e");
  const std::vector<std::string_view> expected{"ab", "\xff\xfe", " cd", " ", "\xe6\x97", " e"};
  CHECK(pieces == expected);
}

TEST_CASE("BPETokenizer: a 256 KiB word encodes in n log n, not n^2") {
  const auto tok = BPETokenizer::train(std::string(64, 'a') + " " + std::string(64, 'b'), 270);
  const std::string word(1 << 18, 'a');  // GPT-2's loop would take ~10^10 steps here
  CHECK(tok.decode(tok.encode(word)) == word);
}

TEST_CASE("BPETokenizer: save and load give the same tokenizer, to the byte") {
  const auto tok = BPETokenizer::train("low lower lowest newer newest wider widest, 2024-01-02", 300);
  const auto path = (fs::temp_directory_path() / "cppgrad_test_bpe.txt").string();
  tok.save(path);
  const auto again = BPETokenizer::load(path);
  CHECK(again == tok);
  CHECK(again.serialize() == tok.serialize());
  CHECK(again.encode("the lowest newer widths") == tok.encode("the lowest newer widths"));
  fs::remove(path);
  // GPT-2's files, saved in the own format, load with the same ids.
  const auto gpt2 = BPETokenizer::parse_gpt2(kTheJson, kTheMerges);
  CHECK(BPETokenizer::parse(gpt2.serialize()) == gpt2);
}

TEST_CASE("BPETokenizer::parse_gpt2: GPT-2's spelling of bytes and its merge ranks") {
  const auto tok = BPETokenizer::parse_gpt2(kTheJson, kTheMerges);
  CHECK(tok.vocab_size() == 260);
  CHECK(tok.token_bytes(258) == " the");
  CHECK(tok.token_id("<|endoftext|>") == 259);
  // " the" -> " t" + "he" -> " the"; "the" has no " t": t + "he".
  CHECK(tok.encode(" the") == std::vector<int64_t>{258});
  CHECK(tok.encode("the the\n") == std::vector<int64_t>{'t', 257, 258, '\n'});
  CHECK(tok.decode({258, 259}) == " the<|endoftext|>");
}

TEST_CASE("BPETokenizer: malformed files are refused with a message naming the fault") {
  const auto refused = [](std::string_view json, std::string_view merges, const std::string& fault) {
    CAPTURE(fault);
    CHECK_THROWS_WITH_AS(BPETokenizer::parse_gpt2(json, merges), doctest::Contains(fault.c_str()), Error);
  };
  refused("[1, 2]", "", "an array where an id was expected");
  refused("{\"a\": {\"b\": 1}}", "", "an object inside the vocabulary");
  refused("{\"a\": 1.5}", "", "is not an integer");
  refused("{\"a\": -1}", "", "negative id");
  refused("{\"a\": 0, \"a\": 1}", "", "the token 'a' is listed twice");
  refused("{\"a\": 0, \"b\": 0}", "", "both have the id 0");
  refused("{\"a\": 0, \"b\": 2}", "", "some id is missing");
  refused("{\"a\": 0, \"b\": 99999999999}", "", "beyond the limit");
  refused("{\"\xff\": 0}", "", "not a JSON object of token ids");         // not UTF-8
  refused("{\"a\": 0, \"\xe4\xb8\x80\": 1}", "", "which GPT-2's byte-to-unicode table has not");  // U+4E00
  refused("{\"a\": 0}", "", "the byte 0x00 has no token");
  refused("{\"a\": 0", "", "not a JSON object of token ids");
  refused(kTheJson, "#version: 0.2\nh e\n\xc4\xa0t he\n", "which is no byte and no earlier merge makes");
  refused(kTheJson, "h e\nh zz\n", "line 2: the token 'zz' is not in the vocabulary");  // no "#version" line: line 1 is a merge
  refused(kTheJson, "h e\nh e\n", "both join 'h' and 'e'");
  refused(kTheJson, "#version: 0.2\n", "token 256 ' t' is no byte and no merge makes it (0 merges");  // cut short
  refused(kTheJson, "#version: 0.2\n\xc4\xa0 t\nh e\n", "token 258 ' the' is no byte and no merge makes it");
  refused(kTheJson, "h e\nt h\n", "makes 'th', which is not in the vocabulary");
  refused(kTheJson, "h e f\n", "expected two tokens separated by one space");
  refused(kTheJson, "h\n", "expected two tokens separated by one space");
  refused(kTheJson, "h e\n" + std::string(100000, 'a') + " b\n", "line 2 is longer than");
  refused(encoder_json({std::string(2000, 'x')}), "", "has 2000 bytes, more than the limit of 1024");

  const auto refused_own = [](const std::string& text, const std::string& fault) {
    CAPTURE(fault);
    CHECK_THROWS_WITH_AS(BPETokenizer::parse(text), doctest::Contains(fault.c_str()), Error);
  };
  const std::string good = BPETokenizer::train("abab", 257).serialize();
  refused_own("", "not a cppgrad BPE file");
  refused_own("cppgrad-bpe 1\ntokens 5000\n00\n", "5000 tokens announced, but only 1 lines follow");
  refused_own("cppgrad-bpe 1\ntokens x\n", "expected a non-negative integer, got 'x'");
  refused_own("cppgrad-bpe 1\ntokens 1\nzz\nmerges 0\n", "not a hexadecimal digit");
  refused_own("cppgrad-bpe 1\ntokens 1\n0\nmerges 0\n", "not an even number");
  refused_own("cppgrad-bpe 1\ntokens 1\n00\nmerges 0\n", "the byte 0x01 has no token");
  refused_own(good + "junk\n", "unexpected text after the last merge");
  std::string bad_merge = good;
  bad_merge.replace(bad_merge.rfind("97 98"), 5, "97 999");
  refused_own(bad_merge, "merge 0 names token 999, outside a vocabulary of 257");
}

TEST_CASE("BPETokenizer: paths must name regular files") {
  const auto dir = fs::temp_directory_path() / "cppgrad_test_bpe_paths";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string fifo = (dir / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // A FIFO with no writer would block a plain open forever; it is refused at once.
  CHECK_THROWS_WITH_AS(BPETokenizer::load(fifo), doctest::Contains("is not a regular file"), Error);
  CHECK_THROWS_WITH_AS(BPETokenizer::load(dir.string()), doctest::Contains("is not a regular file"), Error);
  CHECK_THROWS_WITH_AS(BPETokenizer::load_gpt2("/dev/zero", fifo), doctest::Contains("is not a regular file"), Error);
  CHECK_THROWS_WITH_AS(BPETokenizer::load((dir / "absent").string()), doctest::Contains("cannot open"), Error);
  fs::remove_all(dir);
}

TEST_CASE("BPETokenizer::train and decode check their arguments") {
  CHECK_THROWS_WITH_AS(BPETokenizer::train("abc", 100), doctest::Contains("vocab_size must be in [256"), Error);
  const auto tok = BPETokenizer::train("abc", 256);
  CHECK_THROWS_WITH_AS(tok.decode({1, 256}), doctest::Contains("id 256 out of range for a vocabulary of 256"), Error);
  CHECK_THROWS_WITH_AS(tok.decode({-1}), doctest::Contains("id -1 out of range"), Error);
}
