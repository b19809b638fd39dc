// nll_loss, l1_loss, smooth_l1_loss, huber_loss and binary_cross_entropy_with_logits against the
// values torch.nn.functional gives (PyTorch 1.13, float64, on the inputs written here), their
// refusals, and gradchecks.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;
using F::Reduction;
using namespace nntest;

namespace {
Tensor input() { return tensor({{0.5, -1.25, 2.0}, {3.0, 0.1, -0.4}}, kFloat64); }
Tensor target() { return tensor({{0.0, -1.0, 0.25}, {1.0, 0.1, 0.6}}, kFloat64); }
// Logits far out on both sides (20, -30): the stable form neither overflows nor gives 0.
Tensor logits() { return tensor({{0.5, -1.25, 20.0}, {-30.0, 0.1, -0.4}}, kFloat64); }
Tensor labels() { return tensor({{1.0, 0.0, 1.0}, {0.0, 0.3, 1.0}}, kFloat64); }
Tensor log_probs() { return tensor({{0.5, -1.25, 2.0}, {3.0, 0.1, -0.4}, {0.0, 0.0, 1.0}}, kFloat64).log_softmax(1); }
Tensor classes(std::vector<int64_t> t) {
  const Shape shape{static_cast<int64_t>(t.size())};
  return tensor(t, shape);
}
}  // namespace

TEST_CASE("l1, smooth_l1 and huber losses give PyTorch's values") {
  // torch: F.l1_loss(a, b, reduction='none') etc.
  check_values(F::l1_loss(input(), target(), Reduction::None), {0.5, 0.25, 1.75, 2.0, 0.0, 1.0});
  check_values(F::l1_loss(input(), target(), Reduction::Sum), {5.5});
  check_values(F::l1_loss(input(), target()), {0.9166666666666666});
  check_values(F::smooth_l1_loss(input(), target(), Reduction::None), {0.125, 0.03125, 1.25, 1.5, 0.0, 0.5});
  check_values(F::smooth_l1_loss(input(), target()), {0.5677083333333334});
  check_values(F::smooth_l1_loss(input(), target(), Reduction::None, 0.5), {0.25, 0.0625, 1.5, 1.75, 0.0, 0.75});
  check_values(F::smooth_l1_loss(input(), target(), Reduction::Sum, 0.5), {4.3125});
  check_values(F::smooth_l1_loss(input(), target(), Reduction::Sum, 0.0), {5.5});  // beta 0: l1
  check_values(F::huber_loss(input(), target(), Reduction::None, 1.5), {0.125, 0.03125, 1.5, 1.875, 0.0, 0.5});
  check_values(F::huber_loss(input(), target(), Reduction::Mean, 1.5), {0.671875});
  // At x = y the gradient is 0, as PyTorch's (|d|'s subgradient 0).
  Tensor x = input().requires_grad_();
  F::l1_loss(x, target(), Reduction::Sum).backward();
  check_values(x.grad(), {1, -1, 1, 1, 0, -1});
}

TEST_CASE("binary_cross_entropy_with_logits gives PyTorch's values, with weight and pos_weight") {
  check_values(F::binary_cross_entropy_with_logits(logits(), labels(), F::BceWithLogitsOptions().reduction(Reduction::None)),
               {0.4740769841801067, 0.25192908134537295, 2.0611536900435727e-09, 9.348077867343381e-14,
                0.7143966600735708, 0.9130152523999525},
               1e-14);
  check_values(F::binary_cross_entropy_with_logits(logits(), labels()), {0.3922363300100416}, 1e-14);
  check_values(F::binary_cross_entropy_with_logits(logits(), labels(), F::BceWithLogitsOptions().reduction(Reduction::Sum)),
               {2.3534179800602497}, 1e-14);
  const auto weighted = F::BceWithLogitsOptions()
                            .weight(tensor({2.0, 1.0, 0.5}, kFloat64))
                            .pos_weight(tensor({1.0, 3.0, 0.25}, kFloat64))
                            .reduction(Reduction::None);
  check_values(F::binary_cross_entropy_with_logits(logits(), labels(), weighted),
               {0.9481539683602134, 0.25192908134537295, 2.576442112554466e-10, 1.8474111129762605e-13,
                1.1010346561177136, 0.11412690654999406},
               1e-14);
  // float32 logits of ±100 stay finite: no e^100 is formed.
  Tensor far = tensor({100.0, -100.0}, kFloat32);
  check_values(F::binary_cross_entropy_with_logits(far, tensor({0.0, 1.0}, kFloat32), F::BceWithLogitsOptions().reduction(Reduction::None)),
               {100.0, 100.0}, 1e-6);
}

