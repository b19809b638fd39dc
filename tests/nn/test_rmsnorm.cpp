// RMSNorm and F::rms_norm (torch.nn.RMSNorm's semantics): values by hand, eps = None as the
// dtype's machine epsilon, gradcheck and gradgradcheck in float64, bad arguments.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
namespace F = cppgrad::nn::functional;
using namespace nntest;  // the helpers of nn_helpers.h

TEST_CASE("RMSNorm divides each row by its root mean square and scales by weight") {
  Tensor x = tensor({{3, 4}, {1, -1}}, kFloat64);
  const double eps = 0.5;
  // row 0: mean(x²) = 12.5; row 1: 1
  check_values(F::rms_norm(x, {2}, {}, eps), {3 / std::sqrt(13.0), 4 / std::sqrt(13.0), 1 / std::sqrt(1.5),
                                              -1 / std::sqrt(1.5)});
  RMSNorm norm({2}, eps);
  norm.to(kFloat64);
  set_values(norm.weight, {2, -1});
  check_values(norm.forward(x), {6 / std::sqrt(13.0), -4 / std::sqrt(13.0), 2 / std::sqrt(1.5), 1 / std::sqrt(1.5)});
  CHECK(norm.named_parameters().size() == 1);
  CHECK(norm.named_parameters()[0].first == "weight");
  CHECK(norm.extra_repr() == "[2], eps=0.5, elementwise_affine=true");
  CHECK(RMSNorm({4}, std::nullopt, false).named_parameters().empty());
  CHECK(RMSNorm({4}).extra_repr() == "[4], eps=None, elementwise_affine=true");

  // Two normalised dims: the mean runs over both, (2, 2, 2) rows of 4.
  Tensor y = tensor(std::vector<double>{1, 2, 3, 4, -1, 0, 0, 1}, Shape{2, 2, 2}).to(kFloat64);
  const double r0 = std::sqrt(30.0 / 4 + eps), r1 = std::sqrt(2.0 / 4 + eps);
  check_values(F::rms_norm(y, {2, 2}, {}, eps), {1 / r0, 2 / r0, 3 / r0, 4 / r0, -1 / r1, 0, 0, 1 / r1});
}

TEST_CASE("RMSNorm's default eps is the machine epsilon of the input's dtype, as PyTorch's eps=None") {
  // mean(x²) = 1e-16 is below float64's epsilon (2.2e-16), so eps shows in the result.
  Tensor tiny64 = full({1, 1}, 1e-8, kFloat64);
  const double e64 = std::numeric_limits<double>::epsilon();
  check_values(F::rms_norm(tiny64, {1}), {1e-8 / std::sqrt(1e-16 + e64)}, 1e-14);
  // float32's epsilon is 1.19e-7: mean(x²) = 1e-8 gives 1e-4 / √(1e-8 + 1.19e-7).
  Tensor tiny32 = full({1, 1}, 1e-4, kFloat32);
  const double e32 = std::numeric_limits<float>::epsilon();
  CHECK(F::rms_norm(tiny32, {1}).item() == doctest::Approx(1e-4 / std::sqrt(1e-8 + e32)).epsilon(1e-6));
  CHECK(RMSNorm({1}).forward(tiny32).item() == doctest::Approx(1e-4 / std::sqrt(1e-8 + e32)).epsilon(1e-6));
}

TEST_CASE("gradcheck and gradgradcheck rms_norm: with and without weight, over one and two dims") {
  Tensor x = randn64({3, 2, 4}, 7101, true), w = randn64({4}, 7102, true), w2 = randn64({2, 4}, 7103, true);
  auto with_weight = [&](const std::vector<Tensor>& in) { return F::rms_norm(in[0], {4}, in[1], 1e-3); };
  CHECK(gradcheck(with_weight, {x, w}));
  CHECK(gradgradcheck(with_weight, {x, w}));
  auto plain = [&](const std::vector<Tensor>& in) { return F::rms_norm(in[0], {4}); };
  CHECK(gradcheck(plain, {x}));
  CHECK(gradgradcheck(plain, {x}));
  auto two_dims = [&](const std::vector<Tensor>& in) { return F::rms_norm(in[0], {2, 4}, in[1], 0.1); };
  CHECK(gradcheck(two_dims, {x, w2}));
  CHECK(gradgradcheck(two_dims, {x, w2}));
  RMSNorm norm({4});
  norm.to(kFloat64);
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return norm.forward(in[0]); }, {x, norm.weight}));
}

TEST_CASE("rms_norm's one-pass kernel equals its reference (the formula as ops), values and gradients") {
  for (bool affine : {true, false}) {
    for (int64_t dims : {1, 2}) {
      INFO("weight ", affine, ", over the last ", dims, " dims");
      Tensor x0 = randn64({3, 4, 6}, 7710);
      const Shape shape = dims == 1 ? Shape{6} : Shape{4, 6};
      Tensor w0 = affine ? randn64(shape, 7711) : Tensor();
      Tensor G = randn64({3, 4, 6}, 7712);
      auto run = [&](bool reference) {
        ReferenceModeGuard mode(reference);
        Tensor x = x0.detach().requires_grad_(), w = affine ? w0.detach().requires_grad_() : Tensor();
        Tensor y = F::rms_norm(x, shape, w, 1e-6);
        CHECK((y.grad_fn()->name() == "RmsNormBackward") == !reference);
        (y * G).sum().backward();
        return std::vector<Tensor>{y.detach(), x.grad(), affine ? w.grad() : zeros({1}, kFloat64)};
      };
      const auto fast = run(false), reference = run(true);
      // The same float64 sums of 6 to 24 order-1 terms in another order: rounding, under 1e-14.
      for (size_t i = 0; i < fast.size(); ++i) CHECK(max_abs_diff(fast[i], reference[i]) < 1e-14);
    }
  }
}

TEST_CASE("rms_norm refuses shapes that do not fit, naming the op and the shapes") {
  Tensor x = zeros({2, 3}, kFloat64);
  std::string msg = error_message([&] { F::rms_norm(x, {4}); });
  CHECK(contains(msg, "rms_norm"));
  CHECK(contains(msg, "[2,3]"));
  CHECK(contains(msg, "[4]"));
  msg = error_message([&] { F::rms_norm(x, {3}, ones({2}, kFloat64)); });
  CHECK(contains(msg, "rms_norm: weight [2]"));
  msg = error_message([&] { F::rms_norm(x, {3}, {}, -1.0); });
  CHECK(contains(msg, "eps -1"));
  msg = error_message([&] { RMSNorm({3}).forward(zeros({3, 5})); });
  CHECK(contains(msg, "[3,5]"));
  CHECK(contains(error_message([&] { RMSNorm({0}); }), "RMSNorm"));
}
