// The fused ops the nn layers use (autograd/ops_nn.cpp): layer_norm and masked_softmax. Each is
// checked three ways: against the same math written with plain ops, by gradcheck (the fused
// backward kernel) and by gradgradcheck (autograd differentiating the reference, under
// create_graph).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "cppgrad.h"
#include "helpers.h"
#include "tensor/kernels.h"

using namespace cppgrad;
using test::leaf;
using test::transposed;
using Inputs = std::vector<Tensor>;

namespace {

// LayerNorm over the last `k` dims, written with separate ops.
Tensor layer_norm_by_parts(const Tensor& x, int64_t k, const Tensor& w, const Tensor& b, double eps) {
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  Tensor centred = x - x.mean(dims, true);
  Tensor y = centred * ((centred * centred).mean(dims, true) + eps).rsqrt();
  if (w.defined()) y = y * w;
  if (b.defined()) y = y + b;
  return y;
}

const double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("layer_norm: matches the op-by-op formula, with and without affine, over one or two dims") {
  const Tensor x = leaf({2, 3, 4}, 7000);
  const Tensor w = leaf({4}, 7001), b = leaf({4}, 7002);
  CHECK(test::allclose(layer_norm(x, 1, w, b, 1e-5), layer_norm_by_parts(x, 1, w, b, 1e-5), 1e-12, 1e-12));
  CHECK(test::allclose(layer_norm(x, 1, {}, {}, 1e-5), layer_norm_by_parts(x, 1, {}, {}, 1e-5), 1e-12, 1e-12));
  const Tensor w2 = leaf({3, 4}, 7003);
  CHECK(test::allclose(layer_norm(x, 2, w2, {}, 0.1), layer_norm_by_parts(x, 2, w2, {}, 0.1), 1e-12, 1e-12));
  CHECK(test::allclose(layer_norm(transposed(leaf({4, 3}, 7004)), 1, {}, b, 1e-5),
                       layer_norm_by_parts(transposed(leaf({4, 3}, 7004)), 1, {}, b, 1e-5), 1e-12, 1e-12));
}

TEST_CASE("gradcheck layer_norm: affine, no affine, weight only, two normalised dims, strided input") {
  const Tensor x = leaf({2, 3, 4}, 7010), w = leaf({4}, 7011), b = leaf({4}, 7012);
  CHECK(gradcheck([](const Inputs& in) { return layer_norm(in[0], 1, in[1], in[2], 1e-5); }, {x, w, b}));
  CHECK(gradcheck([](const Inputs& in) { return layer_norm(in[0], 1, {}, {}, 1e-5); }, {x}));
  CHECK(gradcheck([](const Inputs& in) { return layer_norm(in[0], 1, in[1], {}, 1e-5); }, {x.detach(), w}));
  CHECK(gradcheck([](const Inputs& in) { return layer_norm(in[0], 2, in[1], {}, 1e-3); }, {x, leaf({3, 4}, 7013)}));
  CHECK(gradcheck([](const Inputs& in) { return layer_norm(in[0], 1, in[1], in[2], 1e-5); },
                  {transposed(leaf({4, 5}, 7014)), leaf({4}, 7015), b}));
  CHECK(gradgradcheck([](const Inputs& in) { return layer_norm(in[0], 1, in[1], in[2], 1e-5); },
                      {leaf({2, 4}, 7016), w, b}));
}

TEST_CASE("layer_norm: errors name the op and the shapes") {
  const Tensor x = leaf({2, 4}, 7020);
  CHECK_THROWS_WITH_AS(layer_norm(x, 1, leaf({3}, 1), {}, 1e-5), doctest::Contains("layer_norm"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, 3, {}, {}, 1e-5), doctest::Contains("[2,4]"), Error);
}

TEST_CASE("masked_softmax: bool, float and causal masks match softmax of the masked scores") {
  const Tensor scores = leaf({2, 3, 4}, 7030);
  const Tensor hide = test::mask({{0, 0, 0, 1}, {0, 1, 0, 0}, {0, 0, 0, 0}});  // (3, 4), broadcast over the batch
  Tensor expected = (scores * 0.5).masked_fill(hide, -kInf).softmax(-1);
  CHECK(test::allclose(masked_softmax(scores, hide, false, 0.5), expected, 1e-14, 1e-12));
  const Tensor added = leaf({2, 1, 4}, 7031);
  CHECK(test::allclose(masked_softmax(scores, added, false, 0.5), (scores * 0.5 + added).softmax(-1), 1e-14, 1e-12));
  Tensor causal_hide = arange(4.0).reshape({1, 4}).gt(arange(3.0).reshape({3, 1}));
  CHECK(test::allclose(masked_softmax(scores, {}, true, 1.0), scores.masked_fill(causal_hide, -kInf).softmax(-1),
                       1e-14, 1e-12));
}

TEST_CASE("masked_softmax: a row with every key hidden is zeros with finite gradients") {
  const Tensor scores = leaf({2, 3}, 7040);
  const Tensor hide = test::mask({{1, 1, 1}, {0, 1, 0}});
  Tensor p = masked_softmax(scores, hide, false, 1.0);
  CHECK(test::values(p.select(0, 0)) == std::vector<double>{0, 0, 0});
  (p * leaf({2, 3}, 7041).detach()).sum().backward();
  for (double g : test::values(scores.grad())) CHECK(std::isfinite(g));
  CHECK(test::values(scores.grad().select(0, 0)) == std::vector<double>{0, 0, 0});
}

// NaN must reach the gradient (where anomaly mode can see it); only a fully masked row has a
// zero gradient.
TEST_CASE("softmax, log_softmax and masked_softmax: a NaN row has a NaN gradient, a masked row a zero one") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  auto run = [&](const std::function<Tensor(const Tensor&)>& f) {
    Tensor x = tensor({{nan, nan}, {-inf, -inf}, {0.5, 1.5}}, kFloat64).requires_grad_();
    (f(x) * tensor({{1.0, 2.0}, {3.0, 4.0}, {5.0, 6.0}}, kFloat64)).sum().backward();
    return std::make_pair(test::values(f(x.detach())), test::values(x.grad()));
  };
  for (const char* name : {"softmax", "masked_softmax", "log_softmax"}) {
    CAPTURE(name);
    const std::string op = name;
    auto [y, g] = run([&](const Tensor& x) {
      if (op == "softmax") return x.softmax(-1);
      if (op == "log_softmax") return x.log_softmax(-1);
      return masked_softmax(x, Tensor(), false, 1.0);
    });
    CHECK((std::isnan(y[0]) && std::isnan(y[1])));  // NaN row: NaN values
    CHECK((std::isnan(g[0]) && std::isnan(g[1])));  // and NaN gradients
    if (op != "log_softmax") {
      CHECK(y[2] == 0.0);  // fully masked row: zeros
      CHECK(y[3] == 0.0);
      CHECK(g[2] == 0.0);  // with a zero gradient
      CHECK(g[3] == 0.0);
    } else {
      CHECK(y[2] == -inf);  // log_softmax of an all -inf row is -inf
      CHECK(y[3] == -inf);
    }
    CHECK((std::isfinite(g[4]) && std::isfinite(g[5])));  // the ordinary row is untouched
  }
  // Anomaly mode now sees the NaN row and names the op.
  AnomalyModeGuard anomaly;
  Tensor x = tensor({{nan, nan}, {0.5, 1.5}}, kFloat64).requires_grad_();
  std::string e = test::error_message([&] { (x.softmax(-1) * 2.0).sum().backward(); });
  CHECK(test::contains(e, "anomaly"));
}

