// Weight tying the PyTorch way (issue 27): `head->weight = tok->weight` re-registers the shared
// tensor, so the model trains one tensor, lists it once, and saves it once.
#include <doctest/doctest.h>

#include <filesystem>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using namespace nntest;  // the helpers of nn_helpers.h

namespace {

// A language model's two ends: token embedding (V, d) and output head d -> V, tied.
struct TinyLM : Module {
  TinyLM() {
    tok = register_module("tok", std::make_shared<Embedding>(5, 3));
    head = register_module("head", std::make_shared<Linear>(3, 5, /*bias=*/false));
    head->weight = tok->weight;  // PyTorch: self.head.weight = self.tok.weight
  }
  Tensor forward(const Tensor& ids) { return head->forward(tok->forward(ids)); }
  std::shared_ptr<Embedding> tok;
  std::shared_ptr<Linear> head;
};

std::vector<std::string> names_of(const NamedTensors& named) {
  std::vector<std::string> names;
  for (const auto& [name, t] : named) names.push_back(name);
  return names;
}

}  // namespace

TEST_CASE("weight tying: assigning a parameter re-registers it, listed once under its first name") {
  TinyLM lm;
  CHECK(lm.head->weight.is_same(lm.tok->weight));
  // PyTorch lists a shared parameter once, under the name it is first reached by.
  CHECK(names_of(lm.named_parameters()) == std::vector<std::string>{"tok.weight"});
  CHECK(lm.parameter_count() == 15);
  CHECK(names_of(lm.head->named_parameters()) == std::vector<std::string>{"weight"});
  CHECK(lm.head->named_parameters()[0].second.is_same(lm.tok->weight));
  // One entry in the state (and so in a checkpoint).
  CHECK(names_of(lm.state_dict()) == std::vector<std::string>{"tok.weight"});

  // The gradient of both uses lands in the one tensor, and an optimizer step moves it for both.
  const Tensor ids = tensor(std::vector<int64_t>{0, 3, 4}, {3});
  lm.forward(ids).sum().backward();
  const Tensor w = lm.tok->weight;
  REQUIRE(w.grad().defined());
  optim::SGD sgd(lm.parameters(), optim::SGDOptions(0.1));
  const std::vector<double> before = nntest::values(w);
  sgd.step();
  CHECK(nntest::values(lm.head->weight) != before);
  CHECK(lm.head->weight.is_same(lm.tok->weight));
}

TEST_CASE("weight tying: a checkpoint holds the tensor once and loads back, PyTorch's two-name state too") {
  TinyLM lm, other;
  const auto path = (std::filesystem::temp_directory_path() / "cppgrad_test_tied.safetensors").string();
  nn::save(lm, path);
  CHECK(load_safetensors(path).tensors.size() == 1);
  nn::load(other, path);
  CHECK(nntest::values(other.head->weight) == nntest::values(lm.tok->weight));
  std::filesystem::remove(path);
  // PyTorch's state_dict names a tied tensor under each of its names: accepted.
  NamedTensors both{{"tok.weight", lm.tok->weight}, {"head.weight", lm.tok->weight}};
  other.load_state_dict(both);
  // Only the second name given (as a file that kept the output layer's name would): it loads the tensor.
  TinyLM third;
  third.load_state_dict({{"head.weight", lm.tok->weight}});
  CHECK(nntest::values(third.tok->weight) == nntest::values(lm.tok->weight));
}

TEST_CASE("weight tying: a computed tensor cannot be assigned to a parameter, and nothing changes") {
  Linear head(3, 5, false);
  const Tensor old = head.weight;
  const Tensor computed = old * 2.0;  // has a grad_fn: not a parameter
  CHECK(contains(error_message([&] { head.weight = computed; }), "the tensor assigned to the parameter 'weight' is computed"));
  CHECK(head.weight.is_same(old));
  CHECK(head.named_parameters()[0].second.is_same(old));
  CHECK(contains(error_message([&] { head.weight = Tensor(); }), "cannot assign an undefined tensor"));
  // A copy of the member is a plain handle: rebinding it leaves the module alone.
  Tensor copy = head.weight;
  copy = zeros({1});
  CHECK(head.weight.is_same(old));
}
