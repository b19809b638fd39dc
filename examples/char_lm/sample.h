// Writing text with a trained char_lm: the next character drawn from the scores, again and again,
// with the earlier characters' keys and values cached.
#pragma once

#include <string>
#include <vector>

#include "char_lm/model.h"

namespace char_lm {

struct SampleOptions {
  int64_t length = 400;      // characters to write
  double temperature = 0.8;  // 0: always the most likely character
  int64_t top_k = 0;         // draw among the k most likely only (0: all)
};

// Draws the next token from the scores: the top_k highest kept (0: all), softmax at the given
// temperature; temperature 0 takes the highest.
int64_t pick(std::vector<double> scores, double temperature, int64_t top_k, cppgrad::Generator& gen);

// Extends `context` by `options.length` characters and returns them. Each step feeds the newest
// character only, the earlier ones' keys and values cached per layer (cached decoding: O(length)
// a character, not O(length²)). The model knows `seq_len` positions: when the cache is full, it
// starts again from the last half of the context (one pass over those), so every character is
// drawn given between seq_len / 2 and seq_len characters before it.
std::string sample(CharLM& model, const cppgrad::data::CharVocabulary& vocab, std::vector<int64_t> context,
                   int64_t seq_len, const SampleOptions& options, cppgrad::Generator& gen);

}  // namespace char_lm
