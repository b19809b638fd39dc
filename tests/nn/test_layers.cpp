// The basic layers against values computed by hand: Linear, Embedding, LayerNorm, Dropout,
// ReLU, GELU, Sequential, ModuleList, and their functional forms; gradchecks of the
// differentiable ones in float64.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
namespace F = cppgrad::nn::functional;
using namespace nntest;  // the helpers of nn_helpers.h

TEST_CASE("Linear computes x times W transposed plus b") {
  Linear lin(3, 2);
  lin.to(kFloat64);
  set_values(lin.weight, {1, 2, 3, 0, -1, 0.5});
  set_values(lin.bias, {0.5, -1});
  Tensor x = tensor({{1, 1, 1}, {2, 0, -1}}, kFloat64);
  // row 0: [1+2+3+0.5, 0-1+0.5-1], row 1: [2+0-3+0.5, 0+0-0.5-1]
  check_values(lin.forward(x), {6.5, -1.5, -0.5, -1.5});
  CHECK(lin.forward(x).shape() == Shape{2, 2});
  // Any leading dims: (2, 1, 2, 3) -> (2, 1, 2, 2), each row as above.
  Tensor batched = x.reshape({1, 1, 2, 3}).expand({2, 1, 2, 3});
  check_values(lin.forward(batched), {6.5, -1.5, -0.5, -1.5, 6.5, -1.5, -0.5, -1.5});
  // The functional form is the same computation.
  check_values(F::linear(x, lin.weight, lin.bias), {6.5, -1.5, -0.5, -1.5});
  check_values(F::linear(x, lin.weight), {6.0, -0.5, -1.0, -0.5});
  check_values(lin.forward(tensor({2, 0, -1}, kFloat64)), {-0.5, -1.5});  // a single (in) vector
  // Shape errors name the op and the shapes.
  std::string msg = error_message([&] { lin.forward(ones({2, 4}, kFloat64)); });
  CHECK(contains(msg, "linear"));
  CHECK(contains(msg, "[2,4]"));
  CHECK(contains(msg, "[2,3]"));
  CHECK(contains(error_message([&] { Linear bad(0, 3); }), "Linear"));
}

TEST_CASE("gradcheck Linear for input and weight and bias") {
  manual_seed(11);
  Linear lin(3, 4);
  lin.to(kFloat64);
  Tensor x = randn64({2, 5, 3}, 12, true);
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return lin.forward(in[0]); }, {x, lin.weight, lin.bias}));
}

TEST_CASE("Embedding picks rows and its padding row is zero and gets no gradient") {
  Embedding emb(4, 2, /*padding_idx=*/0);
  emb.to(kFloat64);
  CHECK(values(emb.weight.select(0, 0)) == std::vector<double>{0.0, 0.0});  // zero from the start
  set_values(emb.weight, {0, 0, 1, 2, 3, 4, 5, 6});
  Tensor idx = tensor(std::vector<int64_t>{2, 0, 3, 2}, {2, 2});
  Tensor out = emb.forward(idx);
  CHECK(out.shape() == Shape{2, 2, 2});
  check_values(out, {3, 4, 0, 0, 5, 6, 3, 4});
  // Gradient of sum(out * G): row 2 collects two rows of G, row 3 one, row 1 none, row 0 none.
  Tensor G = tensor(std::vector<double>{1, 2, 10, 20, 100, 200, 1000, 2000}, {2, 2, 2});
  (out * G).sum().backward();
  check_values(emb.weight.grad(), {0, 0, 0, 0, 1001, 2002, 100, 200});
  // A negative padding_idx counts from the end.
  Embedding tail(5, 3, -1);
  CHECK(tail.padding_idx == 4);
  CHECK(values(tail.weight.select(0, 4)) == std::vector<double>(3, 0.0));
  // Indices must be int64; the functional form gives the same rows.
  CHECK(contains(error_message([&] { emb.forward(ones({2})); }), "embedding"));
  CHECK_THROWS_AS(emb.forward(tensor(std::vector<int64_t>{4}, {1})), Error);  // row 4 of 4
  check_values(F::embedding(idx, emb.weight), {3, 4, 0, 0, 5, 6, 3, 4});
}

