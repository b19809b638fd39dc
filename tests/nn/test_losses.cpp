// The losses against values computed by hand: cross_entropy over class indices (reductions,
// ignore_index, label smoothing, extra dims, huge logits) and mse_loss; then gradchecks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;
using F::CrossEntropyOptions;
using F::Reduction;
using namespace nntest;  // the helpers of nn_helpers.h

namespace {

// -log softmax(row)[c] = logsumexp(row) - row[c], with plain doubles.
double nll(const std::vector<double>& row, int64_t c) {
  double m = *std::max_element(row.begin(), row.end());
  double s = 0.0;
  for (double v : row) s += std::exp(v - m);
  return m + std::log(s) - row[static_cast<size_t>(c)];
}

// The smoothed loss: (1-ε)·nll(target) + ε · mean over classes of nll(c).
double smoothed(const std::vector<double>& row, int64_t c, double eps) {
  double uniform = 0.0;
  for (size_t k = 0; k < row.size(); ++k) uniform += nll(row, static_cast<int64_t>(k));
  return (1.0 - eps) * nll(row, c) + eps * uniform / static_cast<double>(row.size());
}

const std::vector<std::vector<double>> kRows{{1, 2, 3}, {1, 0, -1}, {0.5, 0.5, 0.5}};

Tensor logits() { return tensor({{1, 2, 3}, {1, 0, -1}, {0.5, 0.5, 0.5}}, kFloat64); }
Tensor targets(std::vector<int64_t> t) {
  Shape shape{static_cast<int64_t>(t.size())};
  return tensor(t, shape);
}

CrossEntropyOptions with(Reduction r, int64_t ignore = -100, double smoothing = 0.0) {
  return CrossEntropyOptions().reduction(r).ignore_index(ignore).label_smoothing(smoothing);
}

}  // namespace

TEST_CASE("cross_entropy with reductions none and sum and mean") {
  const double l0 = nll(kRows[0], 2), l1 = nll(kRows[1], 0), l2 = nll(kRows[2], 1);
  CHECK(l2 == doctest::Approx(std::log(3.0)));  // equal logits: log C
  Tensor t = targets({2, 0, 1});
  Tensor none = F::cross_entropy(logits(), t, with(Reduction::None));
  CHECK(none.shape() == Shape{3});
  check_values(none, {l0, l1, l2});
  check_values(F::cross_entropy(logits(), t, with(Reduction::Sum)), {l0 + l1 + l2});
  check_values(F::cross_entropy(logits(), t), {(l0 + l1 + l2) / 3.0});  // mean is the default
  // Float32 logits give a float32 loss of the same value.
  Tensor f32 = F::cross_entropy(logits().to(kFloat32), t);
  CHECK(f32.dtype() == kFloat32);
  CHECK(f32.item() == doctest::Approx((l0 + l1 + l2) / 3.0).epsilon(1e-6));
  // A single (C) row with a 0-d target.
  Tensor one = F::cross_entropy(tensor({1.0, 2.0, 3.0}, kFloat64), scalar_tensor(0, kInt64));
  check_values(one, {nll(kRows[0], 0)});
}

TEST_CASE("cross_entropy ignore_index drops targets and averages over the rest") {
  const double l0 = nll(kRows[0], 2), l2 = nll(kRows[2], 1);
  Tensor t = targets({2, -100, 1});  // the default ignore_index
  check_values(F::cross_entropy(logits(), t, with(Reduction::None)), {l0, 0.0, l2});
  check_values(F::cross_entropy(logits(), t, with(Reduction::Sum)), {l0 + l2});
  check_values(F::cross_entropy(logits(), t), {(l0 + l2) / 2.0});
  // A custom ignore_index that is a real class.
  Tensor u = targets({2, 0, 1});
  check_values(F::cross_entropy(logits(), u, with(Reduction::Mean, 1)), {(l0 + nll(kRows[1], 0)) / 2.0});
  // Ignored rows get no gradient.
  Tensor x = logits().requires_grad_();
  F::cross_entropy(x, t).backward();
  check_values(x.grad().select(0, 1), {0, 0, 0});
  // Every target ignored: the mean is 0/0, as in PyTorch.
  CHECK(std::isnan(F::cross_entropy(logits(), targets({-100, -100, -100})).item()));
}