TEST_CASE("nll_loss is cross_entropy's second half, with ignore_index") {
  // torch: F.nll_loss(log_softmax(x, 1), [2, 0, -100])
  const Tensor t = classes({2, 0, -100});
  check_values(F::nll_loss(log_probs(), t, F::NllLossOptions().reduction(Reduction::None)),
               {0.23262198310203266, 0.0847055030198186, 0.0});
  check_values(F::nll_loss(log_probs(), t, F::NllLossOptions().reduction(Reduction::Sum)), {0.31732748612185124});
  check_values(F::nll_loss(log_probs(), t), {0.15866374306092562});  // the mean over the two not ignored
  // cross_entropy of logits is nll_loss of their log_softmax, in (N, C, d) layouts too.
  Tensor x = randn64({2, 3, 4}, 31);
  Tensor t3 = tensor(std::vector<int64_t>{0, 1, 2, 5, 2, 2, 1, 0}, {2, 4});
  check_values(F::nll_loss(x.log_softmax(1), t3, F::NllLossOptions().ignore_index(5)),
               F::cross_entropy(x, t3, F::CrossEntropyOptions().ignore_index(5)).to_vector<double>());
  CHECK(std::isnan(F::nll_loss(log_probs(), classes({-100, -100, -100})).item()));  // a mean of nothing
}

TEST_CASE("the losses refuse what PyTorch refuses, naming themselves") {
  const auto refusal = [](auto f) { return error_message(f); };
  CHECK(contains(refusal([] { F::l1_loss(input(), zeros({3}, kFloat64)); }), "l1_loss: input [2,3] and target [3] differ in shape"));
  CHECK(contains(refusal([] { F::huber_loss(input(), target(), Reduction::Mean, 0.0); }), "huber_loss: delta must be positive, got 0"));
  CHECK(contains(refusal([] { F::smooth_l1_loss(input(), target(), Reduction::Mean, -1.0); }),
                 "smooth_l1_loss: beta must not be negative, got -1"));
  CHECK(contains(refusal([] { F::l1_loss(input().to(kInt64), target().to(kInt64)); }),
                 "l1_loss: input and target must be floating point, got int64 and int64"));
  CHECK(contains(refusal([] {
                   F::binary_cross_entropy_with_logits(logits(), labels(), F::BceWithLogitsOptions().pos_weight(ones({2}, kFloat64)));
                 }),
                 "binary_cross_entropy_with_logits: pos_weight of shape [2] does not broadcast to the input's [2,3]"));
  CHECK(contains(refusal([] {
                   F::binary_cross_entropy_with_logits(logits(), labels(), F::BceWithLogitsOptions().weight(ones({2, 3}, kInt64)));
                 }),
                 "binary_cross_entropy_with_logits: weight must be floating, got int64"));
  CHECK(contains(refusal([] { F::nll_loss(log_probs(), classes({2, 3, 0})); }), "nll_loss: target 3 is out of range for 3 classes"));
  CHECK(contains(refusal([] { F::nll_loss(log_probs(), classes({2, 0})); }), "nll_loss: input [3,3] needs a target of shape [3], got [2]"));
  CHECK(contains(refusal([] { F::nll_loss(log_probs(), tensor({1.0, 0.0, 2.0}, kFloat64)); }),
                 "nll_loss: target must hold int64 class indices, got float64"));
}

TEST_CASE("gradcheck the losses in every reduction") {
  Tensor a = randn64({3, 4}, 32, true);
  Tensor b = randn64({3, 4}, 33, true);
  Tensor probabilities = randn64({3, 4}, 34).sigmoid().requires_grad_();
  Tensor w = randn64({4}, 35).abs().requires_grad_();
  Tensor pw = randn64({4}, 36).abs().requires_grad_();
  Tensor lp = randn64({4, 5}, 37, true);
  Tensor t = classes({4, 0, 9, 2});
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    CAPTURE(static_cast<int>(r));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return F::l1_loss(in[0], in[1], r); }, {a, b}));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return F::smooth_l1_loss(in[0], in[1], r, 0.7); }, {a, b}));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return F::huber_loss(in[0], in[1], r, 0.7); }, {a, b}));
    CHECK(gradcheck(
        [&](const std::vector<Tensor>& in) {
          return F::binary_cross_entropy_with_logits(
              in[0], in[1], F::BceWithLogitsOptions().weight(in[2]).pos_weight(in[3]).reduction(r));
        },
        {a, probabilities, w, pw}));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return F::nll_loss(in[0], t, F::NllLossOptions().ignore_index(9).reduction(r)); },
                    {lp}));
  }
}

TEST_CASE("kaiming_normal_ draws N(0, gain² / fan_in), seeded") {
  Generator gen(6);
  Tensor n = empty({200, 300});
  nn::init::kaiming_normal_(n, 0.0, gen);  // gain √2
  const std::vector<double> v = n.to(kFloat64).to_vector<double>();
  double mean = 0, squares = 0;
  for (double x : v) mean += x / static_cast<double>(v.size());
  for (double x : v) squares += (x - mean) * (x - mean) / static_cast<double>(v.size());
  const double sigma = std::sqrt(2.0 / 300.0);
  CHECK(std::abs(mean) < 0.02 * sigma);
  CHECK(std::sqrt(squares) == doctest::Approx(sigma).epsilon(0.01));
  Tensor again = empty({200, 300});
  Generator same(6);
  nn::init::kaiming_normal_(again, 0.0, same);
  CHECK(again.to_vector<float>() == n.to_vector<float>());
  CHECK(contains(error_message([&] { nn::init::kaiming_normal_(empty({3, 0}), 0.0, gen); }), "kaiming_normal_: fan_in is 0"));
}
