// Generator: a seedable source of random numbers. The same seed gives the same numbers on
// every run and every thread count (draws are made in order, on the calling thread).
#pragma once

#include <array>
#include <cstdint>

#include "state_dict.h"

namespace cppgrad {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) { manual_seed(seed); }
  void manual_seed(uint64_t seed);
  uint64_t seed() const { return seed_; }

  uint64_t next_u64() {  // xoshiro256** (Blackman & Vigna); inline because dropout draws millions
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform();     // [0, 1) with 53 random bits
  double normal();      // N(0, 1), Box–Muller
  int64_t randint(int64_t low, int64_t high);  // [low, high)

  // The whole state, so a checkpoint can resume the exact stream.
  struct State {
    std::array<uint64_t, 4> s;
    uint64_t seed;
    double cached_normal;
    bool has_cached_normal;
  };
  State state() const { return {s_, seed_, cached_normal_, has_cached_normal_}; }
  void set_state(const State& st);

  // The state as a state_dict, the one layout every checkpoint uses for a generator:
  //   "state" int64 [4] (the xoshiro256** words), "seed" int64 [] (both the uint64 bits),
  //   "cached_normal" float64 [], "has_cached_normal" bool [] (Box–Muller's second draw).
  // load_state_dict checks every entry and refuses a state no generator reaches (all-zero
  // words, a cached normal that is not finite) or an entry of another name, leaving the
  // generator as it was.
  NamedTensors state_dict() const;
  void load_state_dict(const NamedTensors& state);

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::array<uint64_t, 4> s_{};
  uint64_t seed_ = 0;
  double cached_normal_ = 0;
  bool has_cached_normal_ = false;
};

// The generator used when none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace cppgrad
