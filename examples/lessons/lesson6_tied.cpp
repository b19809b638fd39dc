// Lesson 6: do tied weights get their gradients?
//
// Tying the output layer to the embedding (Press & Wolf 2017) means one tensor W used twice:
// to look up token vectors (rows of W) and to score the vocabulary (h · Wᵀ). Autograd adds the
// gradients of every use of a tensor, so W's gradient is the sum of what each use alone would
// give. We check it against an untied model holding two separate copies of W, and check that
// an optimizer handed W twice (once from each layer) updates it once, not twice. Copying the
// weights instead of sharing the tensor is not tying: after one step the copies drift apart.
#include <fmt/core.h>

#include "lessons/lessons.h"
#include "lessons/measure.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace lessons {

namespace {

// An output layer that scores the vocabulary with a weight it is given: logits = h · Wᵀ.
// Registering the embedding's own tensor here is what ties the two. (An nn::Linear would not
// do: it registers a weight of its own in its constructor, and pointing its `weight` handle at
// another tensor afterwards leaves that first tensor in its parameter list, untrained.)
class TiedOutput : public nn::Module {
 public:
  explicit TiedOutput(const Tensor& shared_weight) { weight = register_parameter("weight", shared_weight); }
  Tensor forward(const Tensor& h) { return F::linear(h, weight); }  // (B, T, dim) -> (B, T, vocab)
  std::string type_name() const override { return "TiedOutput"; }
  Tensor weight;
};

// embedding -> tanh(Linear) -> scores over the vocabulary with the embedding matrix.
class TinyLanguageModel : public nn::Module {
 public:
  TinyLanguageModel(int64_t vocab, int64_t dim) {
    embed = register_module("embed", std::make_shared<nn::Embedding>(vocab, dim));
    mix = register_module("mix", std::make_shared<nn::Linear>(dim, dim));
    out = register_module("out", std::make_shared<TiedOutput>(embed->weight));
  }
  Tensor forward(const Tensor& tokens) { return out->forward(mix->forward(embed->forward(tokens)).tanh()); }
  std::string type_name() const override { return "TinyLanguageModel"; }

  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::Linear> mix;
  std::shared_ptr<TiedOutput> out;
};

Tensor loss_of(const Tensor& logits, const Tensor& targets) {
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace

Lesson6 run_lesson6() {
  Lesson6 r;
  const int64_t V = r.vocab, D = r.dim;
  manual_seed(6);
  Generator data(60);
  Tensor tokens = randint(0, V, {4, 5}, data), targets = randint(0, V, {4, 5}, data);

  TinyLanguageModel model(V, D);
  model.to(kFloat64);
  for (const auto& [name, p] : model.named_parameters()) r.parameter_names.push_back(name);
  r.weight_is_shared = model.out->weight.is_same(model.embed->weight);

  // ---- the tied gradient, and the two uses computed separately -------------------------------
  const Tensor W = model.embed->weight;
  Tensor W_in = W.detach().clone().requires_grad_(), W_out = W.detach().clone().requires_grad_();
  loss_of(model.forward(tokens), targets).backward();
  Tensor h = model.mix->forward(F::embedding(tokens, W_in)).tanh();
  loss_of(F::linear(h, W_out), targets).backward();  // the untied model: same numbers, two tensors
  r.tied_vs_sum = max_abs_diff(W.grad(), W_in.grad() + W_out.grad());
  r.tied_vs_embedding_use = max_abs_diff(W.grad(), W_in.grad());
  r.tied_vs_output_use = max_abs_diff(W.grad(), W_out.grad());

  // ---- the optimizer, given W once from each layer -------------------------------------------
  // Collecting each layer's parameters separately lists W twice; SGD must still step it once.
  const double lr = 0.1;
  optim::SGD sgd({model.embed->weight, model.mix->weight, model.mix->bias, model.out->weight}, optim::SGDOptions(lr));
  r.sgd_parameters = static_cast<int64_t>(sgd.param_groups()[0].params.size());
  Tensor before = W.detach().clone(), gradient = W.grad().detach().clone();
  sgd.step();
  Tensor moved = before - W.detach();
  r.sgd_step_vs_once = max_abs_diff(moved, gradient * lr);
  r.sgd_step_vs_twice = max_abs_diff(moved, gradient * (2 * lr));

  // Adam's first step moves every element by about lr, whatever the gradient's size: twice
  // would be 2·lr.
  model.zero_grad();
  loss_of(model.forward(tokens), targets).backward();
  optim::Adam adam({model.embed->weight, model.out->weight}, optim::AdamOptions(lr));
  before = W.detach().clone();
  adam.step();
  r.adam_largest_move = (before - W.detach()).abs().max().item();

  // ---- copying is not tying ------------------------------------------------------------------
  // Two tensors that start equal get different gradients, so one step sets them apart.
  Tensor A = W.detach().clone().requires_grad_(), B = W.detach().clone().requires_grad_();
  loss_of(F::linear(model.mix->forward(F::embedding(tokens, A)).tanh(), B), targets).backward();
  optim::SGD copies({A, B}, optim::SGDOptions(lr));
  copies.step();
  r.copies_apart_after_one_step = max_abs_diff(A, B);
  return r;
}

void print(const Lesson6& r) {
  fmt::print("Lesson 6: do tied weights get their gradients?\n\n");
  fmt::print("A tiny language model, vocabulary {}, width {}: embed -> tanh(Linear) -> logits = h · Wᵀ,\n", r.vocab,
             r.dim);
  fmt::print("where W is the embedding matrix itself (the output layer holds the same tensor: {}).\n",
             r.weight_is_shared ? "yes" : "no");
  fmt::print("Its parameters, each listed once:");
  for (const auto& name : r.parameter_names) fmt::print(" {}", name);
  fmt::print("\n\n");

  fmt::print("Gradient of the shared W against an untied copy (W_in for the lookup, W_out for the scores):\n");
  fmt::print("  max |dW - (dW_in + dW_out)| = {:.1e}   the sum of both uses\n", r.tied_vs_sum);
  fmt::print("  max |dW - dW_in|            = {:.3g}   the lookup's share alone is not it\n", r.tied_vs_embedding_use);
  fmt::print("  max |dW - dW_out|           = {:.3g}   nor is the output layer's\n\n", r.tied_vs_output_use);

  fmt::print("An optimizer given W twice (from embed and from out), lr = 0.1:\n");
  fmt::print("  SGD keeps {} distinct parameters of the 4 tensors it was given (W among them twice)\n",
             r.sgd_parameters);
  fmt::print("  max |step - lr·dW|   = {:.1e}   (updated once)\n", r.sgd_step_vs_once);
  fmt::print("  max |step - 2·lr·dW| = {:.3g}   (what updating twice would have done)\n", r.sgd_step_vs_twice);
  fmt::print("  Adam's first step moves an element by at most {:.4f} (lr = 0.1; twice would be 0.2)\n\n",
             r.adam_largest_move);

  fmt::print("Copying instead of sharing: two tensors equal at the start are {:.3g} apart after one step.\n\n",
             r.copies_apart_after_one_step);
  fmt::print("Answer: yes. Share the tensor itself, not a copy of its values; autograd then adds the\n");
  fmt::print("gradients of both uses, and an optimizer that finds the tensor twice steps it once.\n");
}

}  // namespace lessons
