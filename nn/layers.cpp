#include "nn/layers.h"

#include <cmath>

#include "nn/init.h"

namespace cppgrad::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias) : in_features(in), out_features(out) {
  CPPGRAD_CHECK(in > 0 && out > 0, "Linear: features must be positive, got in={} out={}", in, out);
  weight = register_parameter("weight", empty({out, in}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Linear::reset_parameters(Generator& gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), gen);  // bound 1/√in
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) { return functional::linear(x, weight, bias); }

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features, bias.defined());
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad)
    : num_embeddings(num), embedding_dim(dim), padding_idx(pad) {
  CPPGRAD_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got {} x {}", num, dim);
  if (padding_idx) {
    CPPGRAD_CHECK(*padding_idx >= -num && *padding_idx < num, "Embedding: padding_idx {} out of range for {} embeddings",
          *padding_idx, num);
    if (*padding_idx < 0) padding_idx = *padding_idx + num;
  }
  weight = register_parameter("weight", empty({num, dim}));
  init::normal_(weight);
  if (padding_idx) {
    NoGradGuard no_grad;
    weight.select(0, *padding_idx).zero_();
  }
}

Tensor Embedding::forward(const Tensor& indices) { return functional::embedding(indices, weight, padding_idx); }

std::string Embedding::extra_repr() const {
  return padding_idx ? fmt::format("{}, {}, padding_idx={}", num_embeddings, embedding_dim, *padding_idx)
                     : fmt::format("{}, {}", num_embeddings, embedding_dim);
}

GELU::GELU(std::string approximate_) : approximate(std::move(approximate_)) {
  CPPGRAD_CHECK(approximate == "none" || approximate == "tanh",
                "GELU: approximate must be \"none\" or \"tanh\", got \"{}\"", approximate);
}

std::string GELU::extra_repr() const { return fmt::format("approximate='{}'", approximate); }

LayerNorm::LayerNorm(Shape shape, double eps_, bool elementwise_affine)
    : normalized_shape(std::move(shape)), eps(eps_) {
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    bias = register_parameter("bias", zeros(normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return functional::layer_norm(x, normalized_shape, weight, bias, eps); }

std::string LayerNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", shape_str(normalized_shape), eps, weight.defined());
}

Dropout::Dropout(double p_) : p(p_) { functional::check_dropout_probability("Dropout", p); }

Tensor Dropout::forward(const Tensor& x) { return functional::dropout(x, p, is_training()); }
Tensor Dropout::relu_forward(const Tensor& x) { return functional::relu_dropout(x, p, is_training()); }

std::string Dropout::extra_repr() const { return fmt::format("p={}", p); }

Sequential::Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<UnaryModule> module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& m : modules_) y = m->forward(y);
  return y;
}

}  // namespace cppgrad::nn
