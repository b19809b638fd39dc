#include "char_lm/sample.h"

#include <algorithm>

using namespace cppgrad;

namespace char_lm {

std::string sample(CharLM& model, const data::CharVocabulary& vocab, std::vector<int64_t> context, int64_t seq_len,
                   const SampleOptions& options, Generator& gen) {
  NoGradGuard no_grad;
  model.eval();
  std::string out;
  std::vector<nn::KVCache> cache;
  const int64_t keep = std::max<int64_t>(1, seq_len / 2);
  std::vector<int64_t> feed = context;  // what the model has not read yet
  for (int64_t i = 0; i < options.length; ++i) {
    const int64_t cached = cache.empty() ? 0 : cache.front().length();
    if (cached + static_cast<int64_t>(feed.size()) > seq_len) {
      cache.clear();
      const int64_t from = static_cast<int64_t>(context.size()) - std::min<int64_t>(keep, static_cast<int64_t>(context.size()));
      feed.assign(context.begin() + from, context.end());
    }
    const auto T = static_cast<int64_t>(feed.size());
    Tensor logits = model.forward_step(tensor(feed, {1, T}), cache);           // (1, T, vocab)
    Tensor scores = logits.select(0, 0).select(0, T - 1);                      // (vocab): the last position's
    const auto sampling = nn::functional::SamplingOptions()
                              .temperature(options.temperature)
                              .top_k(options.top_k)
                              .top_p(options.top_p);
    const int64_t next = nn::functional::sample_next_token(scores, sampling, gen).item<int64_t>();
    context.push_back(next);
    feed = {next};
    out += static_cast<char>(vocab.chars[static_cast<size_t>(next)]);
  }
  return out;
}

}  // namespace char_lm
