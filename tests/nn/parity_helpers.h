// Helpers for the parity tests: read a PyTorch reference file (tests/data, conventions in
// tests/data/README.md and scripts/make_parity_refs.py) and compare cppgrad's results
// with what it stores. Used by test_parity.cpp and test_parity_masks.cpp.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "cppgrad.h"
#include "nn_helpers.h"

namespace cppgrad::paritytest {

// Float64 results must agree to 1e-10 relative: the same formulas summed in another order
// move only the last bits, while any wrong term moves far more.
inline constexpr double kRelTol = 1e-10;
inline const std::string kData = CPPGRAD_TEST_DATA;

// The `param.*` entries of a reference file, with the prefix stripped: a state_dict.
inline nn::NamedTensors params_of(const nn::SafetensorsContents& file) {
  const std::string prefix = "param.";
  nn::NamedTensors state;
  for (const auto& [name, t] : file.tensors)
    if (name.rfind(prefix, 0) == 0) state.emplace_back(name.substr(prefix.size()), t);
  return state;
}

// A fresh leaf with the stored input's values.
inline Tensor input(const nn::SafetensorsContents& file, const std::string& name) {
  return file.at("in." + name).clone().requires_grad_();
}

// A stored mask, or an undefined tensor when the case has none.
inline Tensor optional_input(const nn::SafetensorsContents& file, const std::string& name) {
  return file.contains("in." + name) ? file.at("in." + name) : Tensor();
}

// A metadata value; a missing key fails the test with its name.
inline const std::string& meta(const nn::SafetensorsContents& file, const std::string& key) {
  INFO("metadata key " << key);
  REQUIRE(file.metadata.count(key) == 1);
  return file.metadata.at(key);
}

inline bool meta_flag(const nn::SafetensorsContents& file, const std::string& key) {
  const std::string& value = meta(file, key);
  REQUIRE((value == "true" || value == "false"));
  return value == "true";
}

inline int64_t meta_int(const nn::SafetensorsContents& file, const std::string& key) {
  return std::stoll(meta(file, key));
}

// Compares one tensor with the stored reference; returns the relative error.
inline double expect_close(const Tensor& got, const nn::SafetensorsContents& file, const std::string& name) {
  INFO(name);
  REQUIRE(got.defined());
  const Tensor& want = file.at(name);
  REQUIRE(got.shape() == want.shape());
  CHECK(got.dtype() == kFloat64);
  double rel = nntest::max_rel_diff(got, want);
  CHECK(rel < kRelTol);
  return rel;
}

// Every `grad.param.<name>` against the gradient of the module's parameter <name>, and no
// parameter left out on either side.
inline double expect_param_grads(const nn::Module& module, const nn::SafetensorsContents& file) {
  double worst = 0.0;
  size_t compared = 0;
  for (const auto& [name, p] : module.named_parameters()) {
    worst = std::max(worst, expect_close(p.grad(), file, "grad.param." + name));
    ++compared;
  }
  CHECK(compared == params_of(file).size());
  return worst;
}

}  // namespace cppgrad::paritytest
