#include "gpt/sample.h"

#include <algorithm>

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace gpt {

std::vector<int64_t> generate(LanguageModel& model, std::vector<int64_t> context, int64_t seq_len,
                              const SampleOptions& options, Generator& gen) {
  CPPGRAD_CHECK(!context.empty(), "generate: an empty context");
  NoGradGuard no_grad;
  model.eval();
  const auto sampling = F::SamplingOptions().temperature(options.temperature).top_k(options.top_k).top_p(options.top_p);
  std::vector<int64_t> out;
  std::vector<nn::KVCache> caches;
  const int64_t keep = std::max<int64_t>(1, seq_len / 2);
  // What the model has not read yet: the context's last seq_len tokens at most.
  std::vector<int64_t> feed(context.end() - std::min<int64_t>(seq_len, static_cast<int64_t>(context.size())), context.end());
  for (int64_t i = 0; i < options.length; ++i) {
    const int64_t cached = caches.empty() ? 0 : caches.front().length();
    if (cached + static_cast<int64_t>(feed.size()) > seq_len) {
      caches.clear();
      const int64_t from = static_cast<int64_t>(context.size()) - std::min<int64_t>(keep, static_cast<int64_t>(context.size()));
      feed.assign(context.begin() + from, context.end());
    }
    const auto T = static_cast<int64_t>(feed.size());
    Tensor logits = model.forward_step(tensor(feed, {1, T}), caches);          // (1, T, vocab)
    Tensor last = logits.select(0, 0).select(0, T - 1);  // (vocab)
    if (options.vocab > 0) last = last.narrow(0, 0, std::min(options.vocab, last.size(0)));
    const int64_t next = F::sample_next_token(last, sampling, gen).item<int64_t>();
    context.push_back(next);
    out.push_back(next);
    feed = {next};
  }
  model.train();
  return out;
}

std::vector<std::vector<int64_t>> generate_batch(LanguageModel& model, const std::vector<std::vector<int64_t>>& contexts,
                                                 int64_t seq_len, const SampleOptions& options, Generator& gen) {
  CPPGRAD_CHECK(!contexts.empty(), "generate_batch: no contexts");
  size_t longest = 0;
  for (const auto& c : contexts) {
    CPPGRAD_CHECK(!c.empty(), "generate_batch: an empty context");
    longest = std::max(longest, c.size());
  }
  CPPGRAD_CHECK(static_cast<int64_t>(longest) + options.length <= seq_len,
                "generate_batch: the longest context ({} tokens) and {} more do not fit in the {} positions", longest,
                options.length, seq_len);
  NoGradGuard no_grad;
  model.eval();
  const auto B = static_cast<int64_t>(contexts.size()), T = static_cast<int64_t>(longest);
  std::vector<int64_t> tokens, padding;  // (B, T): each context right-aligned, the padding before it
  for (const auto& c : contexts) {
    tokens.insert(tokens.end(), longest - c.size(), 0), padding.insert(padding.end(), longest - c.size(), 1);
    tokens.insert(tokens.end(), c.begin(), c.end()), padding.insert(padding.end(), c.size(), 0);
  }
  const auto sampling = F::SamplingOptions().temperature(options.temperature).top_k(options.top_k).top_p(options.top_p);
  std::vector<nn::KVCache> caches;
  Tensor logits = model.forward_step(tensor(tokens, {B, T}), caches, tensor(padding, {B, T}).to(kBool));  // (B, T, vocab)
  std::vector<std::vector<int64_t>> out(contexts.size());
  for (int64_t i = 0; i < options.length; ++i) {
    Tensor last = logits.select(1, logits.size(1) - 1);  // (B, vocab)
    if (options.vocab > 0) last = last.narrow(1, 0, std::min(options.vocab, last.size(1)));
    const std::vector<int64_t> next = F::sample_next_token(last, sampling, gen).to_vector<int64_t>();  // (B, 1)
    for (size_t b = 0; b < out.size(); ++b) out[b].push_back(next[b]);
    if (i + 1 < options.length) logits = model.forward_step(tensor(next, {B, 1}), caches);
  }
  model.train();
  return out;
}

}  // namespace gpt
