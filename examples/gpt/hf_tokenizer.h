// gpt's tokenizer beside a model it writes under Hugging Face's names (--save-hf), in Hugging
// Face's files, so that --init-from hf:DIR reads the model back with nothing else:
//
//   a BPE (learnt, or GPT-2's)  vocab.json (token -> id) and merges.txt (one merge a line, in rank
//                               order, after "#version: 0.2"), GPT-2's byte-level format: each
//                               token's bytes spelt through GPT-2's byte-to-unicode table ('Ġ' for
//                               the space), as transformers' GPT2Tokenizer reads them
//   characters                  vocab.json alone, each byte the text holds spelt the same way ->
//                               its id (no merges: one token a byte)
//   both                        tokenizer_config.json: transformers' "tokenizer_class"
//                               (GPT2Tokenizer for a BPE) and "cppgrad_tokenizer", the kind gpt
//                               trained with ("bpe", "gpt2" or "char")
//
// A directory with vocab.json and merges.txt but no tokenizer_config.json (the Hub's gpt2) is
// GPT-2's tokenizer; one with encoder.json and vocab.bpe (OpenAI's names) too.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace gpt {

struct Tokenizer;

// Writes `tokenizer`'s files into `dir` (each whole or not at all); throws cppgrad::Error naming
// the file that cannot be written.
void save_hf_tokenizer(const Tokenizer& tokenizer, const std::string& dir);

// The tokenizer files in `dir`: their kind ("char", "bpe" or "gpt2") and the vocabulary and merges
// files (no merges for characters); nullopt when `dir` holds none.
struct HFTokenizerFiles {
  std::string kind;
  std::filesystem::path vocab, merges;
};
std::optional<HFTokenizerFiles> find_hf_tokenizer(const std::filesystem::path& dir);

// Reads what find_hf_tokenizer found; throws cppgrad::Error naming the file and what is wrong.
Tokenizer load_hf_tokenizer(const HFTokenizerFiles& files);

// What --save-hf writes besides the model, for the line that says so: "vocab.json and merges.txt"
// or "vocab.json".
std::string hf_tokenizer_file_names(const Tokenizer& tokenizer);

}  // namespace gpt
