// Writing text with a trained model: the next token drawn from the scores, again and again, the
// earlier tokens' keys and values cached.
#pragma once

#include <vector>

#include "cppgrad.h"
#include "nn/hf/model.h"

namespace gpt {

using namespace cppgrad::hf;  // the models (nn/hf/)

// Each token drawn by nn::functional::sample_next_token: the scores divided by the temperature,
// cut to the top k and to the nucleus, softmaxed, one draw.
struct SampleOptions {
  int64_t length = 300;      // tokens to write
  double temperature = 0.8;  // 0: always the most likely token
  int64_t top_k = 0;         // draw among the k most likely only (0: all)
  double top_p = 1.0;        // nucleus: among the fewest most likely whose probabilities reach p (1: all)
  int64_t vocab = 0;         // draw among the ids below this only, the tokenizer's (0: all the model's rows)
};

// Extends `context` (at least one token) by `options.length` tokens and returns them. Each step
// feeds the newest token only, the others' keys and values cached per layer. The model knows
// `seq_len` positions: when the cache is full, it starts again from the last half of the
// context, so every token is drawn given between seq_len / 2 and seq_len tokens before it.
std::vector<int64_t> generate(LanguageModel& model, std::vector<int64_t> context, int64_t seq_len,
                              const SampleOptions& options, cppgrad::Generator& gen);

// Several contexts at once, as transformers' generate batches them: left-padded into one
// (B, T) batch whose padding the caches remember, then one token per sequence a step. Each
// sequence gets the tokens generate() gives it alone when the temperature is 0; with sampling,
// row b takes the b-th draw of `gen` at each step. Needs the longest context plus
// `options.length` to fit in `seq_len` (no restarting from half the context here).
std::vector<std::vector<int64_t>> generate_batch(LanguageModel& model, const std::vector<std::vector<int64_t>>& contexts,
                                                 int64_t seq_len, const SampleOptions& options, cppgrad::Generator& gen);

}  // namespace gpt
