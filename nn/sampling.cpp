#include "nn/sampling.h"

#include <cmath>
#include <limits>

#include "autograd/node.h"

namespace cppgrad::nn::functional {

namespace {
constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

void check_logits(const char* op, const Tensor& logits) {
  CPPGRAD_CHECK(logits.dim() == 1 || logits.dim() == 2,
                "{}: expected logits of shape (vocab) or (batch, vocab), got {}", op, shape_str(logits.shape()));
  CPPGRAD_CHECK(logits.is_floating_point(), "{}: expected floating logits, got {}", op, dtype_name(logits.dtype()));
  CPPGRAD_CHECK(logits.size(-1) > 0, "{}: logits of shape {} have no token to keep", op, shape_str(logits.shape()));
}

// True at the sorted positions past the nucleus: position j goes once the probabilities before
// it already reach top_p (position 0 always stays). sorted_probs (rows, vocab), descending.
std::vector<bool> past_the_nucleus(const Tensor& sorted_probs, double top_p) {
  const int64_t rows = sorted_probs.size(0), vocab = sorted_probs.size(1);
  const std::vector<double> p = sorted_probs.to(kFloat64).contiguous().to_vector<double>();
  std::vector<bool> drop(p.size(), false);
  for (int64_t r = 0; r < rows; ++r) {
    double before = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      const size_t at = static_cast<size_t>(r * vocab + j);
      drop[at] = j > 0 && before >= top_p;
      before += p[at];
    }
  }
  return drop;
}
}  // namespace

Tensor top_k_top_p_filter(const Tensor& logits, int64_t top_k, double top_p) {
  check_logits("top_k_top_p_filter", logits);
  CPPGRAD_CHECK(top_k >= 0, "top_k_top_p_filter: top_k must be 0 (all) or positive, got {}", top_k);
  CPPGRAD_CHECK(top_p >= 0 && top_p <= 1, "top_k_top_p_filter: top_p must be in [0, 1], got {}", top_p);
  const int64_t vocab = logits.size(-1);
  Tensor kept = logits;
  if (top_k > 0 && top_k < vocab) {
    Tensor kth = logits.topk(top_k, -1).values.narrow(-1, top_k - 1, 1);  // (..., 1): the k-th highest
    kept = kept.masked_fill(kept < kth, kMinusInf);
  }
  if (top_p < 1) {
    Tensor rows = kept.reshape({-1, vocab});                               // (rows, vocab)
    auto [sorted, order] = rows.sort(-1, /*descending=*/true);
    std::vector<bool> drop = past_the_nucleus(sorted.softmax(-1), top_p);  // in sorted order
    // back to the tokens' own positions: drop_at[r, order[r, j]] = drop[r, j]
    const std::vector<int64_t> token = order.to_vector<int64_t>();
    std::vector<bool> drop_at(drop.size(), false);
    for (size_t i = 0; i < drop.size(); ++i)
      drop_at[static_cast<size_t>((static_cast<int64_t>(i) / vocab) * vocab + token[i])] = drop[i];
    kept = kept.masked_fill(tensor(drop_at, kept.shape()), kMinusInf);
  }
  return kept;
}

Tensor sample_next_token(const Tensor& logits, const SamplingOptions& options, Generator& gen) {
  check_logits("sample_next_token", logits);
  const double temperature = options.temperature();
  CPPGRAD_CHECK(std::isfinite(temperature) && temperature >= 0,
                "sample_next_token: temperature must be finite and at least 0, got {}", temperature);
  NoGradGuard no_grad;
  if (temperature == 0) return logits.argmax(-1, /*keepdim=*/true);  // greedy
  Tensor scores = top_k_top_p_filter(logits / temperature, options.top_k(), options.top_p());
  // One token a row, so drawing with replacement is the same law with one draw instead of vocab.
  return multinomial(scores.softmax(-1), 1, /*replacement=*/true, gen);
}

}  // namespace cppgrad::nn::functional