// A padding id of -1 or -100 (cross-entropy's ignore_index) must not read the table's last rows:
// PyTorch raises, and so does cppgrad, naming the op, the index and the table's size.
TEST_CASE("Embedding refuses a negative or too-large index") {
  Embedding emb(4, 2);
  for (int64_t bad : {-1, -100}) {
    std::string e = error_message([&] { emb.forward(tensor(std::vector<int64_t>{1, bad, 2}, {3})); });
    CHECK(contains(e, fmt::format("embedding: index {} out of range for a table of 4 rows", bad)));
    CHECK(contains(e, "negative indices are not wrapped"));
  }
  CHECK(contains(error_message([&] { emb.forward(tensor(std::vector<int64_t>{0, 4}, {1, 2})); }),
                 "embedding: index 4 out of range for a table of 4 rows (weight [4,2])"));
  // The padding row is still given by a non-negative index; padding_idx itself may count from the end.
  Embedding padded(4, 2, -1);
  CHECK(values(padded.forward(tensor(std::vector<int64_t>{3}, {1}))) == std::vector<double>{0.0, 0.0});
  CHECK(contains(error_message([&] { padded.forward(tensor(std::vector<int64_t>{-1}, {1})); }), "index -1"));
}

TEST_CASE("gradcheck Embedding with respect to its weight") {
  manual_seed(13);
  Embedding emb(5, 3);
  emb.to(kFloat64);
  Tensor idx = tensor(std::vector<int64_t>{1, 4, 1, 0, 3, 1}, {2, 3});
  Tensor G = randn64({2, 3, 3}, 14);
  CHECK(gradcheck([&](const std::vector<Tensor>&) { return (emb.forward(idx) * G).tanh(); }, {emb.weight}));
}

TEST_CASE("LayerNorm normalises the last dims with eps and the affine parameters") {
  // x = [1, 2, 3, 4]: mean 2.5, biased variance 1.25. With eps 0.75: divide by √2.
  LayerNorm ln(Shape{4}, 0.75);
  ln.to(kFloat64);
  Tensor x = tensor({{1, 2, 3, 4}, {-2, -2, -2, -2}}, kFloat64);
  const double r = 1.0 / std::sqrt(2.0);
  check_values(ln.forward(x), {-1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r, 0, 0, 0, 0});
  set_values(ln.weight, {1, 2, 3, 4});
  set_values(ln.bias, {0.5, 0.5, 0.5, 1});
  check_values(ln.forward(x), {0.5 - 1.5 * r, 0.5 - 1.0 * r, 0.5 + 1.5 * r, 1 + 6.0 * r, 0.5, 0.5, 0.5, 1});

  // Without elementwise_affine there are no parameters, and the result is the plain normalisation.
  LayerNorm plain(Shape{2, 2}, 0.75, /*elementwise_affine=*/false);
  CHECK(plain.parameters().empty());
  CHECK_FALSE(plain.weight.defined());
  check_values(plain.forward(x.reshape({2, 2, 2})), {-1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r, 0, 0, 0, 0});
  // The default eps is 1e-5: [-1, 1] has variance 1.
  LayerNorm def(Shape{2}, 1e-5, false);
  CHECK(def.eps == 1e-5);
  check_values(def.forward(tensor({{-1, 1}}, kFloat64)), {-1.0 / std::sqrt(1 + 1e-5), 1.0 / std::sqrt(1 + 1e-5)});
  check_values(F::layer_norm(x, {4}, {}, {}, 0.75), {-1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r, 0, 0, 0, 0});
  std::string msg = error_message([&] { ln.forward(ones({2, 3}, kFloat64)); });
  CHECK(contains(msg, "layer_norm"));
  CHECK(contains(msg, "[2,3]"));
}

