// gradcheck of every differentiable view and copy: the backward of each maps the output's
// gradient back to the input's shape. Each is checked on a contiguous leaf and on a
// non-contiguous one (a transposed leaf); most are followed by a nonlinear op so that the
// gradient arriving at the view is not all ones.
#include <doctest/doctest.h>

#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using test::check1;
using test::leaf;
using test::transposed_leaf;

namespace {
// Leaves for one view test: a contiguous [3,4] and a transposed [3,4] (strides [1,3]).
std::vector<Tensor> both_layouts(uint64_t seed) { return {leaf({3, 4}, seed), transposed_leaf({4, 3}, seed + 1)}; }
}  // namespace

TEST_CASE("gradcheck views: reshape and view and flatten") {
  for (const Tensor& x : both_layouts(1)) {
    CHECK(check1([](const Tensor& a) { return a.reshape({2, 6}) * a.reshape({2, 6}).exp(); }, x));
    CHECK(check1([](const Tensor& a) { return a.reshape({-1}).pow(2); }, x));
    CHECK(check1([](const Tensor& a) { return a.flatten() * 3.0; }, x));
    CHECK(check1([](const Tensor& a) { return a.unsqueeze(0).flatten(1, 2).tanh(); }, x));
  }
  Tensor x = leaf({2, 3, 2}, 3);
  CHECK(check1([](const Tensor& a) { return a.view({6, 2}).sigmoid(); }, x));
  CHECK(check1([](const Tensor& a) { return a.view({3, -1}).t().sigmoid(); }, x));
  CHECK(check1([](const Tensor& a) { return a.flatten(0, 1).exp(); }, x));
  Tensor s = leaf({}, 4);
  CHECK(check1([](const Tensor& a) { return a.flatten() * 2.0; }, s));
  CHECK(check1([](const Tensor& a) { return a.reshape({1, 1}).exp(); }, s));
}

TEST_CASE("gradcheck views: transpose and t and mT and permute") {
  for (const Tensor& x : both_layouts(10)) {
    CHECK(check1([](const Tensor& a) { return a.t().exp(); }, x));
    CHECK(check1([](const Tensor& a) { return a.transpose(0, 1) * a.t(); }, x));
    CHECK(check1([](const Tensor& a) { return a.mT().tanh(); }, x));
  }
  Tensor x = leaf({2, 3, 4}, 12);
  CHECK(check1([](const Tensor& a) { return a.mT().tanh(); }, x));
  CHECK(check1([](const Tensor& a) { return a.transpose(0, 2).exp(); }, x));
  CHECK(check1([](const Tensor& a) { return a.transpose(-1, 0).exp(); }, x));
  CHECK(check1([](const Tensor& a) { return a.permute({2, 0, 1}).tanh(); }, x));
  CHECK(check1([](const Tensor& a) { return a.permute({1, 2, 0}) * a.permute({1, 2, 0}); }, x));
  CHECK(check1([](const Tensor& a) { return a.permute({2, 0, 1}).permute({0, 2, 1}).exp(); }, x));
  CHECK(check1([](const Tensor& a) { return a.permute({-1, 0, 1}).exp(); }, x));
  Tensor v = leaf({3}, 13);
  CHECK(check1([](const Tensor& a) { return a.t() * a; }, v));  // t of a 1-D tensor is itself
}

TEST_CASE("gradcheck views: squeeze and unsqueeze") {
  Tensor x = leaf({3, 1, 2, 1}, 20);
  CHECK(check1([](const Tensor& a) { return a.squeeze().exp(); }, x));
  CHECK(check1([](const Tensor& a) { return a.squeeze(1).tanh(); }, x));
  CHECK(check1([](const Tensor& a) { return a.squeeze(-1).tanh(); }, x));
  CHECK(check1([](const Tensor& a) { return a.squeeze(0).exp(); }, x));  // size 3: unchanged
  for (const Tensor& y : both_layouts(21)) {
    CHECK(check1([](const Tensor& a) { return a.unsqueeze(1).exp(); }, y));
    CHECK(check1([](const Tensor& a) { return a.unsqueeze(-1).unsqueeze(0).squeeze().tanh(); }, y));
  }
}

TEST_CASE("gradcheck views: narrow and slice with step and select") {
  for (const Tensor& x : both_layouts(30)) {
    CHECK(check1([](const Tensor& a) { return a.narrow(1, 1, 2).exp(); }, x));
    CHECK(check1([](const Tensor& a) { return a.narrow(0, -2, 2).tanh(); }, x));
    CHECK(check1([](const Tensor& a) { return a.slice(1, 0, 4, 2).exp(); }, x));
    CHECK(check1([](const Tensor& a) { return a.slice(1, 1, 4, 2) * a.slice(1, 0, 3, 2); }, x));
    CHECK(check1([](const Tensor& a) { return a.slice(0, -2, 3).exp(); }, x));
    CHECK(check1([](const Tensor& a) { return a.slice(1, 1, 100, 3).tanh(); }, x));  // end clamped
    // A step past the int64 range of start + step: one element, whose gradient goes back to column 1
    CHECK(check1([](const Tensor& a) { return a.slice(1, 1, 4, INT64_MAX).exp(); }, x));
    CHECK(check1([](const Tensor& a) { return a.select(0, 1).exp(); }, x));
    CHECK(check1([](const Tensor& a) { return a.select(1, -1) * a.select(1, 0); }, x));
  }
  Tensor y = leaf({2, 5, 3}, 32);
  CHECK(check1([](const Tensor& a) { return a.slice(1, 1, 5, 3).slice(2, 0, 3, 2).exp(); }, y));
  CHECK(check1([](const Tensor& a) { return a.select(2, 1).select(0, 1).tanh(); }, y));
}

