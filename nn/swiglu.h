// SiLU and the gated feed-forward block of Llama, Mistral and PaLM (Shazeer 2020, "GLU Variants
// Improve Transformer"):
//
//   SwiGLU(x) = W2 · (SiLU(W1·x) ⊙ W3·x),   SiLU(z) = z·σ(z),
//
// W1 and W3 (hidden_dim, dim), W2 (dim, hidden_dim). The gate SiLU(W1·x) scales each hidden unit
// of W3·x. Three matrices instead of two, so a model that keeps the feed-forward's parameter
// count takes hidden_dim ≈ (2/3)·4·dim (Llama: 8·dim/3 rounded up).
//
// Names: Meta's Llama code calls the three Linear w1, w2, w3 (kept here: w1.weight, ...); Hugging
// Face's calls them gate_proj = w1, up_proj = w3, down_proj = w2.
#pragma once

#include "layers.h"

namespace cppgrad::nn {

namespace functional {
// x·σ(x), as torch.nn.functional.silu
Tensor silu(const Tensor& x);
// W2 · (SiLU(W1·x) ⊙ W3·x) (+ biases when defined): x (..., dim) -> (..., dim)
Tensor swiglu(const Tensor& x, const Tensor& w1, const Tensor& w2, const Tensor& w3, const Tensor& b1 = {},
              const Tensor& b2 = {}, const Tensor& b3 = {});
}  // namespace functional

class SiLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return functional::silu(x); }
  std::string type_name() const override { return "SiLU"; }
};

class SwiGLU : public UnaryModule {
 public:
  // Each Linear initialised as PyTorch's Linear; bias = false as in Llama.
  SwiGLU(int64_t dim, int64_t hidden_dim, bool bias = false);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SwiGLU"; }

  const int64_t dim, hidden_dim;
  std::shared_ptr<Linear> w1, w2, w3;
};

}  // namespace cppgrad::nn
