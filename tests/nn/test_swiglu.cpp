// SiLU and SwiGLU: values by hand, the block as its formula, gradcheck and gradgradcheck in
// float64, parameter names, bad shapes.
#include <doctest/doctest.h>

#include <cmath>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
namespace F = cppgrad::nn::functional;
using namespace nntest;  // the helpers of nn_helpers.h

TEST_CASE("silu is x times sigmoid(x)") {
  Tensor x = tensor({0.0, 1.0, -2.0, 30.0}, kFloat64);
  check_values(F::silu(x), {0.0, 1.0 / (1.0 + std::exp(-1.0)), -2.0 / (1.0 + std::exp(2.0)), 30.0});
  check_values(SiLU().forward(x), {0.0, 1.0 / (1.0 + std::exp(-1.0)), -2.0 / (1.0 + std::exp(2.0)), 30.0});
}

TEST_CASE("SwiGLU computes W2 (SiLU(W1 x) * W3 x), with Llama's names w1, w2, w3") {
  SwiGLU block(4, 6);
  block.to(kFloat64);
  auto names = block.named_parameters();
  REQUIRE(names.size() == 3);
  CHECK(names[0].first == "w1.weight");
  CHECK(names[1].first == "w2.weight");
  CHECK(names[2].first == "w3.weight");
  CHECK(block.w1->weight.shape() == Shape{6, 4});
  CHECK(block.w2->weight.shape() == Shape{4, 6});
  Tensor x = randn64({2, 3, 4}, 7501);
  Tensor a = x.matmul(block.w1->weight.t()), b = x.matmul(block.w3->weight.t());
  Tensor by_hand = (a * (a.neg().exp() + 1.0).pow(-1.0) * b).matmul(block.w2->weight.t());
  CHECK(max_abs_diff(block.forward(x), by_hand) < 1e-14);
  CHECK(SwiGLU(4, 6, true).named_parameters().size() == 6);
}

TEST_CASE("gradcheck and gradgradcheck silu and swiglu, with and without biases") {
  Tensor x = randn64({2, 3}, 7502, true);
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return F::silu(in[0]); }, {x}));
  CHECK(gradgradcheck([](const std::vector<Tensor>& in) { return F::silu(in[0]); }, {x}));
  Tensor w1 = randn64({5, 3}, 7503, true), w2 = randn64({3, 5}, 7504, true), w3 = randn64({5, 3}, 7505, true);
  Tensor b1 = randn64({5}, 7506, true), b2 = randn64({3}, 7507, true), b3 = randn64({5}, 7508, true);
  auto plain = [](const std::vector<Tensor>& in) { return F::swiglu(in[0], in[1], in[2], in[3]); };
  CHECK(gradcheck(plain, {x, w1, w2, w3}));
  CHECK(gradgradcheck(plain, {x, w1, w2, w3}));
  auto biased = [](const std::vector<Tensor>& in) { return F::swiglu(in[0], in[1], in[2], in[3], in[4], in[5], in[6]); };
  CHECK(gradcheck(biased, {x, w1, w2, w3, b1, b2, b3}));
  CHECK(gradgradcheck(biased, {x, w1, w2, w3, b1, b2, b3}));
}

TEST_CASE("swiglu refuses weights that do not fit, naming the shapes") {
  Tensor x = zeros({2, 3}, kFloat64), w = zeros({5, 3}, kFloat64);
  std::string msg = error_message([&] { F::swiglu(x, w, zeros({3, 4}, kFloat64), w); });
  CHECK(contains(msg, "swiglu"));
  CHECK(contains(msg, "[3,4]"));
  CHECK(contains(error_message([] { SwiGLU(0, 4); }), "SwiGLU: dim 0"));
  CHECK(contains(error_message([] { SwiGLU(4, 8).forward(zeros({2, 5})); }), "[2,5]"));
}
