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
