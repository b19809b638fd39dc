// Shared helpers for the nn tests: seeded float64 tensors, comparisons, error messages, and the
// gradcheck shorthands used with modules.
#pragma once

#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "cppgrad.h"
#include "../common/check.h"

namespace cppgrad::nntest {

// A fresh directory under the system's temporary directory, removed at the end.
struct TempDir {
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cppgrad-nn-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::filesystem::path path;
};

// A float64 tensor of N(0,1) values; the same seed gives the same values.
inline Tensor randn64(const Shape& shape, uint64_t seed, bool requires_grad = false) {
  Generator gen(seed);
  Tensor t = randn(shape, kFloat64, gen);
  if (requires_grad) t.requires_grad_();
  return t;
}

// NaN-safe comparisons and error messages, shared by every floor: a NaN or a stray infinity
// makes max_abs_diff and max_rel_diff +inf.
using check::all_finite;
using check::contains;
using check::error_message;
using check::max_abs_diff;
using check::max_rel_diff;
using check::values;

// Sets the attention backend for a scope; Fused also turns reference mode off there, so that
// cases meant for the fused kernel test it when CTest runs the suite with CPPGRAD_REFERENCE=1.
struct AttentionBackendGuard {
  explicit AttentionBackendGuard(nn::functional::AttentionBackend b)
      : previous(nn::functional::attention_backend()),
        mode(b == nn::functional::AttentionBackend::Fused ? false : reference_mode()) {
    nn::functional::set_attention_backend(b);
  }
  ~AttentionBackendGuard() { nn::functional::set_attention_backend(previous); }
  nn::functional::AttentionBackend previous;
  ReferenceModeGuard mode;
};

// Checks that `t` holds `expected` (row-major) to within `tol`.
inline void check_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-12) {
  std::vector<double> got = values(t);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == doctest::Approx(expected[i]).epsilon(tol).scale(1.0));
  }
}

// A bool tensor from 0/1 values.
inline Tensor bool_mask(std::initializer_list<std::initializer_list<double>> rows) {
  return tensor(rows, kFloat64).ne(zeros({}, kFloat64));
}

// Sets a float64 parameter's values from a row-major list, under no-grad.
inline void set_values(Tensor param, const std::vector<double>& v) {
  REQUIRE(static_cast<int64_t>(v.size()) == param.numel());
  NoGradGuard no_grad;
  param.copy_(tensor(v, param.shape()).to(param.dtype()));
}

// Gradcheck options for the whole-layer checks: fast mode (random projections), with a
// tolerance that still catches any wrong term.
// A safetensors file made by hand: the 8-byte little-endian length, the header text, then
// `data_bytes` zero bytes of data.
inline std::vector<uint8_t> safetensors_file_of(const std::string& header, size_t data_bytes = 0) {
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.resize(bytes.size() + data_bytes, 0);
  return bytes;
}

inline GradcheckOptions fast(uint64_t seed = 1) {
  GradcheckOptions o;
  o.fast_mode = true;
  o.seed = seed;
  return o;
}

}  // namespace cppgrad::nntest
