// multinomial: draws follow the weights (with replacement) and the successive-draw law (without),
// never a weight-0 category while a positive one is left, distinct indices without replacement,
// the same draws from the same seed, and PyTorch's refusals.
//
// Tolerances: a frequency estimated from N independent draws has standard deviation
// √(p(1 - p)/N) ≤ 0.5/√N. With N = 40000 that is at most 0.0025, and the tests allow 0.015, six
// standard deviations: a correct sampler fails one check with probability about 2e-9, while a
// sampler off by one category or ignoring the weights is off by 0.1 or more. The seeds are fixed,
// so a run either always passes or always fails.
#include <algorithm>
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;
using V = std::vector<double>;

namespace {
constexpr int64_t kDraws = 40000;
constexpr double kTolerance = 0.015;

// How often each of n categories occurs in `samples`, as shares of all samples.
std::vector<double> frequencies(const Tensor& samples, int64_t n) {
  std::vector<double> share(static_cast<size_t>(n), 0.0);
  const std::vector<double> all = values(samples);
  int64_t out_of_range = 0;
  for (double s : all) {
    if (s < 0 || s >= static_cast<double>(n)) {
      ++out_of_range;
      continue;
    }
    share[static_cast<size_t>(s)] += 1.0 / static_cast<double>(all.size());
  }
  CHECK(out_of_range == 0);
  return share;
}

void expect_shares(const std::vector<double>& got, const std::vector<double>& expected) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got[i] - expected[i]) < kTolerance);
  }
}
}  // namespace

TEST_CASE("multinomial: with replacement, frequencies follow unnormalised weights, weight 0 never drawn") {
  Generator gen(2701);
  Tensor w = tensor({1.0, 0.0, 2.0, 3.0, 4.0, 0.0});  // sums to 10: shares 0.1, 0, 0.2, 0.3, 0.4, 0
  Tensor samples = multinomial(w, kDraws, /*replacement=*/true, gen);
  CHECK(samples.dtype() == kInt64);
  CHECK(samples.shape() == Shape{kDraws});
  std::vector<double> share = frequencies(samples, 6);
  expect_shares(share, {0.1, 0.0, 0.2, 0.3, 0.4, 0.0});
  CHECK(share[1] == 0.0);
  CHECK(share[5] == 0.0);
  // 2-D: each row its own distribution; float64 weights too
  Tensor rows = tensor({{0.0, 0.0, 5.0}, {1.0, 1.0, 2.0}}, kFloat64);
  Tensor both = rows.multinomial(kDraws, true, gen);
  CHECK(both.shape() == Shape{2, kDraws});
  CHECK(values(both[0]) == V(kDraws, 2.0));
  expect_shares(frequencies(both[1], 3), {0.25, 0.25, 0.5});
}

TEST_CASE("multinomial: without replacement, distinct indices that follow the successive-draw law") {
  Generator gen(2702);
  // Every row draws 2 of 4 with weights 1:2:3:4 (p = 0.1, 0.2, 0.3, 0.4). Category i is in the
  // sample with probability p_i + Σ_{j≠i} p_j · p_i / (1 - p_j): first, or second after j.
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  Tensor w = tensor({1.0, 2.0, 3.0, 4.0}).unsqueeze(0).expand({kDraws, 4});
  Tensor samples = multinomial(w, 2, /*replacement=*/false, gen);
  CHECK(samples.shape() == Shape{kDraws, 2});
  std::vector<double> in_sample(4, 0.0), first(4, 0.0);
  const std::vector<double> all = values(samples);
  CHECK(*std::min_element(all.begin(), all.end()) >= 0);
  CHECK(*std::max_element(all.begin(), all.end()) <= 3);
  int64_t repeats = 0;
  for (int64_t r = 0; r < kDraws; ++r) {
    const auto a = static_cast<size_t>(all[2 * r]), b = static_cast<size_t>(all[2 * r + 1]);
    repeats += a == b;
    in_sample[a] += 1.0 / kDraws;
    in_sample[b] += 1.0 / kDraws;
    first[a] += 1.0 / kDraws;
  }
  CHECK(repeats == 0);  // distinct within every row
  std::vector<double> expected(4);
  for (size_t i = 0; i < 4; ++i) {
    expected[i] = p[i];
    for (size_t j = 0; j < 4; ++j)
      if (j != i) expected[i] += p[j] * p[i] / (1 - p[j]);
  }
  expect_shares(first, p);  // the first draw is a draw from the weights
  expect_shares(in_sample, expected);
  // Drawing every category gives a permutation; weight-0 categories come last, in index order.
  Tensor all_of_them = multinomial(tensor({0.0, 3.0, 0.0, 1.0, 2.0}), 5, false, gen);
  std::vector<double> order = values(all_of_them);
  CHECK(V(order.begin() + 3, order.end()) == V{0, 2});
  std::sort(order.begin(), order.begin() + 3);
  CHECK(V(order.begin(), order.begin() + 3) == V{1, 3, 4});
}

