// What a training program saves to resume exactly: model, optimizer, schedule, step counter
// and random-number state, in one safetensors file under prefixes ("model.", "optim.", ...).
#pragma once

#include <string>

#include "cppgrad.h"

namespace examples {

using cppgrad::nn::NamedTensors;

// Prepends `prefix` to every name.
NamedTensors with_prefix(const std::string& prefix, const NamedTensors& tensors);
// The entries whose names start with `prefix`, with it removed.
NamedTensors under_prefix(const std::string& prefix, const NamedTensors& tensors);

// A generator's whole state as tensors (xoshiro words, seed, cached normal), and back.
NamedTensors generator_state(const cppgrad::Generator& gen);
void set_generator_state(cppgrad::Generator& gen, const NamedTensors& state);

}  // namespace examples
