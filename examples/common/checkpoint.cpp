#include "common/checkpoint.h"

#include <bit>

using namespace cppgrad;

namespace examples {

NamedTensors with_prefix(const std::string& prefix, const NamedTensors& tensors) {
  NamedTensors out;
  for (const auto& [name, t] : tensors) out.emplace_back(prefix + name, t);
  return out;
}

NamedTensors under_prefix(const std::string& prefix, const NamedTensors& tensors) {
  NamedTensors out;
  for (const auto& [name, t] : tensors)
    if (name.rfind(prefix, 0) == 0) out.emplace_back(name.substr(prefix.size()), t);
  return out;
}

NamedTensors generator_state(const Generator& gen) {
  Generator::State s = gen.state();
  std::vector<int64_t> words;
  for (uint64_t w : s.s) words.push_back(std::bit_cast<int64_t>(w));
  words.push_back(std::bit_cast<int64_t>(s.seed));
  return {{"words", tensor(words, {5})},
          {"cached_normal", scalar_tensor(s.cached_normal, kFloat64)},
          {"has_cached_normal", scalar_tensor(s.has_cached_normal ? 1 : 0, kBool)}};
}

void set_generator_state(Generator& gen, const NamedTensors& state) {
  Generator::State s{};
  bool found_words = false;
  for (const auto& [name, t] : state) {
    if (name == "words") {
      CPPGRAD_CHECK(t.numel() == 5 && t.dtype() == kInt64, "checkpoint: generator words must be 5 int64 values");
      auto w = t.to_vector<int64_t>();
      for (int i = 0; i < 4; ++i) s.s[i] = std::bit_cast<uint64_t>(w[i]);
      s.seed = std::bit_cast<uint64_t>(w[4]);
      found_words = true;
    } else if (name == "cached_normal") {
      s.cached_normal = t.item<double>();
    } else if (name == "has_cached_normal") {
      s.has_cached_normal = t.item<bool>();
    }
  }
  CPPGRAD_CHECK(found_words, "checkpoint: the generator state is missing");
  gen.set_state(s);
}

}  // namespace examples