TEST_CASE("multinomial: the same generator state gives the same draws") {
  Generator a(2703), b(2703), c(2704);
  Tensor w = tensor({{0.5, 1.0, 2.0, 0.25, 3.0}, {1.0, 0.0, 1.0, 1.0, 1.0}});
  for (bool replacement : {false, true}) {
    CAPTURE(replacement);
    Tensor x = multinomial(w, 3, replacement, a);
    CHECK(values(x) == values(multinomial(w, 3, replacement, b)));
  }
  // another seed draws differently (100 categories, 20 draws: the same twice is 1e-40 likely)
  Tensor many = ones({100});
  CHECK(values(multinomial(many, 20, false, a)) != values(multinomial(many, 20, false, c)));
  manual_seed(7);
  Tensor first = multinomial(many, 20, true);
  manual_seed(7);
  CHECK(values(multinomial(many, 20, true)) == values(first));  // the default generator, seeded
}

TEST_CASE("errors: multinomial refuses what PyTorch refuses") {
  Generator gen(1);
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(error_message([&] { multinomial(tensor({1.0, -1.0}), 1, false, gen); }) ==
        "multinomial: weights must be finite and non-negative, got -1 at category 1 of row 0");
  CHECK(contains(error_message([&] { multinomial(tensor({{1.0, 1.0}, {inf, 1.0}}), 1, true, gen); }),
                 "got inf at category 0 of row 1"));
  CHECK(contains(error_message([&] { multinomial(tensor({std::nan(""), 1.0}), 1, false, gen); }),
                 "finite and non-negative, got nan"));
  CHECK(error_message([&] { multinomial(tensor({{1.0, 1.0}, {0.0, 0.0}}), 1, true, gen); }) ==
        "multinomial: row 1 of weights (shape [2,2]) sums to 0: no category can be drawn");
  CHECK(error_message([&] { multinomial(tensor({1.0, 2.0, 3.0}), 4, false, gen); }) ==
        "multinomial: cannot draw 4 samples without replacement from 3 categories (shape [3])");
  CHECK(error_message([&] { multinomial(tensor({1.0}), 0, true, gen); }) ==
        "multinomial: num_samples must be positive, got 0");
  CHECK(error_message([&] { multinomial(zeros({2, 2, 2}), 1, true, gen); }) ==
        "multinomial: expected 1-D or 2-D weights (categories, or rows of categories), got shape [2,2,2]");
  CHECK(error_message([&] { multinomial(scalar_tensor(1.0), 1, true, gen); }) ==
        "multinomial: expected 1-D or 2-D weights (categories, or rows of categories), got shape []");
  CHECK(error_message([&] { multinomial(tensor(std::vector<int64_t>{1, 2}, {2}), 1, true, gen); }) ==
        "multinomial: expected floating weights (float32 or float64), got int64");
  CHECK(multinomial(ones({0, 3}), 2, false, gen).shape() == Shape{0, 2});  // no rows: nothing to draw
}
