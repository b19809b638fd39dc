// The answers to the exercises at the end of each page of the tour (docs/tour/), computed:
// a page that states an answer states one that this file checks. One TEST_CASE per exercise,
// named "exercise <page>.<number>".
#include <doctest/doctest.h>

#include <cmath>

#include "lessons/lessons.h"
#include "lessons/measure.h"

using namespace cppgrad;
using namespace lessons;
namespace F = cppgrad::nn::functional;

namespace {
// Every element of t equals the expected list (row-major) to 1e-12.
bool mismatch_free(const Tensor& t, const std::vector<double>& expected) {
  std::vector<double> got = values(t);
  if (got.size() != expected.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - expected[i]) <= 1e-12)) return false;
  return true;
}
}  // namespace

// ---- page 4b: the backward of attention -------------------------------------------------------

TEST_CASE("exercise 4b.1: head 1's ds for query row 0 of lesson 7's trace, by hand") {
  const Lesson7 r = run_lesson7();
  Tensor p, dp, ds;
  for (const auto& [what, t] : r.trace) {
    if (what.rfind("head 1: p = ", 0) == 0) p = t;
    if (what.rfind("head 1: dp = ", 0) == 0) dp = t;
    if (what.rfind("head 1: ds = ", 0) == 0) ds = t;
  }
  REQUIRE(p.defined());
  REQUIRE(dp.defined());
  REQUIRE(ds.defined());
  // By hand from the row's p and dp: ds_j = p_j (dp_j - Σ_l dp_l p_l).
  std::vector<double> pr = values(p.select(0, 0)), dpr = values(dp.select(0, 0));
  double dot = 0.0;
  for (size_t j = 0; j < 3; ++j) dot += dpr[j] * pr[j];
  const double page[3] = {-0.3890, 0.4099, -0.0209};  // the answer the page gives
  std::vector<double> printed = values(ds.select(0, 0));
  double sum = 0.0;
  for (size_t j = 0; j < 3; ++j) {
    CHECK(pr[j] * (dpr[j] - dot) == doctest::Approx(printed[j]).epsilon(1e-12));
    CHECK(std::abs(printed[j] - page[j]) < 5e-5);  // the page rounds to 4 decimals
    sum += printed[j];
  }
  CHECK(std::abs(sum) < 1e-12);
}

TEST_CASE("exercise 4b.2: softmax backward for p = [0.5, 0.3, 0.2], dp = [1, 0, 0]") {
  Tensor z = tensor({0.5, 0.3, 0.2}, kFloat64).log().detach().requires_grad_();  // softmax(z) = p
  Tensor p = z.softmax(-1);
  (p * tensor({1.0, 0.0, 0.0}, kFloat64)).sum().backward();
  CHECK(mismatch_free(z.grad(), {0.25, -0.15, -0.10}));
}

TEST_CASE("exercise 4b.3: forgetting 1/√d_k in the backward overstates dq by √d_k = 4 at d_k 16") {
  Generator gen(43);
  const int64_t d_k = 16;
  Tensor q = randn({3, d_k}, kFloat64, gen).requires_grad_(), k = randn({5, d_k}, kFloat64, gen);
  Tensor G = randn({3, 5}, kFloat64, gen);
  Tensor p = (q.matmul(k.t()) / std::sqrt(static_cast<double>(d_k))).softmax(-1);
  (p * G).sum().backward();
  NoGradGuard no_grad;
  Tensor ds = p * (G - (G * p).sum({-1}, true));
  Tensor dq_without_scale = ds.matmul(k);
  std::vector<double> wrong = values(dq_without_scale), right = values(q.grad());
  for (size_t i = 0; i < wrong.size(); ++i) CHECK(wrong[i] == doctest::Approx(4.0 * right[i]).epsilon(1e-9));
}

// ---- page 4: attention ----------------------------------------------------------------------

TEST_CASE("exercise 4.1: an inverted all-false mask gives NaN by the textbook, zeros in cppgrad") {
  Generator gen(41);
  const int64_t T = 3, S = 4, d = 8;
  Tensor q = randn({T, d}, kFloat64, gen).requires_grad_(), k = randn({S, d}, kFloat64, gen);
  Tensor v = randn({S, d}, kFloat64, gen);
  Tensor mask = zeros({T, S}, kBool).logical_not();  // hides every key
  Tensor scores = (q.matmul(k.t()) / std::sqrt(static_cast<double>(d))).masked_fill(mask, -INFINITY);
  Tensor e = (scores - scores.max(-1, true).values).exp();
  Tensor textbook = (e / e.sum({-1}, true)).matmul(v);
  CHECK(count_nonfinite(textbook) == textbook.numel());
  auto att = F::scaled_dot_product_attention(q, k, v, mask);
  CHECK(mismatch_free(att.output, std::vector<double>(static_cast<size_t>(T * d), 0.0)));
  att.output.sum().backward();
  CHECK(count_nonfinite(q.grad()) == 0);
}

