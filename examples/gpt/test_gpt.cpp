// gpt's model and sampling: the tied head is one parameter, GPT-2's scaled initialisation,
// cached decoding against the whole prefix (left-padded batches of prompts too), and activation
// checkpointing against none. (The sampling filters are the library's:
// nn::functional::sample_next_token, tests/nn/test_sampling.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cppgrad.h"
#include "gpt/sample.h"
#include "nn/hf/model.h"

using namespace cppgrad;
using namespace cppgrad::hf;
using namespace gpt;
namespace F = cppgrad::nn::functional;

namespace {

ModelConfig tiny(Arch arch) {
  ModelConfig c;
  c.arch = arch, c.vocab = 11, c.layers = 2, c.d_model = 16, c.heads = 4, c.ff = 24, c.seq_len = 12;
  c.kv_heads = arch == Arch::Llama ? 2 : 4;
  return c;
}

double max_abs_difference(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

}  // namespace

TEST_CASE("gpt: gpt2's output layer is the token embedding, one parameter") {
  manual_seed(1);
  auto model = std::make_shared<GPT2>(tiny(Arch::GPT2));
  int64_t named = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    CHECK(name != "lm_head.weight");
    named += name == "wte.weight";
  }
  CHECK(named == 1);
  // Trained once, through both uses: the head's gradient lands in the embedding's tensor.
  Tensor logits = model->forward(tensor(std::vector<int64_t>{1, 2, 3}, {1, 3}));
  logits.sum().backward();
  REQUIRE(model->wte->weight.grad().defined());
  CHECK(model->lm_head->weight.grad().defined());
  CHECK(max_abs_difference(model->lm_head->weight.grad(), model->wte->weight.grad()) == 0.0);
}

TEST_CASE("gpt: gpt2's residual projections start 1/sqrt(2 layers) smaller") {
  manual_seed(2);
  ModelConfig c = tiny(Arch::GPT2);
  c.layers = 8, c.d_model = 64, c.ff = 256;
  auto model = make_model(c);
  auto std_of = [](const Tensor& t) {
    const auto v = t.to_vector<double>();
    double sum = 0;
    for (double x : v) sum += x * x;
    return std::sqrt(sum / static_cast<double>(v.size()));
  };
  for (const auto& [name, p] : model->named_parameters()) {
    CAPTURE(name);
    if (p.dim() < 2) continue;
    const bool residual = name.ends_with("out_proj.weight") || name.ends_with("linear2.weight");
    const double expected = residual ? 0.02 / std::sqrt(16.0) : 0.02;
    // ≥ 4096 draws: the sample's std is within a few percent of the true one; 15% leaves room.
    CHECK(std::abs(std_of(p) / expected - 1.0) < 0.15);
  }
}

TEST_CASE("gpt: decoding from the cache gives the whole prefix's logits") {
  for (Arch arch : {Arch::GPT2, Arch::Llama}) {
    CAPTURE(arch_name(arch));
    manual_seed(3);
    auto model = make_model(tiny(arch));
    model->eval();
    NoGradGuard no_grad;
    const std::vector<int64_t> tokens = {4, 1, 7, 7, 0, 9, 3, 2};
    Tensor full = model->forward(tensor(tokens, {1, 8}));  // (1, 8, vocab)
    std::vector<nn::KVCache> caches;
    Tensor first = model->forward_step(tensor(std::vector<int64_t>(tokens.begin(), tokens.begin() + 5), {1, 5}), caches);
    // float32 through other matrix shapes (BLAS may sum in another order): 1e-5 of logits ~1.
    CHECK(max_abs_difference(first, full.slice(1, 0, 5)) < 1e-5);
    for (int64_t t = 5; t < 8; ++t) {
      Tensor step = model->forward_step(tensor(std::vector<int64_t>{tokens[static_cast<size_t>(t)]}, {1, 1}), caches);
      CHECK(max_abs_difference(step, full.slice(1, t, t + 1)) < 1e-5);
    }
  }
}