TEST_CASE("gradcheck views: expand and expand_as") {
  Tensor row = leaf({1, 3}, 40);
  CHECK(check1([](const Tensor& a) { return a.expand({4, 3}).exp(); }, row));
  CHECK(check1([](const Tensor& a) { return a.expand({2, -1, 3}) * a.expand({2, 4, 3}).tanh(); }, leaf({4, 1}, 41)));
  Tensor v = leaf({3}, 42);
  Tensor target = zeros({2, 2, 3}, kFloat64);
  CHECK(check1([&](const Tensor& a) { return a.expand_as(target).tanh(); }, v));
  Tensor s = leaf({}, 43);
  CHECK(check1([](const Tensor& a) { return a.expand({2, 3}).exp(); }, s));
  Tensor xt = transposed_leaf({3, 2}, 44);  // [2,3] with strides [1,2]
  CHECK(check1([](const Tensor& a) { return a.unsqueeze(0).expand({2, 2, 3}).exp(); }, xt));
}

TEST_CASE("gradcheck views: split and chunk") {
  for (const Tensor& x : both_layouts(50)) {
    CHECK(check1(
        [](const Tensor& a) {
          std::vector<Tensor> parts = a.split(2, 1);  // two [3,2]
          return parts[0] * parts[1].exp();
        },
        x));
    CHECK(check1(
        [](const Tensor& a) {
          std::vector<Tensor> parts = a.split(std::vector<int64_t>{1, 2}, 0);
          return parts[0].exp() + parts[1].tanh().sum({0}, true);
        },
        x));
    CHECK(check1(
        [](const Tensor& a) {
          std::vector<Tensor> parts = a.chunk(2, 1);
          return parts[1].exp() - parts[0];
        },
        x));
  }
  Tensor y = leaf({5}, 52);
  CHECK(check1(
      [](const Tensor& a) {
        std::vector<Tensor> parts = a.split(2);  // sizes 2, 2, 1
        REQUIRE(parts.size() == 3);
        return parts[0] * parts[1] + parts[2].exp();
      },
      y));
  CHECK(check1(
      [](const Tensor& a) {
        std::vector<Tensor> parts = a.chunk(3);  // sizes 2, 2, 1
        return parts[0].exp() * parts[2];
      },
      y));
}

TEST_CASE("gradcheck views: contiguous and clone and to") {
  for (const Tensor& x : both_layouts(60)) {
    CHECK(check1([](const Tensor& a) { return a.contiguous().exp(); }, x));
    CHECK(check1([](const Tensor& a) { return a.t().contiguous() * a.t(); }, x));
    CHECK(check1([](const Tensor& a) { return a.clone() * a.clone().exp(); }, x));
    CHECK(check1([](const Tensor& a) { return a.to(kFloat64).exp(); }, x));
  }
  // A round trip through float32 rounds to ~1e-7 relative: a larger step keeps the finite
  // difference of this linear map exact to well within the tolerance.
  Tensor x = leaf({3, 2}, 62);
  GradcheckOptions coarse;
  coarse.eps = 1e-2;
  coarse.atol = 1e-4;
  CHECK(check1([](const Tensor& a) { return a.to(kFloat32).to(kFloat64) * 3.0; }, x, coarse));
  CHECK(check1([](const Tensor& a) { return (a.to(kFloat32) * 2.0).to(kFloat64); }, x, coarse));
}

TEST_CASE("views share storage with their base") {
  Tensor x = leaf({3, 4}, 70);
  for (const Tensor& v : {x.reshape({12}), x.view({4, 3}), x.t(), x.mT(), x.permute({1, 0}), x.unsqueeze(0),
                          x.unsqueeze(2).squeeze(2), x.flatten(), x.narrow(1, 1, 2), x.slice(0, 0, 3, 2),
                          x.select(1, 2), x.unsqueeze(0).expand({2, 3, 4}), x.split(2, 1)[1], x.chunk(3, 0)[2],
                          x.contiguous(), x.to(kFloat64)}) {
    CHECK(v.storage() == x.storage());
    CHECK(v.requires_grad());
  }
  CHECK(x.clone().storage() != x.storage());
  CHECK(x.t().contiguous().storage() != x.storage());
  CHECK(x.t().reshape({12}).storage() != x.storage());  // a copy: no view is possible
}
