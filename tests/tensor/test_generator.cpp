// Generator: a seed fixes every draw, on every run and every thread count.
#include <cmath>
#include <cstdint>
#include <limits>

#include "helpers.h"
#include "tensor/kernels.h"
#include "tensor/kernels/counter_rng.h"

using namespace cppgrad;
using namespace cppgrad::testing;

namespace {
// Restores the thread count a test changed, however the test ends.
struct ThreadCountGuard {
  int saved = get_num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};
}  // namespace

TEST_CASE("generator: the stream of a seed is fixed") {
  // xoshiro256** seeded through splitmix64, values worked out from the published algorithm.
  Generator gen(42);
  CHECK(gen.next_u64() == 1546998764402558742ULL);
  CHECK(gen.next_u64() == 6990951692964543102ULL);
  CHECK(gen.next_u64() == 12544586762248559009ULL);

  gen.manual_seed(42);
  CHECK(gen.seed() == 42);
  CHECK(gen.uniform() == doctest::Approx(0.08386297105988216).epsilon(1e-15));
  CHECK(gen.uniform() == doctest::Approx(0.3789802506626686).epsilon(1e-15));

  // Box–Muller from the first two uniforms: cos then sin branch.
  gen.manual_seed(42);
  CHECK(gen.normal() == doctest::Approx(-0.303263064678738).epsilon(1e-12));
  CHECK(gen.normal() == doctest::Approx(0.28846173882942383).epsilon(1e-12));
}

TEST_CASE("generator: the same seed gives the same tensors") {
  Generator a(123), b(123);
  Tensor ra = randn({4, 5}, kFloat32, a), rb = randn({4, 5}, kFloat32, b);
  CHECK(ra.to_vector<float>() == rb.to_vector<float>());
  CHECK(rand({7}, kFloat64, a).to_vector<double>() == rand({7}, kFloat64, b).to_vector<double>());
  CHECK(randint(0, 100, {9}, a).to_vector<int64_t>() == randint(0, 100, {9}, b).to_vector<int64_t>());

  Generator c(124);
  CHECK(randn({4, 5}, kFloat32, c).to_vector<float>() != ra.to_vector<float>());
}

TEST_CASE("generator: float32 and float64 draws come from the same stream") {
  Generator a(5), b(5);
  std::vector<float> f = randn({6}, kFloat32, a).to_vector<float>();
  std::vector<double> d = randn({6}, kFloat64, b).to_vector<double>();
  for (size_t i = 0; i < f.size(); ++i) CHECK(f[i] == static_cast<float>(d[i]));
}

TEST_CASE("generator: manual_seed restarts the default generator") {
  manual_seed(2024);
  std::vector<float> first = randn({10}).to_vector<float>();
  std::vector<float> next = randn({10}).to_vector<float>();
  CHECK(first != next);
  manual_seed(2024);
  CHECK(randn({10}).to_vector<float>() == first);
  CHECK(randn({10}).to_vector<float>() == next);
  CHECK(default_generator().seed() == 2024);
}

TEST_CASE("generator: a saved state resumes the exact stream") {
  Generator gen(9);
  gen.normal();  // leaves the second Box–Muller value cached: the state must carry it
  Generator::State st = gen.state();
  std::vector<double> expected = randn({5}, kFloat64, gen).to_vector<double>();

  Generator other(1);
  other.set_state(st);
  CHECK(other.seed() == 9);
  CHECK(randn({5}, kFloat64, other).to_vector<double>() == expected);
}

