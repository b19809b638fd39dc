// Initialisers: fill a tensor in place (under no-grad) from a Generator, as torch.nn.init.
#pragma once

#include "../tensor/tensor.h"

namespace cppgrad::nn::init {

// fan_in and fan_out of a weight: for [out, in, ...] they are in·k and out·k (k: the rest).
std::pair<int64_t, int64_t> fans(const Tensor& t);

void uniform_(const Tensor& t, double low = 0.0, double high = 1.0, Generator& gen = default_generator());
void normal_(const Tensor& t, double mean = 0.0, double std = 1.0, Generator& gen = default_generator());
void zeros_(const Tensor& t);
void ones_(const Tensor& t);
void constant_(const Tensor& t, double value);
// U(-a, a), a = gain·√(6 / (fan_in + fan_out))
void xavier_uniform_(const Tensor& t, double gain = 1.0, Generator& gen = default_generator());
// N(0, σ²), σ = gain·√(2 / (fan_in + fan_out))
void xavier_normal_(const Tensor& t, double gain = 1.0, Generator& gen = default_generator());
// U(-b, b), b = gain·√(3 / fan_in), gain = √(2 / (1 + a²)) for leaky_relu's negative slope a.
// Linear's default is a = √5, which makes b = 1/√fan_in.
void kaiming_uniform_(const Tensor& t, double a = 0.0, Generator& gen = default_generator());
// N(0, std²), std = gain / √fan_in: the same variance as kaiming_uniform_'s.
void kaiming_normal_(const Tensor& t, double a = 0.0, Generator& gen = default_generator());

}  // namespace cppgrad::nn::init