TEST_CASE("cross_entropy label_smoothing mixes in the uniform distribution") {
  const double eps = 0.2;
  Tensor t = targets({2, 0, 1});
  std::vector<double> expected{smoothed(kRows[0], 2, eps), smoothed(kRows[1], 0, eps), smoothed(kRows[2], 1, eps)};
  check_values(F::cross_entropy(logits(), t, with(Reduction::None, -100, eps)), expected);
  check_values(F::cross_entropy(logits(), t, with(Reduction::Mean, -100, eps)),
               {(expected[0] + expected[1] + expected[2]) / 3.0});
  // With an ignored row as well: the mean is over the two kept rows.
  check_values(F::cross_entropy(logits(), targets({2, -100, 1}), with(Reduction::Mean, -100, eps)),
               {(expected[0] + expected[2]) / 2.0});
  // ε = 1 is the uniform target: the same loss whatever the class.
  Tensor all = F::cross_entropy(logits(), targets({0, 1, 2}), with(Reduction::None, -100, 1.0));
  check_values(all, {smoothed(kRows[0], 2, 1.0), smoothed(kRows[1], 0, 1.0), std::log(3.0)});
  CHECK(contains(error_message([&] { F::cross_entropy(logits(), t, with(Reduction::Mean, -100, 1.5)); }),
                 "label_smoothing"));
}

// Without label smoothing, cross_entropy takes log_softmax and gather as one kernel each way
// (autograd/fast/log_softmax_nll.h; its bits against the two ops: tests/autograd/test_fast_forms.cpp),
// and so gives the loss and gradient that log_softmax then gather give. Label smoothing, which
// reads the whole log_softmax, and reference mode take the two ops.
TEST_CASE("cross_entropy takes the fused log_softmax and gather where it can, with their numbers") {
  Generator gen(8);
  Tensor x = randn({6, 2, 40}, kFloat32, gen) * 3.0;  // (N, C, d): the class dim moved last first
  Tensor t = randint(0, 2, {6, 40}, gen);
  t.narrow(0, 1, 1).fill_(-100.0);  // a row of ignored targets
  auto kernels_run = [&](const CrossEntropyOptions& options, bool reference) {
    ReferenceModeGuard mode(reference);
    Tensor leaf = x.detach().requires_grad_();
    const bool profiling = profile::enabled();  // (CPPGRAD_PROFILE=1 keeps its profile on)
    profile::set_enabled(true);
    profile::reset();
    Tensor loss = F::cross_entropy(leaf, t, options);
    (loss.dim() == 0 ? loss : loss.sum()).backward();
    std::vector<std::string> names;
    for (const profile::Entry& e : profile::entries()) names.push_back(e.name);
    profile::set_enabled(profiling);
    auto ran = [&](const char* name) { return std::find(names.begin(), names.end(), name) != names.end(); };
    return std::make_tuple(ran("log_softmax_nll") && ran("log_softmax_nll_backward"), ran("log_softmax"),
                           loss.detach(), leaf.grad());
  };
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    auto [fused, two_ops, loss, grad] = kernels_run(with(r), false);
    CHECK(fused);
    CHECK_FALSE(two_ops);
    // The same numbers as the two ops: label smoothing's formula at ε → 0 is not the same ops, so
    // the reference is log_softmax then gather written out here.
    Tensor leaf = x.detach().requires_grad_();
    Tensor flat = leaf.permute({0, 2, 1}).reshape({-1, 2});
    Tensor flat_t = t.reshape({-1});
    Tensor valid = flat_t.ne(scalar_tensor(-100.0, kInt64));
    Tensor nll = -flat.log_softmax(1).gather(1, where(valid, flat_t, zeros({}, kInt64)).unsqueeze(1)).squeeze(1);
    Tensor per_row = nll.masked_fill(valid.logical_not(), 0.0);
    Tensor expected = r == Reduction::None ? per_row.reshape(t.shape())
                      : r == Reduction::Sum ? per_row.sum()
                                            : per_row.sum() / static_cast<double>(valid.sum().item<int64_t>());
    (r == Reduction::None ? expected.sum() : expected).backward();
    CHECK(max_abs_diff(loss, expected.detach()) == 0.0);
    CHECK(max_abs_diff(grad, leaf.grad()) == 0.0);
  }
  CHECK_FALSE(std::get<0>(kernels_run(with(Reduction::Mean, -100, 0.1), false)));
  CHECK(std::get<1>(kernels_run(with(Reduction::Mean, -100, 0.1), false)));
  CHECK_FALSE(std::get<0>(kernels_run(with(Reduction::Mean), true)));
  // Its backward reads the logits: changing them in place before backward() is refused.
  Tensor scaled = randn({4, 10}, kFloat32, gen).requires_grad_() * 1.0;
  Tensor loss = F::cross_entropy(scaled, tensor({1, 2, 3, 4}, kInt64));
  scaled.add_(full({}, 1.0, kFloat32));
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("modified by an in-place operation"), Error);
}

