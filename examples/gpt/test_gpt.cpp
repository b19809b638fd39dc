// gpt's model and sampling: the tied head is one parameter, GPT-2's scaled initialisation,
// cached decoding against the whole prefix, and activation checkpointing against none. (The
// sampling filters are the library's: nn::functional::sample_next_token, tests/nn/test_sampling.cpp.)
#include <doctest/doctest.h>

#include <cmath>

#include "cppgrad.h"
#include "nn/hf/model.h"

using namespace cppgrad;
using namespace cppgrad::hf;
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
