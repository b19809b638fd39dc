// nn::init: every initialiser draws from a Generator (same seed, same values), and on a large
// tensor the values have the bounds, mean and spread the formula promises. Then the layers'
// default initialisation, which follows PyTorch's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cppgrad.h"
#include "nn_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
using nntest::values;

namespace {

struct Stats {
  double min, max, mean, std;
};

Stats stats_of(const Tensor& t) {
  std::vector<double> v = values(t);
  Stats s{*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()), 0.0, 0.0};
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double sq = 0.0;
  for (double x : v) sq += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(sq / static_cast<double>(v.size()));
  return s;
}

// 200 × 300 = 60000 draws: the sample std is within ~0.6% of the true one (3σ), the mean
// within ~0.012σ.
constexpr int64_t kOut = 200, kIn = 300;

// Same seed, same values; another seed, other values.
template <class Init>
void check_seeded(Init init) {
  Tensor a = empty({kOut, kIn}), b = empty({kOut, kIn}), c = empty({kOut, kIn});
  Generator g1(42), g2(42), g3(43);
  init(a, g1);
  init(b, g2);
  init(c, g3);
  CHECK(values(a) == values(b));
  CHECK(values(a) != values(c));
}

// A uniform U(-bound, bound) sample: inside the bounds, reaching close to them, std bound/√3.
void check_symmetric_uniform(const Tensor& t, double bound) {
  Stats s = stats_of(t);
  CHECK(s.min >= -bound);
  CHECK(s.max <= bound);
  CHECK(s.min < -0.999 * bound);
  CHECK(s.max > 0.999 * bound);
  CHECK(std::abs(s.mean) < 0.01 * bound);
  CHECK(s.std == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.01));
}

}  // namespace

TEST_CASE("fans of a weight are in and out features times the receptive field") {
  CHECK(init::fans(empty({kOut, kIn})) == std::pair<int64_t, int64_t>{kIn, kOut});
  CHECK(init::fans(empty({4, 3, 5})) == std::pair<int64_t, int64_t>{15, 20});
  CHECK(nntest::contains(nntest::error_message([] { init::fans(empty({7})); }), "init"));
}

TEST_CASE("uniform_ and normal_ draw the asked distribution from the generator") {
  check_seeded([](const Tensor& t, Generator& g) { init::uniform_(t, -2.0, 5.0, g); });
  check_seeded([](const Tensor& t, Generator& g) { init::normal_(t, 1.5, 0.5, g); });

  Generator gen(1);
  Tensor u = empty({kOut, kIn});
  init::uniform_(u, -2.0, 5.0, gen);
  Stats su = stats_of(u);
  CHECK(su.min >= -2.0);
  CHECK(su.max < 5.0);
  CHECK(su.mean == doctest::Approx(1.5).epsilon(0.01));
  CHECK(su.std == doctest::Approx(7.0 / std::sqrt(12.0)).epsilon(0.01));

  Tensor n = empty({kOut, kIn}, kFloat64);
  init::normal_(n, 1.5, 0.5, gen);
  Stats sn = stats_of(n);
  CHECK(sn.mean == doctest::Approx(1.5).epsilon(0.005));
  CHECK(sn.std == doctest::Approx(0.5).epsilon(0.01));
  CHECK(n.dtype() == kFloat64);
}

TEST_CASE("zeros_ and ones_ and constant_ fill in place") {
  Tensor t = nntest::randn64({3, 4}, 2, /*requires_grad=*/true);
  Tensor handle = t;
  init::zeros_(t);
  CHECK(values(handle) == std::vector<double>(12, 0.0));
  init::ones_(t);
  CHECK(values(handle) == std::vector<double>(12, 1.0));
  init::constant_(t, -0.5);
  CHECK(values(handle) == std::vector<double>(12, -0.5));
  CHECK(t.requires_grad());  // still a leaf that trains
}

