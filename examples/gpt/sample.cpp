#include "gpt/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>

using namespace cppgrad;

namespace gpt {

std::vector<double> next_token_distribution(const std::vector<double>& scores, const SampleOptions& o) {
  const auto n = static_cast<int64_t>(scores.size());
  CPPGRAD_CHECK(n > 0, "next_token_distribution: no scores");
  // Token ids from the highest score down, ties towards the lower id.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  std::vector<double> p(static_cast<size_t>(n), 0.0);
  if (o.temperature == 0.0) {
    p[order[0]] = 1.0;
    return p;
  }
  const int64_t kept = o.top_k > 0 ? std::min(o.top_k, n) : n;
  const double top = scores[order[0]];
  double total = 0;
  for (int64_t r = 0; r < kept; ++r) total += (p[order[r]] = std::exp((scores[order[r]] - top) / o.temperature));
  // The nucleus: the shortest run of the most likely whose share reaches top_p.
  double reached = 0;
  int64_t nucleus = 0;
  while (nucleus < kept && (nucleus == 0 || reached < o.top_p * total)) reached += p[order[nucleus++]];
  for (int64_t r = nucleus; r < kept; ++r) p[order[r]] = 0.0;
  for (double& x : p) x /= reached;
  return p;
}

int64_t draw(const std::vector<double>& probabilities, Generator& gen) {
  double u = gen.uniform();
  const auto n = static_cast<int64_t>(probabilities.size());
  int64_t last_possible = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (probabilities[i] <= 0) continue;
    last_possible = i;
    if ((u -= probabilities[i]) < 0) return i;
  }
  return last_possible;  // only when rounding leaves u a hair above zero
}

std::vector<int64_t> generate(LanguageModel& model, std::vector<int64_t> context, int64_t seq_len,
                              const SampleOptions& options, Generator& gen) {
  CPPGRAD_CHECK(!context.empty(), "generate: an empty context");
  NoGradGuard no_grad;
  model.eval();
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
    auto scores = logits.select(0, 0).select(0, T - 1).to_vector<double>();   // the last position's
    const int64_t next = draw(next_token_distribution(scores, options), gen);
    context.push_back(next);
    out.push_back(next);
    feed = {next};
  }
  model.train();
  return out;
}

}  // namespace gpt
