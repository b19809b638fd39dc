// Writing text with a trained model: the next token drawn from the scores, again and again, the
// earlier tokens' keys and values cached.
#pragma once

#include <vector>

#include "gpt/model.h"

namespace gpt {

struct SampleOptions {
  int64_t length = 300;      // tokens to write
  double temperature = 0.8;  // 0: always the most likely token
  int64_t top_k = 0;         // draw among the k most likely only (0: all)
  double top_p = 1.0;        // nucleus: among the fewest most likely whose probabilities reach p (1: all)
};

// The distribution the next token is drawn from: softmax(scores / temperature), cut to the top_k
// highest scores (ties broken towards the lower id, as a stable sort does), then to the nucleus
// (the most likely tokens, in order, until their probability reaches top_p; at least one), and
// renormalised. Temperature 0: all the mass on the highest score.
std::vector<double> next_token_distribution(const std::vector<double>& scores, const SampleOptions& options);

// One id drawn from a distribution that sums to 1, with one uniform draw of `gen`.
int64_t draw(const std::vector<double>& probabilities, cppgrad::Generator& gen);

// Extends `context` (at least one token) by `options.length` tokens and returns them. Each step
// feeds the newest token only, the others' keys and values cached per layer. The model knows
// `seq_len` positions: when the cache is full, it starts again from the last half of the
// context, so every token is drawn given between seq_len / 2 and seq_len tokens before it.
std::vector<int64_t> generate(LanguageModel& model, std::vector<int64_t> context, int64_t seq_len,
                              const SampleOptions& options, cppgrad::Generator& gen);

}  // namespace gpt
