#include "char_lm/sample.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

using namespace cppgrad;

namespace char_lm {

int64_t pick(std::vector<double> scores, double temperature, int64_t top_k, Generator& gen) {
  const auto n = static_cast<int64_t>(scores.size());
  if (temperature == 0.0) return std::max_element(scores.begin(), scores.end()) - scores.begin();
  if (top_k > 0 && top_k < n) {
    std::vector<double> sorted = scores;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[top_k - 1];
    for (double& s : scores)
      if (s < kth) s = -std::numeric_limits<double>::infinity();
  }
  const double top = *std::max_element(scores.begin(), scores.end());
  double total = 0;
  for (double& s : scores) total += (s = std::exp((s - top) / temperature));  // exp(-inf) = 0
  double u = gen.uniform() * total;
  for (int64_t i = 0; i < n; ++i)
    if ((u -= scores[i]) < 0) return i;
  return n - 1;  // only when rounding leaves u a hair above zero
}

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
    auto scores = logits.select(0, 0).select(0, T - 1).to_vector<double>();   // the last position's
    const int64_t next = pick(scores, options.temperature, options.top_k, gen);
    context.push_back(next);
    feed = {next};
    out += static_cast<char>(vocab.chars[static_cast<size_t>(next)]);
  }
  return out;
}

}  // namespace char_lm