TEST_CASE("gradcheck LayerNorm for input and weight and bias") {
  LayerNorm ln(Shape{4});
  ln.to(kFloat64);
  set_values(ln.weight, {1.0, -0.5, 2.0, 0.3});
  set_values(ln.bias, {0.1, 0.2, -0.3, 0.0});
  Tensor x = randn64({3, 4}, 15, true);
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return ln.forward(in[0]); }, {x, ln.weight, ln.bias}));
  LayerNorm two_dims(Shape{2, 3}, 1e-3, false);
  Tensor y = randn64({2, 2, 3}, 16, true);
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return two_dims.forward(in[0]); }, {y}));
}

TEST_CASE("Dropout zeroes about p and scales survivors by one over one minus p") {
  Dropout drop(0.3);
  Tensor x = ones({100000}, kFloat64).requires_grad_();
  manual_seed(17);
  Tensor y = drop.forward(x);
  int64_t zeros_seen = 0;
  bool survivors_scaled = true;
  for (double v : values(y)) {
    if (v == 0.0)
      ++zeros_seen;
    else if (std::abs(v - 1.0 / 0.7) > 1e-12)
      survivors_scaled = false;
  }
  CHECK(survivors_scaled);
  CHECK(static_cast<double>(zeros_seen) / 100000.0 == doctest::Approx(0.3).epsilon(0.02));
  // The gradient is the same mask and scale.
  y.sum().backward();
  CHECK(values(x.grad()) == values(y));
  // Seeded: the same seed drops the same elements.
  manual_seed(17);
  CHECK(values(drop.forward(x)) == values(y));
  // In eval mode, and with p = 0, Dropout is the identity (the very tensor).
  drop.eval();
  CHECK(drop.forward(x).is_same(x));
  CHECK(F::dropout(x, 0.0, true).is_same(x));
  CHECK(values(F::dropout(x, 1.0, true)) == std::vector<double>(100000, 0.0));
  Generator g1(3), g2(3);
  CHECK(values(F::dropout(x, 0.5, true, g1)) == values(F::dropout(x, 0.5, true, g2)));
  CHECK(contains(error_message([] { Dropout bad(1.5); }), "Dropout"));
}

TEST_CASE("ReLU and GELU match their formulas") {
  Tensor x = tensor({-2.0, -0.5, 0.0, 1.0, 3.0}, kFloat64);
  ReLU relu;
  GELU gelu;
  check_values(relu.forward(x), {0, 0, 0, 1, 3});
  std::vector<double> expected;
  for (double v : values(x)) expected.push_back(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
  check_values(gelu.forward(x), expected);
  CHECK(expected[3] == doctest::Approx(0.8413447460685429).epsilon(1e-15));
  check_values(F::relu(x), values(relu.forward(x)));
  check_values(F::gelu(x), expected);
  Tensor a = tensor({-1.3, 0.4, 2.1}, kFloat64).requires_grad_();
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return gelu.forward(in[0]) + relu.forward(in[0]); }, {a}));
}

TEST_CASE("Tanh and Sigmoid modules and their functional forms match their formulas and gradcheck") {
  Tensor x = tensor({-2.0, -0.5, 0.0, 1.0, 3.0}, kFloat64);
  Tanh tanh_module;
  Sigmoid sigmoid_module;
  std::vector<double> tanh_expected, sigmoid_expected;
  for (double v : values(x)) {
    tanh_expected.push_back(std::tanh(v));
    sigmoid_expected.push_back(1.0 / (1.0 + std::exp(-v)));
  }
  check_values(tanh_module.forward(x), tanh_expected);
  check_values(F::tanh(x), tanh_expected);
  check_values(sigmoid_module.forward(x), sigmoid_expected);
  check_values(F::sigmoid(x), sigmoid_expected);
  CHECK(tanh_module.str() == "Tanh()");
  CHECK(sigmoid_module.str() == "Sigmoid()");
  Tensor a = tensor({-1.3, 0.4, 2.1}, kFloat64).requires_grad_();
  auto both = [&](const std::vector<Tensor>& in) { return tanh_module(in[0]) * sigmoid_module(in[0]); };
  CHECK(gradcheck(both, {a}));
  CHECK(gradgradcheck(both, {a}));
  CHECK(gradgradcheck([](const std::vector<Tensor>& in) { return F::tanh(in[0]) + F::sigmoid(in[0]); }, {a}));
}

