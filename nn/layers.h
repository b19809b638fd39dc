// The basic layers: Linear, Embedding, LayerNorm, Dropout, ReLU, GELU, Tanh, Sigmoid, and the containers
// Sequential and ModuleList. Each initialises its parameters as PyTorch's does.
#pragma once

#include <optional>
#include <type_traits>

#include "functional.h"
#include "module.h"

namespace cppgrad::nn {

// A module with one tensor in and one out: what Sequential chains.
class UnaryModule : public Module {
 public:
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

// y = x · Wᵀ + b.  W: (out_features, in_features) ~ U(-1/√in, 1/√in), b likewise.
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  void reset_parameters(Generator& gen = default_generator());

  int64_t in_features, out_features;
  Parameter weight, bias;  // bias undefined when bias=false
};

// A lookup table: row i of `weight` (num_embeddings, embedding_dim) for index i; weight ~ N(0, 1),
// with the padding_idx row zero and never updated by gradients.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;

  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;
  Parameter weight;
};

class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

  Shape normalized_shape;
  double eps;
  Parameter weight, bias;  // ones and zeros; undefined without elementwise_affine
};

class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  // forward(x.relu()): the same numbers, in training one op (functional::relu_dropout).
  Tensor relu_forward(const Tensor& x);
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  double p;
};

class ReLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return x.relu(); }
  std::string type_name() const override { return "ReLU"; }
};

// GELU(x) = x·Φ(x), or with approximate = "tanh" PyTorch's tanh approximation
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), as torch.nn.GELU(approximate=...).
class GELU : public UnaryModule {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override { return x.gelu(approximate); }
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override;

  std::string approximate;
};

class Tanh : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return x.tanh(); }
  std::string type_name() const override { return "Tanh"; }
};

class Sigmoid : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return x.sigmoid(); }
  std::string type_name() const override { return "Sigmoid"; }
};

// Runs its modules in order; children are named "0", "1", ... Either form builds one:
//   nn::Sequential seq{std::make_shared<nn::Linear>(1, 64), std::make_shared<nn::ReLU>()};
//   auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(1, 64), std::make_shared<nn::ReLU>());
class Sequential : public UnaryModule {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules);
  template <class... M>
    requires(sizeof...(M) > 0 && (std::is_convertible_v<M*, UnaryModule*> && ...))
  explicit Sequential(std::shared_ptr<M>... modules) : Sequential({std::shared_ptr<UnaryModule>(std::move(modules))...}) {}
  void push_back(std::shared_ptr<UnaryModule> module);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return modules_.size(); }
  std::string type_name() const override { return "Sequential"; }

 private:
  std::vector<std::shared_ptr<UnaryModule>> modules_;
};

// Holds modules under "0", "1", ...; for layers with their own forward signatures.
template <class M = Module>
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(items_.size()), module);
    items_.push_back(std::move(module));
  }
  const std::shared_ptr<M>& operator[](size_t i) const {
    CPPGRAD_CHECK(i < items_.size(), "ModuleList: index {} out of range for {} modules", i, items_.size());
    return items_[i];
  }
  size_t size() const { return items_.size(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  std::string type_name() const override { return "ModuleList"; }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace cppgrad::nn