TEST_CASE("exercise 4.2: the worked example's score products") {
  const int64_t B = 2, T = 5, E = 8, H = 2, d_k = E / H;
  Tensor q = randn({B, H, T, d_k}), k = randn({B, H, T, d_k});
  Tensor scores = q.matmul(k.mT());
  CHECK(scores.shape() == Shape{2, 2, 5, 5});
  const int64_t products = scores.numel() / (T * T);
  CHECK(products == 4);
  CHECK(products * T * T * d_k == 400);  // multiply-adds
  CHECK(B * 1 * T * T * E == 400);       // one head of width E: the same
}

TEST_CASE("exercise 4.3: the query-key cosine survives negating W_Q and W_K") {
  manual_seed(43);
  nn::MultiheadAttention layer(8, 2);
  layer.to(kFloat64);
  NoGradGuard no_grad;
  auto block = [&](int64_t part, int64_t head) { return layer.in_proj_weight.narrow(0, part * 8 + head * 4, 4); };
  auto qk = [&](int64_t head) { return block(0, head).t().matmul(block(1, head)); };  // (8, 8)
  const double before = cosine(qk(0), qk(1));
  Tensor w_q0 = block(0, 0).clone();
  block(0, 0).copy_(-block(0, 0));
  block(1, 0).copy_(-block(1, 0));
  CHECK(cosine(qk(0), qk(1)) == doctest::Approx(before).epsilon(1e-12));
  CHECK(cosine(w_q0, block(0, 0)) == doctest::Approx(-1.0).epsilon(1e-12));
}

// ---- page 1: tensors and strides --------------------------------------------------------------

TEST_CASE("exercise 1.1: shape, strides and offset of a transpose") {
  Tensor a = arange(24).reshape({2, 3, 4});
  Tensor t = a.transpose(0, 2);
  CHECK(t.shape() == Shape{4, 3, 2});
  CHECK(t.strides() == Strides{1, 4, 12});
  CHECK(1 * t.strides()[0] + 2 * t.strides()[1] + 0 * t.strides()[2] == 9);
  CHECK(t.at<int64_t>({1, 2, 0}) == 9);  // arange gives int64
}

TEST_CASE("exercise 1.2: view refuses the transpose, reshape copies it") {
  Tensor a = arange(24).reshape({2, 3, 4});
  CHECK_THROWS_AS(a.transpose(0, 2).view({24}), Error);
  Tensor r = a.transpose(0, 2).reshape({24});
  CHECK(r.data<int64_t>() != a.data<int64_t>());
  CHECK(r.is_contiguous());
}

TEST_CASE("exercise 1.3: a 0-d float64 operand promotes an int64 tensor, not a float32 one") {
  CHECK((tensor({1.5, 2}) + full({}, 0.25, kFloat64)).dtype() == kFloat32);
  CHECK((tensor(std::vector<int64_t>{2, 3}, {2}) + full({}, 0.25, kFloat64)).dtype() == kFloat64);
}

// ---- page 2: the autograd engine -----------------------------------------------------------------

TEST_CASE("page 2 on-ramp: y = a·b + a by the engine") {
  Tensor a = tensor({2.0}, TensorOptions(kFloat64).requires_grad());
  Tensor b = tensor({3.0}, TensorOptions(kFloat64).requires_grad());
  Tensor y = a * b + a;
  y.sum().backward();
  CHECK(y.item() == 8.0);
  CHECK(a.grad().item() == 4.0);
  CHECK(b.grad().item() == 2.0);
}

TEST_CASE("exercise 2.1: y = a·b + a·a") {
  Tensor a = tensor({2.0}, TensorOptions(kFloat64).requires_grad());
  Tensor b = tensor({3.0}, TensorOptions(kFloat64).requires_grad());
  (a * b + a * a).sum().backward();
  CHECK(a.grad().item() == 7.0);
  CHECK(b.grad().item() == 2.0);
}