TEST_CASE("Sequential built in one expression by make_shared, as the README shows") {
  auto seq = std::make_shared<Sequential>(std::make_shared<Linear>(1, 4), std::make_shared<Tanh>(),
                                          std::make_shared<Linear>(4, 1), std::make_shared<Sigmoid>());
  CHECK(seq->size() == 4);
  CHECK(seq->parameters().size() == 4);
  Tensor y = seq->forward(ones({5, 1}));
  CHECK(y.shape() == Shape{5, 1});
  CHECK(contains(seq->str(), "(1): Tanh()"));
  CHECK(contains(seq->str(), "(3): Sigmoid()"));
  std::ostringstream printed;  // print(model): a module prints its tree by << and by fmt
  printed << *seq;
  CHECK(printed.str() == seq->str());
  CHECK(fmt::format("{}", *seq) == seq->str());
  CHECK(fmt::format("{}", Tanh()) == "Tanh()");
}

// torch.nn.GELU(approximate="tanh"): ½x(1 + tanh(√(2/π)(x + 0.044715x³))). The references are
// that formula evaluated in float64 by Python's math module.
TEST_CASE("GELU(\"tanh\") is PyTorch's tanh approximation, and gradchecks") {
  GELU tanh_gelu("tanh");
  CHECK(tanh_gelu.approximate == "tanh");
  CHECK(GELU().approximate == "none");
  CHECK(contains(tanh_gelu.str(), "GELU(approximate='tanh')"));
  Tensor x = tensor({-3.0, -0.5, 1.0, 3.5}, kFloat64);
  const std::vector<double> reference{-0.0036373920817729943, -0.15428599017485606, 0.8411919906082768,
                                      3.499383802344626};
  check_values(tanh_gelu.forward(x), reference, 1e-15);
  check_values(F::gelu(x, "tanh"), reference, 1e-15);
  CHECK(contains(error_message([] { GELU bad("fast"); }), "GELU: approximate must be \"none\" or \"tanh\", got \"fast\""));
  Tensor a = tensor({-1.3, 0.4, 2.1}, kFloat64).requires_grad_();
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return tanh_gelu.forward(in[0]); }, {a}));
  CHECK(gradgradcheck([&](const std::vector<Tensor>& in) { return tanh_gelu.forward(in[0]); }, {a}));
}

TEST_CASE("Sequential chains modules and names them by position") {
  auto first = std::make_shared<Linear>(2, 3);
  auto second = std::make_shared<Linear>(3, 1);
  Sequential seq{first, std::make_shared<ReLU>(), second};
  seq.to(kFloat64);
  CHECK(seq.size() == 3);
  std::vector<std::string> names;
  for (const auto& [name, t] : seq.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  set_values(first->weight, {1, 0, 0, 1, 1, 1});
  set_values(first->bias, {0, 0, -10});
  set_values(second->weight, {1, -1, 2});
  set_values(second->bias, {0.25});
  // x = [3, -1]: hidden [3, -1, 2-10] -> relu [3, 0, 0] -> 3 + 0.25
  check_values(seq.forward(tensor({{3, -1}}, kFloat64)), {3.25});
  seq.push_back(std::make_shared<GELU>());
  CHECK(seq.size() == 4);
  check_values(seq.forward(tensor({{3, -1}}, kFloat64)), {3.25 * 0.5 * (1 + std::erf(3.25 / std::sqrt(2.0)))});
}

TEST_CASE("ModuleList holds modules under their index") {
  ModuleList<Linear> list;
  list.push_back(std::make_shared<Linear>(2, 2));
  list.push_back(std::make_shared<Linear>(2, 5, false));
  CHECK(list.size() == 2);
  CHECK(list[1]->out_features == 5);
  std::vector<std::string> names;
  for (const auto& [name, t] : list.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "1.weight"});
  int64_t total = 0;
  for (const auto& lin : list) total += lin->out_features;
  CHECK(total == 7);
  CHECK(list.parameter_count() == 4 + 2 + 10);
  list.eval();
  CHECK_FALSE(list[0]->is_training());
}
