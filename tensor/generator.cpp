#include "tensor/generator.h"

#include <bit>
#include <cmath>
#include <numbers>

#include "runtime/error.h"
#include "tensor/tensor.h"

namespace cppgrad {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

void Generator::manual_seed(uint64_t seed) {
  seed_ = seed;
  uint64_t x = seed;
  for (auto& word : s_) word = splitmix64(x);  // spread the seed over the 256-bit state
  has_cached_normal_ = false;
}

// A state that no seeding and no sequence of draws can reach is refused: xoshiro's all-zero
// state is a fixed point (every draw 0, every normal the same), and a cached normal is finite.
void Generator::set_state(const State& st) {
  CPPGRAD_CHECK(st.s[0] != 0 || st.s[1] != 0 || st.s[2] != 0 || st.s[3] != 0,
                "Generator::set_state: the state words are all zero, which xoshiro256** never leaves");
  CPPGRAD_CHECK(!st.has_cached_normal || std::isfinite(st.cached_normal),
                "Generator::set_state: the cached normal draw is {}, not a finite number", st.cached_normal);
  s_ = st.s;
  seed_ = st.seed;
  cached_normal_ = st.cached_normal;
  has_cached_normal_ = st.has_cached_normal;
}

NamedTensors Generator::state_dict() const {
  std::vector<int64_t> words;
  for (uint64_t w : s_) words.push_back(std::bit_cast<int64_t>(w));
  return {{"state", tensor(words, {4})},
          {"seed", tensor(std::vector<int64_t>{std::bit_cast<int64_t>(seed_)}, {})},
          {"cached_normal", tensor(std::vector<double>{cached_normal_}, {})},
          {"has_cached_normal", tensor(std::vector<bool>{has_cached_normal_}, {})}};
}

void Generator::load_state_dict(const NamedTensors& state) {
  StateReader in(state, "Generator::load_state_dict");
  State st{};
  const auto words = in.tensor("state", kInt64, {4}).to_vector<int64_t>();
  for (size_t i = 0; i < 4; ++i) st.s[i] = std::bit_cast<uint64_t>(words[i]);
  CPPGRAD_CHECK(st.s != decltype(st.s){}, "Generator::load_state_dict: 'state' is all zeros, which xoshiro256** never leaves");
  st.seed = std::bit_cast<uint64_t>(in.int64("seed"));
  st.cached_normal = in.float64("cached_normal");  // finite: a Box–Muller draw is
  st.has_cached_normal = in.boolean("has_cached_normal");
  in.finish();
  set_state(st);
}

double Generator::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Generator::normal() {
  if (has_cached_normal_) {
    has_cached_normal_ = false;
    return cached_normal_;
  }
  double u1 = 1.0 - uniform();  // (0, 1], so log(u1) is finite
  double u2 = uniform();
  double r = std::sqrt(-2.0 * std::log(u1));
  cached_normal_ = r * std::sin(2.0 * std::numbers::pi * u2);
  has_cached_normal_ = true;
  return r * std::cos(2.0 * std::numbers::pi * u2);
}

int64_t Generator::randint(int64_t low, int64_t high) {
  CPPGRAD_CHECK(low < high, "randint: empty range [{}, {})", low, high);
  // In uint64, where high - low and low + draw wrap instead of overflowing: [INT64_MIN, INT64_MAX) is
  // a range of 2^64 - 1 values.
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  // Rejection sampling keeps every value equally likely.
  uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t x;
  do x = next_u64();
  while (x >= limit);
  return static_cast<int64_t>(static_cast<uint64_t>(low) + x % range);
}

Generator& default_generator() {
  static Generator gen(0x5eed);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace cppgrad
