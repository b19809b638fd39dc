// Parity of logsumexp, sort, topk and the float functions of integers with PyTorch 1.13 (scripts/make_parity_refs.py writes the
// files; tests/data/README.md describes them): the same calls on the same input, values, indices
// and the gradient of L = Σ_calls sum(out ⊙ G). Sorted and picked values are copies of inputs,
// so they and the indices must agree exactly (NaN where PyTorch has NaN); logsumexp and the
// gradients to 1e-10 relative in float64 (a few roundings apart) and 1e-5 in float32 (the
// float32 sums here accumulate in double while PyTorch's accumulate in float, 6e-8 an addition
// over 60 terms at most; a wrong term moves the result by far more).
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <string>

#include "cppgrad.h"
#include "parity_helpers.h"

using namespace cppgrad;
using namespace cppgrad::paritytest;

namespace {

struct OpsCase {
  nn::SafetensorsContents file;
  double tolerance = kRelTol;
  DType dtype = kFloat64;
  Tensor x;     // in.x, a leaf that requires grad
  Tensor loss;  // Σ over the calls with a gradient of sum(out ⊙ G)
};

OpsCase open_ops_case(const std::string& name) {
  OpsCase c{nn::load_safetensors(kData + "/" + name + ".safetensors"), kRelTol, kFloat64, {}, {}};
  if (meta(c.file, "float_dtype") == "F32") c.tolerance = 1e-5, c.dtype = kFloat32;
  c.x = input(c.file, "x");
  c.loss = zeros({}, c.dtype);
  return c;
}

// out.<call> holds values close to PyTorch's (logsumexp) or equal to them (sorted copies).
void expect_values(OpsCase& c, const std::string& call, const Tensor& got, bool exact) {
  INFO(call);
  const Tensor& want = c.file.at("out." + call);
  REQUIRE(got.shape() == want.shape());
  CHECK(got.dtype() == want.dtype());
  if (exact)
    CHECK(check::mismatch(check::values(got), check::values(want), 0.0) == "");
  else
    CHECK(check::max_rel_diff(got, want) < c.tolerance);
  if (c.file.contains("in.G." + call)) c.loss = c.loss + (got * c.file.at("in.G." + call)).sum();
}

void expect_picked(OpsCase& c, const std::string& call, const ValuesIndices& got) {
  expect_values(c, call, got.values, /*exact=*/true);
  INFO(call);
  const Tensor& want = c.file.at("out." + call + ".indices");
  REQUIRE(got.indices.shape() == want.shape());
  CHECK(got.indices.dtype() == kInt64);
  CHECK(check::values(got.indices) == check::values(want));
}

void expect_gradient(OpsCase& c) {
  c.loss.backward();
  REQUIRE(c.x.grad().defined());
  CHECK(check::max_rel_diff(c.x.grad(), c.file.at("grad.x")) < c.tolerance);
}

}  // namespace

TEST_CASE("parity with PyTorch: logsumexp over one dim, two dims with keepdim and every dim, rows near ±800") {
  for (const char* name : {"ops_logsumexp_f64", "ops_logsumexp_f32"}) {
    INFO(name);
    OpsCase c = open_ops_case(name);
    CHECK(meta(c.file, "op") == "logsumexp");
    expect_values(c, "dim1", c.x.logsumexp(1), false);
    expect_values(c, "dims02_keepdim", logsumexp(c.x, {0, 2}, /*keepdim=*/true), false);
    expect_values(c, "last", logsumexp(c.x, -1), false);
    expect_values(c, "all", c.x.logsumexp({0, 1, 2}), false);
    expect_gradient(c);
  }
}

TEST_CASE("parity with PyTorch: stable sort along every dim, both directions, ties, ±inf, NaN and int64") {
  for (const char* name : {"ops_sort_f64", "ops_sort_f32"}) {
    INFO(name);
    OpsCase c = open_ops_case(name);
    CHECK(meta(c.file, "op") == "sort");
    expect_picked(c, "last", c.x.sort());
    expect_picked(c, "dim1_descending", sort(c.x, 1, /*descending=*/true, /*stable=*/true));
    expect_picked(c, "dim0", c.x.sort(0));
    expect_picked(c, "ints_descending", c.file.at("in.ints").sort(1, true));
    CHECK(check::values(c.x.argsort(1, true)) == check::values(c.file.at("out.dim1_descending.indices")));
    expect_gradient(c);
  }
}

TEST_CASE("parity with PyTorch: topk largest and smallest along every dim, with ±inf and NaN") {
  OpsCase c = open_ops_case("ops_topk_f64");
  CHECK(meta(c.file, "op") == "topk");
  expect_picked(c, "last_k3", c.x.topk(3));
  expect_picked(c, "dim1_k2_smallest", topk(c.x, 2, 1, /*largest=*/false));
  expect_picked(c, "dim0_k3", c.x.topk(3, 0));
  expect_picked(c, "last_k0", c.x.topk(0));
  expect_gradient(c);
}

TEST_CASE("parity with PyTorch: the float functions of int64 and bool tensors are float32, as PyTorch's") {
  const nn::SafetensorsContents file = nn::load_safetensors(kData + "/ops_float_functions_of_ints.safetensors");
  CHECK(meta(file, "op") == "float functions of integers");
  const std::map<std::string, std::function<Tensor(const Tensor&)>> calls{
      {"exp", [](const Tensor& t) { return t.exp(); }},         {"log", [](const Tensor& t) { return log(t); }},
      {"sqrt", [](const Tensor& t) { return t.sqrt(); }},       {"rsqrt", [](const Tensor& t) { return t.rsqrt(); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }},        {"sigmoid", [](const Tensor& t) { return t.sigmoid(); }},
      {"erf", [](const Tensor& t) { return t.erf(); }},         {"sin", [](const Tensor& t) { return sin(t); }},
      {"cos", [](const Tensor& t) { return t.cos(); }}};
  for (const auto& [name, f] : calls)
    for (const auto& [input, call] : {std::pair{"x", name}, std::pair{"flags", name + ".bool"}}) {
      INFO(call);
      const Tensor& x = file.at(std::string("in.") + input);
      const Tensor& want = file.at("out." + call);
      const Tensor got = f(x);
      CHECK(got.dtype() == kFloat32);
      CHECK(!got.requires_grad());  // an integer tensor takes no gradient
      REQUIRE(got.shape() == want.shape());
      // float32 functions a few ulps apart from PyTorch's (the vectorised forms); log(0) = -inf,
      // log(-1) = NaN and rsqrt(0) = inf exactly where PyTorch has them
      CHECK(check::mismatch(check::values(got), check::values(want), 1e-6) == "");
    }
}
