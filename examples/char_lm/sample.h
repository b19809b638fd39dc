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
  double top_p = 1.0;        // draw among the nucleus only, the fewest most likely reaching p (1: all)
};

// Extends `context` by `options.length` characters and returns them, each drawn by
// nn::functional::sample_next_token (temperature, then top-k, then the nucleus). Each step feeds the newest
// character only, the earlier ones' keys and values cached per layer (cached decoding: O(length)
// a character, not O(length²)). The model knows `seq_len` positions: when the cache is full, it
// starts again from the last half of the context (one pass over those), so every character is
// drawn given between seq_len / 2 and seq_len characters before it.
std::string sample(CharLM& model, const cppgrad::data::CharVocabulary& vocab, std::vector<int64_t> context,
                   int64_t seq_len, const SampleOptions& options, cppgrad::Generator& gen);

}  // namespace char_lm