TEST_CASE("xavier_uniform_ and xavier_normal_ scale with fan_in plus fan_out") {
  check_seeded([](const Tensor& t, Generator& g) { init::xavier_uniform_(t, 1.0, g); });
  check_seeded([](const Tensor& t, Generator& g) { init::xavier_normal_(t, 1.0, g); });

  Generator gen(3);
  Tensor u = empty({kOut, kIn});
  init::xavier_uniform_(u, 2.0, gen);
  check_symmetric_uniform(u, 2.0 * std::sqrt(6.0 / (kIn + kOut)));

  Tensor n = empty({kOut, kIn});
  init::xavier_normal_(n, 1.0, gen);
  Stats s = stats_of(n);
  double sigma = std::sqrt(2.0 / (kIn + kOut));
  CHECK(std::abs(s.mean) < 0.02 * sigma);
  CHECK(s.std == doctest::Approx(sigma).epsilon(0.01));
}

TEST_CASE("kaiming_uniform_ bound is gain times sqrt of 3 over fan_in") {
  check_seeded([](const Tensor& t, Generator& g) { init::kaiming_uniform_(t, 0.0, g); });
  Generator gen(4);
  Tensor relu_gain = empty({kOut, kIn});
  init::kaiming_uniform_(relu_gain, 0.0, gen);  // gain √2: bound √(6 / fan_in)
  check_symmetric_uniform(relu_gain, std::sqrt(6.0 / kIn));
  Tensor linear_default = empty({kOut, kIn});
  init::kaiming_uniform_(linear_default, std::sqrt(5.0), gen);  // Linear's choice: bound 1/√fan_in
  check_symmetric_uniform(linear_default, 1.0 / std::sqrt(kIn));
}

TEST_CASE("Linear weights and bias lie within plus or minus one over sqrt of in_features") {
  manual_seed(5);
  Linear big(400, 300);
  const double bound = 1.0 / std::sqrt(400.0);
  check_symmetric_uniform(big.weight, bound);
  Stats b = stats_of(big.bias);
  CHECK(b.min >= -bound);
  CHECK(b.max <= bound);
  CHECK(b.max - b.min > 1.9 * bound);  // spread over the range, not a constant

  // reset_parameters with a seeded generator is reproducible.
  Linear a(8, 4), c(8, 4);
  Generator g1(9), g2(9);
  a.reset_parameters(g1);
  c.reset_parameters(g2);
  CHECK(values(a.weight) == values(c.weight));
  CHECK(values(a.bias) == values(c.bias));
  // No bias when asked.
  Linear no_bias(3, 2, false);
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.parameters().size() == 1);
}

TEST_CASE("MultiheadAttention starts with xavier projections and zero biases") {
  manual_seed(6);
  MultiheadAttention mha(64, 4);
  CHECK(values(mha.in_proj_bias) == std::vector<double>(3 * 64, 0.0));
  CHECK(values(mha.out_proj->bias) == std::vector<double>(64, 0.0));
  // in_proj_weight (192, 64): fan_in 64, fan_out 192.
  Stats w = stats_of(mha.in_proj_weight);
  double bound = std::sqrt(6.0 / (64 + 192));
  CHECK(w.min >= -bound);
  CHECK(w.max <= bound);
  CHECK(w.std == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.03));
  // out_proj keeps Linear's init: within ±1/√64.
  Stats o = stats_of(mha.out_proj->weight);
  CHECK(o.max <= 0.125);
  CHECK(o.min >= -0.125);
}

TEST_CASE("Embedding starts N(0 1) and LayerNorm with ones and zeros") {
  manual_seed(7);
  Embedding emb(300, 200);
  Stats e = stats_of(emb.weight);
  CHECK(std::abs(e.mean) < 0.02);
  CHECK(e.std == doctest::Approx(1.0).epsilon(0.01));
  LayerNorm ln(Shape{5});
  CHECK(values(ln.weight) == std::vector<double>(5, 1.0));
  CHECK(values(ln.bias) == std::vector<double>(5, 0.0));
}
