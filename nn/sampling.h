// Drawing the next token from a language model's scores, as generation loops do (nanoGPT's
// generate, Hugging Face's temperature, top-k and top-p warpers): the scores divided by the
// temperature, cut to the top k and to the nucleus, softmaxed, and one token drawn.
#pragma once

#include "options.h"
#include "../tensor/tensor.h"

namespace cppgrad::nn::functional {

// Chainable: SamplingOptions().temperature(0.8).top_k(40).top_p(0.95)
struct SamplingOptions {
  CPPGRAD_ARG(double, temperature, 1.0)  // 0: always the highest score (greedy), no draw
  CPPGRAD_ARG(int64_t, top_k, 0)         // keep the k highest scores only (0: all)
  CPPGRAD_ARG(double, top_p, 1.0)        // keep the nucleus only (1: all)
};

// logits (vocab) or (batch, vocab) with the scores outside the filters set to -inf, row by row:
// top_k keeps the scores at least as high as the k-th highest (ties with it stay, as nanoGPT's
// `logits < v[:, [-1]]`); top_p then keeps the nucleus, the fewest highest-scoring tokens whose
// softmax probabilities reach top_p (Holtzman et al.), at least one. 0 ≤ top_p ≤ 1.
Tensor top_k_top_p_filter(const Tensor& logits, int64_t top_k, double top_p);

// Token ids (int64) drawn from softmax(filter(logits / temperature)): shape (1) for logits
// (vocab) and (batch, 1) for (batch, vocab), torch.multinomial(probs, 1)'s, so that ids append to
// a (batch, T) context with cat(.., 1). Temperature 0 takes the highest score (the lowest id of
// equal ones) and draws nothing from `gen`; otherwise one draw of `gen` per row. No graph.
Tensor sample_next_token(const Tensor& logits, const SamplingOptions& options = {},
                         Generator& gen = default_generator());

}  // namespace cppgrad::nn::functional