TEST_CASE("gpt: left-padded prompts of different lengths, decoded together from the cache, get each one's own tokens") {
  // Three prompts of 2, 7 and 4 tokens in one batch, left-padded (padding true in the mask), as
  // Hugging Face's generate batches them; 5 greedy tokens each. Against each prompt alone with
  // every step recomputing the whole sequence: the same tokens, and the logits to 1e-4 (float32
  // of order 1, summed in other groupings). gpt2's learned positions and llama's rotary ones both
  // count from each sequence's first real token.
  const std::vector<std::vector<int64_t>> prompts = {{5, 1}, {2, 9, 4, 4, 7, 0, 8}, {6, 6, 1, 10}};
  const int64_t B = 3, T = 7, steps = 5;
  std::vector<int64_t> padded, padding;
  for (const auto& p : prompts) {
    for (size_t i = p.size(); i < static_cast<size_t>(T); ++i) padded.push_back(0), padding.push_back(1);
    for (int64_t t : p) padded.push_back(t), padding.push_back(0);
  }
  for (Arch arch : {Arch::GPT2, Arch::Llama}) {
    CAPTURE(arch_name(arch));
    manual_seed(5);
    auto model = make_model(tiny(arch));
    model->eval();
    NoGradGuard no_grad;
    std::vector<nn::KVCache> caches;
    Tensor logits = model->forward_step(tensor(padded, {B, T}), caches, tensor(padding, {B, T}).to(kBool));
    std::vector<std::vector<int64_t>> sequences = prompts;
    for (int64_t s = 0; s < steps; ++s) {
      CAPTURE(s);
      Tensor last = logits.select(1, logits.size(1) - 1);  // (B, vocab)
      std::vector<int64_t> next = last.argmax(1).to_vector<int64_t>();
      for (int64_t b = 0; b < B; ++b) {
        auto& seq = sequences[static_cast<size_t>(b)];
        const auto L = static_cast<int64_t>(seq.size());
        Tensor alone = model->forward(tensor(seq, {1, L})).select(0, 0).select(0, L - 1);  // (vocab)
        CHECK(next[static_cast<size_t>(b)] == alone.argmax().item<int64_t>());
        CHECK(max_abs_difference(last.select(0, b), alone) < 1e-4);
        seq.push_back(next[static_cast<size_t>(b)]);
      }
      if (s + 1 < steps) logits = model->forward_step(tensor(next, {B, 1}), caches);
    }
  }
}

TEST_CASE("gpt: generate_batch gives each context the greedy tokens generate gives it alone") {
  const std::vector<std::vector<int64_t>> contexts = {{5, 1}, {2, 9, 4, 4, 7}, {6, 6, 1}};
  SampleOptions greedy;
  greedy.length = 6, greedy.temperature = 0.0;
  for (Arch arch : {Arch::GPT2, Arch::Llama}) {
    CAPTURE(arch_name(arch));
    manual_seed(6);
    auto model = make_model(tiny(arch));
    Generator gen(1);
    const auto batched = generate_batch(*model, contexts, 12, greedy, gen);
    REQUIRE(batched.size() == contexts.size());
    for (size_t b = 0; b < contexts.size(); ++b) CHECK(batched[b] == generate(*model, contexts[b], 12, greedy, gen));
  }
  Generator gen(1);
  auto model = make_model(tiny(Arch::GPT2));
  std::string message;
  try {
    generate_batch(*model, contexts, 10, greedy, gen);  // 5 + 6 > 10
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("generate_batch: the longest context (5 tokens) and 6 more do not fit in the 10 positions") !=
        std::string::npos);
}

TEST_CASE("gpt: activation checkpointing gives the same loss and gradients") {
  for (Arch arch : {Arch::GPT2, Arch::Llama}) {
    CAPTURE(arch_name(arch));
    manual_seed(4);
    auto model = make_model(tiny(arch));
    const Tensor tokens = tensor(std::vector<int64_t>{4, 1, 7, 7, 0, 9, 3, 2}, {2, 4});
    const Tensor targets = tensor(std::vector<int64_t>{1, 7, 7, 0, 9, 3, 2, 5}, {8});
    std::vector<std::vector<double>> grads[2];
    double losses[2];
    for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
      model->set_checkpoint_layers(checkpointed == 1);
      for (auto& p : model->parameters()) p.zero_grad();
      Tensor loss = F::cross_entropy(model->forward(tokens).reshape({8, 11}), targets);
      loss.backward();
      losses[checkpointed] = loss.item();
      for (auto& p : model->parameters()) grads[checkpointed].push_back(p.grad().to_vector<double>());
    }
    // The same ops on the same inputs, recomputed: equal to rounding.
    CHECK(losses[1] == doctest::Approx(losses[0]).epsilon(1e-6));
    for (size_t i = 0; i < grads[0].size(); ++i)
      for (size_t j = 0; j < grads[0][i].size(); ++j) CHECK(grads[1][i][j] == doctest::Approx(grads[0][i][j]).epsilon(1e-4).scale(1e-3));
  }
}