TEST_CASE("gradcheck masked_softmax: scores and a float mask, bool and causal masks, and the second derivative") {
  const Tensor scores = leaf({2, 3, 4}, 7050), added = leaf({3, 4}, 7051);
  const Tensor hide = test::mask({{0, 0, 1, 0}, {1, 1, 1, 1}, {0, 0, 0, 0}});  // with a fully hidden row
  CHECK(gradcheck([](const Inputs& in) { return masked_softmax(in[0], in[1], false, 0.7); }, {scores, added}));
  CHECK(gradcheck([&](const Inputs& in) { return masked_softmax(in[0], hide, false, 0.7); }, {scores}));
  CHECK(gradcheck([](const Inputs& in) { return masked_softmax(in[0], {}, true, 1.0); }, {scores}));
  CHECK(gradcheck([](const Inputs& in) { return masked_softmax(in[0].mT(), {}, true, 1.0); }, {leaf({2, 4, 3}, 7052)}));
  CHECK(gradgradcheck([](const Inputs& in) { return masked_softmax(in[0], in[1], true, 0.7); }, {scores, added}));
}

TEST_CASE("gradcheck softmax along an inner dim uses the same backward kernel") {
  CHECK(gradcheck([](const Inputs& in) { return in[0].softmax(1); }, {leaf({2, 3, 4}, 7060)}));
  CHECK(gradcheck([](const Inputs& in) { return in[0].softmax(0); }, {transposed(leaf({3, 4}, 7061))}));
}