TEST_CASE("generator: state_dict is the one layout, and load_state_dict checks every entry") {
  Generator gen(9);
  gen.normal();  // a cached second draw, carried by the state_dict
  const NamedTensors saved = gen.state_dict();
  std::vector<std::string> names;
  for (const auto& [name, t] : saved) names.push_back(name);
  CHECK(names == std::vector<std::string>{"state", "seed", "cached_normal", "has_cached_normal"});
  const std::vector<double> expected = randn({5}, kFloat64, gen).to_vector<double>();

  Generator other(1);
  other.load_state_dict(saved);
  CHECK(other.seed() == 9);
  CHECK(randn({5}, kFloat64, other).to_vector<double>() == expected);

  // `state` with one entry replaced (or, with an undefined value, removed).
  auto with = [&](const std::string& key, const Tensor& value) {
    NamedTensors out;
    for (const auto& [name, t] : saved)
      if (name != key) out.emplace_back(name, t);
      else if (value.defined()) out.emplace_back(name, value);
    if (key == "extra") out.emplace_back(key, value);
    return out;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<NamedTensors, std::string>> refused = {
      {with("state", zeros({4}, kInt64)), "'state' is all zeros"},
      {with("state", zeros({2, 2}, kInt64)), "'state' must be int64 [4], got int64 [2,2]"},
      {with("seed", scalar_tensor(1.0, kFloat64)), "'seed' must be int64 [], got float64 []"},
      {with("cached_normal", scalar_tensor(inf, kFloat64)), "'cached_normal' is inf, must be finite"},
      {with("has_cached_normal", Tensor()), "'has_cached_normal' is missing"},
      {with("extra", scalar_tensor(1.0)), "unexpected entry 'extra'"},
  };
  for (const auto& [state, phrase] : refused) {
    CAPTURE(phrase);
    Generator target(3);
    const uint64_t first_draw = Generator(3).next_u64();
    CHECK_THROWS_WITH_AS(target.load_state_dict(state), doctest::Contains(("Generator::load_state_dict: " + phrase).c_str()), Error);
    CHECK(target.next_u64() == first_draw);  // refused: the generator is as it was
  }
}

TEST_CASE("generator: randn is the same on one thread and on two") {
  ThreadCountGuard guard;
  set_num_threads(1);
  CHECK(get_num_threads() == 1);
  Generator g1(77);
  Tensor one = randn({300, 200}, kFloat32, g1);

  set_num_threads(2);
  CHECK(get_num_threads() == 2);
  Generator g2(77);
  Tensor two = randn({300, 200}, kFloat32, g2);
  CHECK(one.to_vector<float>() == two.to_vector<float>());
}

TEST_CASE("generator: parallel kernels give the same bits on one thread and on two") {
  // With a grain small enough that the loops split across threads.
  ThreadCountGuard guard;
  SmallParallelGrain threaded;
  Generator gen(3);
  Tensor x = randn({300, 200}, kFloat32, gen);
  Tensor y = randn({200}, kFloat32, gen);
  Tensor rows = randint(0, 300, {400}, gen);
  Generator fresh;
  auto compute = [&] {
    return std::vector<Tensor>{(x * y).exp(),
                               x.t().contiguous(),
                               x.sum({0}),
                               x.sum({1}),
                               x.sum(),
                               x.softmax(1),
                               x.softmax(0),
                               x.log_softmax(1),
                               x.var({1}),
                               x.mean({0}),
                               x.max(1).values,
                               x.argmax(0),
                               x > y,
                               where(x > y, x, y),
                               x.masked_fill(x < y, 0),
                               x.t().gelu(),
                               x.index_select(0, rows),
                               cat({x, x.t().t()}, 1),
                               layer_norm(x, 1, y, y, 1e-5),
                               masked_softmax(x.reshape({2, 150, 200}), x.slice(0, 0, 150).gt(full({}, 1.0)), true, 0.5),
                               kernels::dropout_mask({300, 200}, kFloat32, 0.25, fresh = Generator(11))};
  };
  set_num_threads(1);
  std::vector<Tensor> serial = compute();
  set_num_threads(2);
  std::vector<Tensor> parallel = compute();
  for (size_t i = 0; i < serial.size(); ++i) {
    CAPTURE(i);
    CHECK(serial[i].to_vector<float>() == parallel[i].to_vector<float>());
  }
  // And the parallel sum is the right one: column sums worked out here.
  std::vector<float> xv = x.to_vector<float>();
  std::vector<double> column_sums(200, 0.0);
  for (int64_t i = 0; i < 300; ++i)
    for (int64_t j = 0; j < 200; ++j) column_sums[j] += xv[i * 200 + j];
  CHECK(mismatch(parallel[2], {200}, column_sums, 1e-5) == "");
}

TEST_CASE("generator: float32 rand stays below one for the largest draw") {
  // A state whose next output is 2^64 - 1: xoshiro256** returns rotl(s[1] * 5, 7) * 9, so s[1] is
  // that inverted. uniform() then gives 1 - 2^-53, which rounds to 1.0f in float32.
  const Generator::State top{{0, 0x4fc71c71c71c71c7ULL, 0, 0}, 1, 0.0, false};
  Generator gen;
  gen.set_state(top);
  REQUIRE(gen.next_u64() == UINT64_MAX);

  gen.set_state(top);
  CHECK(rand({1}, kFloat64, gen).item<double>() == 1.0 - 0x1.0p-53);
  gen.set_state(top);
  const float f = rand({1}, kFloat32, gen).item<float>();
  CHECK(f < 1.0f);
  CHECK(f == std::nextafter(1.0f, 0.0f));
}

TEST_CASE("generator: dropout's vectorised loop draws the mask of the formula, element by element") {
  // The kernel runs a copy of its loop compiled for this CPU's vector unit (runtime/simd_clones.h);
  // whichever runs, the mask is word i of the counter-based stream, as computed here one element
  // at a time. 37,001 elements: several chunks, and a tail shorter than any vector. (CTest runs
  // this case natively and under an emulated CPU without AVX: the AVX-512 or AVX2 copy and the
  // baseline one.)
  for (DType dtype : {kFloat32, kFloat64}) {
    ReferenceModeGuard fast_forms(false);  // the vectorised loop, also when CTest runs this with CPPGRAD_REFERENCE=1
    Generator gen(21);
    const double p = 0.25;
    Tensor x = arange(37001.0).to(dtype);
    const uint64_t key = gen.next_u64(), threshold = kernels::dropout_threshold(p);
    const std::vector<double> mask = values(kernels::dropout_mask(x.shape(), dtype, p, key));
    const std::vector<double> y = values(kernels::dropout(x, p, key));
    int64_t wrong = 0;
    for (size_t i = 0; i < mask.size(); ++i) {
      const double factor = kernels::dropout_keeps(key, i, threshold) ? 1.0 / (1.0 - p) : 0.0;
      const double expected_mask = dtype == kFloat32 ? double(float(factor)) : factor;
      const double expected_y = dtype == kFloat32 ? double(float(i) * float(factor)) : double(i) * factor;
      wrong += mask[i] != expected_mask || y[i] != expected_y;
    }
    CHECK(wrong == 0);
  }
}
