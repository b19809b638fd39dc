#include "nn/swiglu.h"

namespace cppgrad::nn {

namespace functional {

// x·σ(x): the silu row of the unary table (tensor/op_tables.h), one op.
Tensor silu(const Tensor& x) { return x.silu(); }

Tensor swiglu(const Tensor& x, const Tensor& w1, const Tensor& w2, const Tensor& w3, const Tensor& b1, const Tensor& b2,
              const Tensor& b3) {
  CPPGRAD_CHECK(w1.dim() == 2 && w3.shape() == w1.shape() && w2.dim() == 2 && w2.size(0) == w1.size(1) &&
                    w2.size(1) == w1.size(0),
                "swiglu: w1 {}, w3 {} must be (hidden, dim) and w2 {} (dim, hidden)", shape_str(w1.shape()),
                shape_str(w3.shape()), shape_str(w2.shape()));
  Tensor gate = linear(x, w1, b1).silu();   // (..., dim) -> (..., hidden)
  return linear(gate * linear(x, w3, b3), w2, b2);  // (..., hidden) -> (..., dim)
}

}  // namespace functional

SwiGLU::SwiGLU(int64_t dim_, int64_t hidden_dim_, bool bias) : dim(dim_), hidden_dim(hidden_dim_) {
  CPPGRAD_CHECK(dim > 0 && hidden_dim > 0, "SwiGLU: dim {} and hidden_dim {} must be positive", dim, hidden_dim);
  w1 = register_module("w1", std::make_shared<Linear>(dim, hidden_dim, bias));
  w2 = register_module("w2", std::make_shared<Linear>(hidden_dim, dim, bias));
  w3 = register_module("w3", std::make_shared<Linear>(dim, hidden_dim, bias));
}

Tensor SwiGLU::forward(const Tensor& x) {
  return functional::swiglu(x, w1->weight, w2->weight, w3->weight, w1->bias, w2->bias, w3->bias);
}

}  // namespace cppgrad::nn