TEST_CASE("exercise 2.2: the graph of b = a + a, c = b + b") {
  Tensor a = tensor({1.0, 2.0}, TensorOptions(kFloat64).requires_grad());
  Tensor b = a + a;
  Tensor c = b + b;
  Tensor s = c.sum();
  // 3 nodes: sum -> add (c) -> add (b); c's add has two edges, both into b's node.
  auto sum_node = s.grad_fn();
  REQUIRE(sum_node != nullptr);
  REQUIRE(sum_node->next.size() == 1);
  auto c_node = sum_node->next[0].node;
  REQUIRE(c_node == c.grad_fn());
  REQUIRE(c_node->next.size() == 2);
  CHECK(c_node->next[0].node == b.grad_fn());
  CHECK(c_node->next[1].node == b.grad_fn());
  for (const auto& e : b.grad_fn()->next) CHECK(e.node == nullptr);  // into a, a leaf
  s.backward();
  CHECK(values(a.grad()) == std::vector<double>{4.0, 4.0});
}

TEST_CASE("exercise 2.3: a second backward through a freed graph throws") {
  Tensor a = tensor({1.0, 2.0}, TensorOptions(kFloat64).requires_grad());
  Tensor loss = (a * a).sum();
  loss.backward();
  CHECK_THROWS_AS(loss.backward(), Error);
}

// ---- page 3: adding an op --------------------------------------------------------------------------

namespace {
// silu(x) = x·sigmoid(x), outside the library, by page 3's recipe. `right` = false drops a term.
Tensor silu_by_hand(const Tensor& x, bool right = true) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x * x.sigmoid();
  }
  // dA = dC ⊙ (s + x·s·(1 - s)),  s = sigmoid(A)
  return autograd::record("silu", out, {x}, {x},
                          [right](const Tensor& g, const autograd::Saved& s) -> autograd::Grads {
                            Tensor sig = s[0].sigmoid();
                            return {right ? g * (sig + s[0] * sig * (1.0 - sig)) : g * sig};
                          });
}
}  // namespace

TEST_CASE("exercise 3.1: silu by the recipe passes gradcheck and gradgradcheck") {
  Generator gen(31);
  Tensor w = randn({3, 4}, kFloat64, gen).requires_grad_();
  auto f = [](const std::vector<Tensor>& in) { return silu_by_hand(in[0]); };
  CHECK(gradcheck(f, {w}));
  CHECK(gradgradcheck(f, {w}));
  CHECK(silu_by_hand(tensor({1.0}, kFloat64)).item() == doctest::Approx(0.7311).epsilon(1e-4));
  // The library's silu row gives the same values to rounding: x·σ(x) here, x / (1 + e⁻ˣ) there.
  std::vector<double> by_hand = values(silu_by_hand(w.detach())), library = values(w.detach().silu());
  for (size_t i = 0; i < by_hand.size(); ++i) CHECK(library[i] == doctest::Approx(by_hand[i]).epsilon(1e-14));
}

TEST_CASE("exercise 3.2: a wrong backward is caught by gradcheck") {
  Generator gen(32);
  Tensor w = randn({3, 4}, kFloat64, gen).requires_grad_();
  CHECK_THROWS_AS(gradcheck([](const std::vector<Tensor>& in) { return silu_by_hand(in[0], false); }, {w}), Error);
}

// ---- page 5: the Transformer layers ------------------------------------------------------------

TEST_CASE("exercise 5.1: the parameters of a small encoder layer") {
  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16));
  CHECK(layer.self_attn->parameter_count() == 288);
  CHECK(layer.linear1->parameter_count() + layer.linear2->parameter_count() == 280);
  CHECK(layer.parameter_count() == 600);
}

TEST_CASE("exercise 5.2: a pre-norm layer with zero blocks is the identity") {
  nn::TransformerEncoderLayer layer(
      nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0).norm_first(true));
  layer.to(kFloat64);
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : layer.named_parameters())
      if (name.rfind("norm", 0) != 0) p.zero_();
  }
  Generator gen(52);
  Tensor x = randn({2, 5, 8}, kFloat64, gen);
  CHECK(max_abs_diff(layer.forward(x), x) == 0.0);
}

// ---- page 6: training -------------------------------------------------------------------------------

TEST_CASE("exercise 6.1 and 6.2: the paper's schedule's peak and decay") {
  Tensor p = zeros({1}).requires_grad_();
  optim::Adam opt({p}, optim::AdamOptions(1.0));
  optim::NoamLR seq2seq_schedule(opt, 128, 200, 0.5);  // lr_at counts steps from 0
  CHECK(seq2seq_schedule.lr_at(199, 1.0) == doctest::Approx(3.125e-3).epsilon(1e-12));
  CHECK(seq2seq_schedule.lr_at(799, 1.0) == doctest::Approx(1.5625e-3).epsilon(1e-12));
  optim::NoamLR lesson4_schedule(opt, 32, 100, 1.0);
  CHECK(lesson4_schedule.lr_at(99, 1.0) == doctest::Approx(0.0177).epsilon(1e-3));
}