TEST_CASE("cross_entropy over (N C d) logits with (N d) targets") {
  // logits[n, :, j] is the row for target[n, j].
  Tensor x = tensor({{{1, -1}, {2, 0}, {3, 1}}, {{0, 4}, {0, 5}, {0, 6}}}, kFloat64);  // (2, 3, 2)
  Tensor t = tensor(std::vector<int64_t>{0, 2, 1, -100}, {2, 2});
  Tensor none = F::cross_entropy(x, t, with(Reduction::None));
  CHECK(none.shape() == Shape{2, 2});
  const double a = nll({1, 2, 3}, 0), b = nll({-1, 0, 1}, 2), c = nll({0, 0, 0}, 1);
  check_values(none, {a, b, c, 0.0});
  check_values(F::cross_entropy(x, t), {(a + b + c) / 3.0});
  std::string msg = error_message([&] { F::cross_entropy(x, targets({0, 1})); });
  CHECK(contains(msg, "cross_entropy"));
  CHECK(contains(msg, "[2,3,2]"));
  CHECK(contains(msg, "[2,2]"));
}

TEST_CASE("cross_entropy is stable for huge logits") {
  Tensor x = tensor({{1e4, -1e4, 0.0}, {-1e4, -1e4, 1e4}}, kFloat64).requires_grad_();
  Tensor loss = F::cross_entropy(x, targets({1, 2}), with(Reduction::None));
  check_values(loss, {2e4, 0.0});  // -log p = 2e4 exactly: no log(0) = inf
  F::cross_entropy(x, targets({1, 2})).backward();
  CHECK(nntest::all_finite(x.grad()));
  // d/dx of the mean loss: (softmax - one_hot) / 2
  check_values(x.grad(), {0.5, -0.5, 0, 0, 0, 0});
  // float32 as well
  Tensor y = tensor({{1e4, -1e4, 0.0}}, kFloat32).requires_grad_();
  Tensor l32 = F::cross_entropy(y, targets({1}), with(Reduction::Mean, -100, 0.1));
  CHECK(std::isfinite(l32.item()));
  l32.backward();
  CHECK(nntest::all_finite(y.grad()));
}

TEST_CASE("cross_entropy rejects bad targets") {
  CHECK(contains(error_message([&] { F::cross_entropy(logits(), targets({0, 3, 1})); }), "out of range"));
  CHECK(contains(error_message([&] { F::cross_entropy(logits(), targets({0, -2, 1})); }), "out of range"));
  CHECK(contains(error_message([&] { F::cross_entropy(logits(), ones({3})); }), "int64"));
}

TEST_CASE("mse_loss with reductions") {
  Tensor a = tensor({{1, 2}, {3, 4}}, kFloat64);
  Tensor b = tensor({{0, 2}, {5, 1}}, kFloat64);
  check_values(F::mse_loss(a, b, Reduction::None), {1, 0, 4, 9});
  check_values(F::mse_loss(a, b, Reduction::Sum), {14});
  check_values(F::mse_loss(a, b), {3.5});
  Tensor x = a.clone().requires_grad_();
  F::mse_loss(x, b).backward();
  check_values(x.grad(), {0.5, 0, -1, 1.5});  // 2(a - b) / 4
  std::string msg = error_message([&] { F::mse_loss(a, ones({4}, kFloat64)); });
  CHECK(contains(msg, "mse_loss"));
  CHECK(contains(msg, "[2,2]"));
  // Integers are refused by name, as PyTorch has no integer mse ("not implemented for 'Long'").
  CHECK(contains(error_message([&] { F::mse_loss(a.to(kInt64), b.to(kInt64)); }),
                 "mse_loss: input and target must be floating point, got int64 and int64"));
}

TEST_CASE("gradcheck cross_entropy in every mode") {
  Tensor x = randn64({4, 5}, 21, true);
  Tensor t = targets({4, 0, 2, 2});
  Tensor t_ignored = targets({4, 7, 2, 7});  // ignore_index 7, not a class
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], t, with(r)); }, {x}));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], t, with(r, -100, 0.15)); },
                    {x}));
    CHECK(gradcheck(
        [&](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], t_ignored, with(r, 7, 0.3)); }, {x}));
  }
  Tensor x3 = randn64({2, 3, 4}, 22, true);  // (N, C, d)
  Tensor t3 = tensor(std::vector<int64_t>{0, 1, 2, -100, 2, 2, 1, 0}, {2, 4});
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], t3, with(Reduction::Mean, -100, 0.1)); },
                  {x3}));
}

TEST_CASE("gradcheck mse_loss for both arguments") {
  Tensor a = randn64({3, 4}, 23, true);
  Tensor b = randn64({3, 4}, 24, true);
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None})
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return F::mse_loss(in[0], in[1], r); }, {a, b}));
}