TEST_CASE("dropout: one pass gives x times the mask dropout_mask makes from the same generator state") {
  const Tensor x = leaf({4, 50}, 7070);
  Generator a(5), b(5);
  Tensor y = dropout(x, 0.3, a);
  Tensor mask = kernels::dropout_mask(x.shape(), x.dtype(), 0.3, b);
  CHECK(test::allclose(y, x * mask, 0.0, 0.0));
  int64_t dropped = 0;
  for (double m : test::values(mask)) {
    CHECK((m == 0.0 || std::abs(m - 1.0 / 0.7) < 1e-12));
    dropped += m == 0.0;
  }
  CHECK(dropped > 30);  // about 60 of 200
  CHECK(dropped < 90);
  CHECK_THROWS_AS(dropout(x, 1.0, a), Error);
}

TEST_CASE("gradcheck dropout: the gradient is the same mask, and so is its second derivative") {
  // A fresh generator per call: every evaluation draws the same mask.
  auto f = [](const Inputs& in) {
    Generator gen(9);
    return dropout(in[0], 0.4, gen);
  };
  CHECK(gradcheck(f, {leaf({3, 7}, 7080)}));
  CHECK(gradcheck(f, {transposed(leaf({7, 3}, 7081))}));
  CHECK(gradgradcheck(f, {leaf({3, 7}, 7082)}));
}

TEST_CASE("relu_dropout: the numbers of dropout(relu(x)) from the same generator state, both ways") {
  // Bit for bit, forward and backward, float32 and float64, with zeros and negatives in x, a
  // transposed input, and a gradient with a NaN on a dropped element (NaN · 0 stays NaN, as in
  // the two ops) and on an element relu cuts (0, as relu's backward gives).
  for (DType dtype : {kFloat32, kFloat64}) {
    Generator g3(3), g4(4);
    Tensor base = randn({40, 33}, dtype, g3);
    base.slice(1, 0, 5).zero_();
    Tensor grad = randn({40, 33}, dtype, g4).mT();
    auto run = [&](bool fused) {
      ReferenceModeGuard mode(!fused);  // the fused kernel, or the reference ops (dropout's own loop included)
      Tensor x = base.mT().detach().requires_grad_();
      Generator gen(17);
      Tensor y = fused ? relu_dropout(x, 0.3, gen) : dropout(x.relu(), 0.3, gen);
      y.backward(grad);
      return std::pair{test::values(y), test::values(x.grad())};
    };
    auto [y_fused, dx_fused] = run(true);
    auto [y_plain, dx_plain] = run(false);
    CHECK(y_fused == y_plain);
    CHECK(dx_fused == dx_plain);
    int64_t zeros = 0;
    for (double v : y_fused) zeros += v == 0.0;
    CHECK(zeros > 660);  // about half cut by relu, then a third of the rest dropped: ~880 of 1320
    CHECK(zeros < 1100);
  }
  Tensor x = tensor({-1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0}, TensorOptions(kFloat64).requires_grad());
  Generator a(5), b(5);
  Tensor mask = kernels::dropout_mask(x.shape(), kFloat64, 0.5, a);
  Tensor y = relu_dropout(x, 0.5, b);
  const std::vector<double> m = test::values(mask);
  std::vector<double> g(8, 1.0);
  size_t dropped = 0;
  for (size_t i = 1; i < 8; ++i) dropped = m[i] == 0.0 ? i : dropped;
  REQUIRE(dropped > 0);  // some positive element dropped: its gradient is NaN · 0
  g[dropped] = NAN;
  g[0] = NAN;  // x[0] < 0: relu's cut gives 0 whatever the mask
  y.backward(tensor(g, {8}).to(kFloat64));
  CHECK(std::isnan(test::values(x.grad())[dropped]));
  CHECK(test::values(x.grad())[0] == 0.0);
  CHECK_THROWS_AS(relu_dropout(x, 1.0, a), Error);
  CHECK_THROWS_AS(relu_dropout(tensor(std::vector<int64_t>{1, 2}, {2}), 0.5, a), Error);
}

TEST_CASE("gradcheck relu_dropout: its kernel and its create_graph fallback") {
  auto f = [](const Inputs& in) {
    Generator gen(9);  // the same mask at every evaluation
    return relu_dropout(in[0], 0.4, gen);
  };
  CHECK(gradcheck(f, {test::away_from_zero_leaf({3, 7}, 7083)}));
  CHECK(gradcheck(f, {transposed(test::away_from_zero_leaf({7, 3}, 7084))}));
  CHECK(gradgradcheck(f, {test::away_from_zero_leaf({3, 7}, 7085)}));
}
