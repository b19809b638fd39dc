#include "gpt/hf_tokenizer.h"

#include <nlohmann/json.hpp>

#include "gpt/options.h"
#include "runtime/files.h"

using namespace cppgrad;

namespace gpt {

namespace {

namespace fs = std::filesystem;

// The byte one spelt character stands for (a character tokenizer's token is one byte).
unsigned char spelt_byte(const std::string& text, const std::string& where) {
  const std::string bytes = data::gpt2_spelt_bytes(text, where);
  CPPGRAD_CHECK(bytes.size() == 1, "{}: '{}' is {} bytes, not one character of GPT-2's byte-to-unicode table (a "
                "character tokenizer's token is one byte)", where, excerpt(text, 40), bytes.size());
  return static_cast<unsigned char>(bytes[0]);
}

nlohmann::json read_json(const fs::path& path) {
  const std::string text = data::read_file_bytes(path.string());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("'{}' is not JSON: {}", excerpt(path.string()), excerpt(e.what(), 200)));
  }
}

// tokenizer_config.json's "cppgrad_tokenizer", when it has one.
std::optional<std::string> saved_kind(const fs::path& dir) {
  std::error_code ec;
  const fs::path config = dir / "tokenizer_config.json";
  if (!fs::exists(config, ec)) return std::nullopt;
  const nlohmann::json j = read_json(config);
  if (!j.is_object() || !j.contains("cppgrad_tokenizer")) return std::nullopt;  // transformers' own
  const nlohmann::json& kind = j["cppgrad_tokenizer"];
  CPPGRAD_CHECK(kind.is_string() && (kind == "char" || kind == "bpe" || kind == "gpt2"), "'{}': \"cppgrad_tokenizer\" "
                "is {}, not \"char\", \"bpe\" or \"gpt2\"", excerpt(config.string()), excerpt(kind.dump(), 40));
  return kind.get<std::string>();
}

// A character tokenizer's vocab.json: each byte, spelt, -> its id; the ids 0..n-1, each once.
data::CharVocabulary read_char_vocabulary(const fs::path& path) {
  const nlohmann::json j = read_json(path);
  const std::string where = fmt::format("'{}'", excerpt(path.string()));
  CPPGRAD_CHECK(j.is_object() && !j.empty() && j.size() <= 256, "{}: a character tokenizer's vocabulary is an object of "
                "1 to 256 \"character\": id entries", where);
  data::CharVocabulary vocab;
  vocab.ids.fill(-1);
  vocab.chars.assign(j.size(), 0);
  std::vector<bool> taken(j.size(), false);
  for (const auto& [key, value] : j.items()) {
    const unsigned char byte = spelt_byte(key, where);
    CPPGRAD_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 &&
                  value.get<int64_t>() < static_cast<int64_t>(j.size()), "{}: '{}' has the id {}, not one of 0..{}",
                  where, excerpt(key, 40), excerpt(value.dump(), 40), j.size() - 1);
    const auto id = value.get<int64_t>();
    CPPGRAD_CHECK(!taken[static_cast<size_t>(id)], "{}: the id {} is given twice", where, id);
    CPPGRAD_CHECK(vocab.ids[byte] < 0, "{}: the byte {} is named twice", where, int{byte});
    taken[static_cast<size_t>(id)] = true;
    vocab.ids[byte] = id;
    vocab.chars[static_cast<size_t>(id)] = byte;
  }
  return vocab;
}

}  // namespace

void save_hf_tokenizer(const Tokenizer& tokenizer, const std::string& dir) {
  const fs::path d(dir);
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();  // in id order, as the Hub's files
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (tokenizer.chars) {
    for (size_t id = 0; id < tokenizer.chars->chars.size(); ++id)
      vocab[data::gpt2_spelling(std::string(1, static_cast<char>(tokenizer.chars->chars[id])))] = id;
    config["tokenizer_class"] = nullptr;  // none of transformers' reads it
  } else {
    const data::BPETokenizer& bpe = *tokenizer.bpe;
    for (int64_t id = 0; id < bpe.vocab_size(); ++id) vocab[data::gpt2_spelling(bpe.token_bytes(id))] = id;
    std::string merges = "#version: 0.2\n";
    for (const auto& [left, right] : bpe.merges())
      merges += data::gpt2_spelling(bpe.token_bytes(left)) + " " + data::gpt2_spelling(bpe.token_bytes(right)) + "\n";
    files::write_file_atomically((d / "merges.txt").string(), merges, "--save-hf: the tokenizer's merges");
    config["tokenizer_class"] = "GPT2Tokenizer";
    config["add_prefix_space"] = false;
  }
  config["cppgrad_tokenizer"] = tokenizer.kind;
  files::write_file_atomically((d / "vocab.json").string(), vocab.dump(), "--save-hf: the tokenizer's vocabulary");
  files::write_file_atomically((d / "tokenizer_config.json").string(), config.dump(2) + "\n",
                               "--save-hf: the tokenizer's configuration");
}

std::optional<HFTokenizerFiles> find_hf_tokenizer(const fs::path& dir) {
  const std::optional<std::string> kind = saved_kind(dir);
  std::error_code ec;
  if (kind == "char") {
    CPPGRAD_CHECK(fs::exists(dir / "vocab.json", ec), "'{}' names a character tokenizer, and there is no vocab.json "
                  "beside it", excerpt((dir / "tokenizer_config.json").string()));
    return HFTokenizerFiles{"char", dir / "vocab.json", {}};
  }
  // a BPE: the Hub's names, or OpenAI's (encoder.json, vocab.bpe)
  for (const auto& [vocab, merges] : {std::pair{"vocab.json", "merges.txt"}, std::pair{"encoder.json", "vocab.bpe"}})
    if (fs::exists(dir / vocab, ec) && fs::exists(dir / merges, ec))
      return HFTokenizerFiles{kind.value_or("gpt2"), dir / vocab, dir / merges};
  CPPGRAD_CHECK(!kind, "'{}' names a {} tokenizer, and there are no vocab.json and merges.txt beside it",
                excerpt((dir / "tokenizer_config.json").string()), *kind);
  return std::nullopt;
}

Tokenizer load_hf_tokenizer(const HFTokenizerFiles& files) {
  if (files.kind == "char") return {"char", read_char_vocabulary(files.vocab), {}};
  return {files.kind, {}, data::BPETokenizer::load_gpt2(files.vocab.string(), files.merges.string())};
}

std::string hf_tokenizer_file_names(const Tokenizer& tokenizer) {
  return tokenizer.chars ? "vocab.json" : "vocab.json and merges.txt";
}

}  // namespace gpt
