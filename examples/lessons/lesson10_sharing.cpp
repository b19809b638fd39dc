// Lesson 10: grouped-query attention (GQA) and multi-query attention (MQA), measured.
//
// With g key/value heads for h query heads, query head i reads key/value head i / (h/g): the
// keys and values are projected to g·d_k features instead of h·d_k, and a decoder caches g heads
// per position instead of h. g = h is ordinary multi-head attention, g = 1 multi-query attention
// (one key/value head shared by all queries). (A published tutorial calls g = h "multi-query";
// it is not: with g = h nothing is shared.)
#include "lessons/lesson10_sharing.h"

#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "cppgrad.h"
#include "lessons/measure.h"

namespace lessons {

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace {

double max_diff(const Tensor& a, const Tensor& b) { return (a - b).abs().max().item<double>(); }

// torch.repeat_interleave(x, r, dim=-3)
Tensor repeat_heads(const Tensor& x, int64_t r) {
  std::vector<int64_t> index;
  for (int64_t j = 0; j < x.size(-3); ++j)
    for (int64_t i = 0; i < r; ++i) index.push_back(j);
  return x.index_select(-3, tensor(index, Shape{static_cast<int64_t>(index.size())}));
}

}  // namespace

Lesson10 run_lesson10() {
  Lesson10 r;
  // ---- what sharing saves: parameters and cache ----
  for (int64_t g : r.kv_heads) {
    manual_seed(9);
    nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(r.d_model, r.heads).num_kv_heads(g));
    mha.eval();
    r.attention_parameters.push_back(mha.parameter_count());
    NoGradGuard no_grad;
    nn::KVCache cache;
    mha.forward_step(randn({1, 1, r.d_model}), cache);
    r.cache_bytes_per_token.push_back((cache.key.numel() + cache.value.numel()) * 4);
    nn::Decoder lm(nn::DecoderOptions(256, r.d_model, 2, r.heads).num_kv_heads(g));
    lm.eval();
    std::vector<nn::KVCache> caches(2);
    const int64_t n = 32;  // tokens decoded from an empty cache
    Tensor tokens = randint(0, 256, {1, n});
    auto start = std::chrono::steady_clock::now();
    for (int64_t t = 0; t < n; ++t) lm.forward_step(tokens.narrow(1, t, 1), caches);
    r.decode_tokens_per_s.push_back(
        n / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  // ---- the identities ----
  {
    Generator gen(90);
    Tensor q = randn({2, 8, 5, 16}, kFloat64, gen), k = randn({2, 8, 5, 16}, kFloat64, gen);
    Tensor v = randn({2, 8, 5, 16}, kFloat64, gen);
    r.gqa_g_equals_h_vs_mha = max_diff(
        F::scaled_dot_product_attention(q, k, v, F::AttentionOptions().enable_gqa(true).is_causal(true)).output,
        F::scaled_dot_product_attention(q, k, v, F::AttentionOptions().is_causal(true)).output);
    Tensor k1 = k.narrow(1, 0, 1), v1 = v.narrow(1, 0, 1);  // one key/value head
    r.mqa_vs_repeated = max_diff(
        F::scaled_dot_product_attention(q, k1, v1, F::AttentionOptions().enable_gqa(true)).output,
        F::scaled_dot_product_attention(q, repeat_heads(k1, 8), repeat_heads(v1, 8), F::AttentionOptions()).output);
    r.g_equals_h_is_the_fused_layer =
        nn::MultiheadAttention(nn::MultiheadAttentionOptions(64, 8).num_kv_heads(8)).in_proj_weight.defined();
  }
  // ---- what sharing costs: a small language model, the same steps ----
  r.text_path = "/usr/share/common-licenses/GPL-3";
  std::ifstream file(r.text_path);
  std::stringstream buffer;
  buffer << file.rdbuf();
  const std::string text = buffer.str();
  CPPGRAD_CHECK(text.size() > 10000, "lesson 10: could not read {}", r.text_path);
  std::vector<int64_t> id(256, -1);
  std::vector<int64_t> ids;
  for (unsigned char c : text) {
    if (id[c] < 0) id[c] = r.vocab++;
    ids.push_back(id[c]);
  }
  r.uniform_loss = std::log(static_cast<double>(r.vocab));
  const int64_t n = static_cast<int64_t>(ids.size()), split = n * 9 / 10, T = 32, B = 16;
  Tensor all = tensor(ids, Shape{n});
  auto batch_at = [&](const std::vector<int64_t>& starts) {  // (B, T) inputs and targets
    std::vector<Tensor> xs, ys;
    for (int64_t s : starts) xs.push_back(all.narrow(0, s, T)), ys.push_back(all.narrow(0, s + 1, T));
    return std::pair{stack(xs), stack(ys)};
  };
  std::vector<int64_t> held_starts;
  for (int64_t s = split; s + T + 1 < n; s += T) held_starts.push_back(s);
  auto [held_x, held_y] = batch_at(held_starts);
  for (int64_t g : r.lm_kv_heads) {
    auto& losses = r.held_out_by_seed.emplace_back();
    for (int64_t seed = 0; seed < r.lm_seeds; ++seed) {
      manual_seed(9 + static_cast<uint64_t>(seed));
      nn::Decoder lm(nn::DecoderOptions(r.vocab, 64, 2, r.lm_heads).num_kv_heads(g));
      if (seed == 0) r.lm_parameters.push_back(lm.parameter_count());
      optim::Adam opt(lm.parameters(), optim::AdamOptions(3e-3));
      Generator data(19 + static_cast<uint64_t>(seed));  // the same batches for every g
      for (int64_t step = 0; step < r.lm_steps; ++step) {
        std::vector<int64_t> starts;
        for (int64_t b = 0; b < B; ++b) starts.push_back(randint(0, split - T - 1, {}, data).item<int64_t>());
        auto [x, y] = batch_at(starts);
        Tensor loss = F::cross_entropy(lm.forward(x).reshape({-1, r.vocab}), y.reshape({-1}));
        opt.zero_grad();
        loss.backward();
        opt.step();
      }
      NoGradGuard no_grad;
      lm.eval();
      losses.push_back(F::cross_entropy(lm.forward(held_x).reshape({-1, r.vocab}), held_y.reshape({-1})).item<double>());
    }
    r.held_out_loss.push_back(mean(losses));
    r.held_out_spread.push_back(spread(losses));
  }
  return r;
}

void print(const Lesson10& r) {
  fmt::print("Lesson 10: how can {} query heads share fewer key/value heads, and what does it cost?\n\n", r.heads);
  fmt::print("MultiheadAttention(d_model {}, {} heads of d_k {}) with g key/value heads:\n", r.d_model, r.heads,
             r.d_model / r.heads);
  fmt::print("{:>3} {:>12} {:>22} {:>22}\n", "g", "parameters", "KV cache bytes/token", "decoding tokens/s");
  for (size_t i = 0; i < r.kv_heads.size(); ++i)
    fmt::print("{:>3} {:>12} {:>22} {:>22.0f}\n", r.kv_heads[i], r.attention_parameters[i], r.cache_bytes_per_token[i],
               r.decode_tokens_per_s[i]);
  fmt::print("Only W_K and W_V shrink (to g·d_k rows, their biases to g·d_k): the parameters, weights and\n"
             "biases, fall from 4·d·(d + 1) to 2·d·(d + 1)·(1 + g/h), and the cache, which holds g heads per\n"
             "position, falls by h/g. The decoding speed is one timing of 32 tokens each, of a 2-layer decoder\n"
             "(batch 1), where the cache is small and the projections dominate: its rows differ by noise, and\n"
             "their order changes from run to run. A long context or a large batch is where the smaller\n"
             "cache pays (bench/bench_gqa measures both, with medians).\n\n");
  fmt::print("The names: g = h is ordinary multi-head attention (enable_gqa with g = h against plain attention:\n"
             "max |diff| {:.1e}; MultiheadAttention keeps its fused in_proj_weight: {}); g = 1 is multi-query\n"
             "attention (one shared head against it repeated to all {}: max |diff| {:.1e}). GQA is in between.\n\n",
             r.gqa_g_equals_h_vs_mha, r.g_equals_h_is_the_fused_layer ? "yes" : "no", r.heads, r.mqa_vs_repeated);
  fmt::print("The cost, on a task where it can show: a character-level decoder (d_model 64, {} query heads,\n"
             "2 layers) trained {} steps on {} ({} distinct characters; uniform guess {:.2f} nats/char):\n",
             r.lm_heads, r.lm_steps, r.text_path, r.vocab, r.uniform_loss);
  for (size_t i = 0; i < r.lm_kv_heads.size(); ++i)
    fmt::print("  g = {}: {:>7} parameters, held-out loss {:.3f} ± {:.3f} nats/char (mean ± spread of {} seeds)\n",
               r.lm_kv_heads[i], r.lm_parameters[i], r.held_out_loss[i], r.held_out_spread[i], r.lm_seeds);
  const size_t full = 0, fewest = r.lm_kv_heads.size() - 1;
  const double gap = r.held_out_loss[fewest] - r.held_out_loss[full];
  const double larger_spread = std::max(r.held_out_spread[full], r.held_out_spread[fewest]);
  // A lower loss is the better: clearly_higher (measure.h) of the losses negated.
  auto negated = [](std::vector<double> losses) {
    for (double& l : losses) l = -l;
    return losses;
  };
  const auto full_scores = negated(r.held_out_by_seed[full]), fewest_scores = negated(r.held_out_by_seed[fewest]);
  if (clearly_higher(full_scores, fewest_scores))
    fmt::print("g = {} learned less than g = {} in the same steps: {:.3f} nats more, on every seed and beyond the\n"
               "seeds' spread ({:.3f}).\n",
               r.lm_kv_heads[fewest], r.lm_kv_heads[full], gap, larger_spread);
  else if (clearly_higher(fewest_scores, full_scores))
    fmt::print("g = {} did better than g = {} in the same steps: {:.3f} nats less, on every seed and beyond the\n"
               "seeds' spread ({:.3f}); fewer parameters to fit in few steps, a gap that may turn with longer training.\n",
               r.lm_kv_heads[fewest], r.lm_kv_heads[full], -gap, larger_spread);
  else
    fmt::print("g = {} and g = {} differ by {:.3f} nats, {} the seeds' spread ({:.3f}){}: at this size and length\n"
               "of training, sharing keys and values cost no quality these seeds can measure.\n",
               r.lm_kv_heads[fewest], r.lm_kv_heads[full], std::abs(gap),
               std::abs(gap) > larger_spread ? "beyond" : "within", larger_spread,
               std::abs(gap) > larger_spread ? " but not the same way on every seed" : "");
}

}  // namespace lessons
