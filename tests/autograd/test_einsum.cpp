// einsum (torch.einsum's grammar): PyTorch's values and gradients on 23 equations
// (scripts/make_parity_refs.py writes tests/data/einsum_f64.safetensors), the attention
// subscripts as the same graph as the matmul written by hand, gradcheck and gradgradcheck of
// contractions, diagonals and ellipses, and the errors.
#include <doctest/doctest.h>

#include <sstream>

#include "../common/check.h"
#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using cppgrad::test::leaf;

namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  return parts;
}

std::string einsum_error(std::string_view equation, const std::vector<Tensor>& operands) {
  return check::error_message([&] { einsum(equation, operands); });
}

}  // namespace

TEST_CASE("parity with PyTorch: einsum's values and gradients on 23 equations") {
  const nn::SafetensorsContents file = nn::load_safetensors(std::string(CPPGRAD_TEST_DATA) + "/einsum_f64.safetensors");
  const std::vector<std::string> calls = split(file.metadata.at("calls"), ',');
  CHECK(calls.size() == 23);
  Tensor loss = zeros({}, kFloat64);
  std::vector<std::pair<std::string, Tensor>> operands;  // "call.i" -> the leaf
  for (const std::string& call : calls) {
    const std::string& equation = file.metadata.at("call." + call);
    INFO(call << ": '" << equation << "'");
    std::vector<Tensor> ops;
    for (int i = 0; file.contains("in." + call + "." + std::to_string(i)); ++i) {
      ops.push_back(file.at("in." + call + "." + std::to_string(i)).clone().requires_grad_());
      operands.emplace_back(call + "." + std::to_string(i), ops.back());
    }
    Tensor out = einsum(equation, ops);
    const Tensor& want = file.at("out." + call);
    REQUIRE(out.shape() == want.shape());
    // Float64 sums in another order than PyTorch's: a few roundings apart; a wrong term is O(1).
    CHECK(check::max_rel_diff(out, want) < 1e-10);
    loss = loss + (out * file.at("in.G." + call)).sum();
  }
  loss.backward();
  for (const auto& [name, op] : operands) {
    INFO(name);
    REQUIRE(op.grad().defined());
    CHECK(check::max_rel_diff(op.grad(), file.at("grad." + name)) < 1e-10);
  }
}

TEST_CASE("einsum's attention subscripts are the hand-written matmul: the same numbers, one matmul node") {
  Tensor q = leaf({2, 3, 5, 4}, 9101), k = leaf({2, 3, 6, 4}, 9102), v = leaf({2, 3, 6, 4}, 9103);
  Tensor scores = einsum("bhqd,bhkd->bhqk", {q, k});
  CHECK(scores.shape() == Shape{2, 3, 5, 6});
  // The same products on the same layouts (a batched matmul over B·H instead of B × H): float64
  // values of order 1 agree to rounding, 1e-13; a wrong term would be O(1).
  CHECK(check::max_abs_diff(scores, q.matmul(k.mT())) < 1e-13);
  Tensor p = scores.softmax(-1);
  Tensor out = einsum("bhqk,bhkd->bhqd", {p, v});
  CHECK(check::max_abs_diff(out, p.matmul(v)) < 1e-13);
  // Lowered to one matmul between views: no copy of q, k or v (their reshapes are views).
  CHECK(out.grad_fn()->name() == "ReshapeBackward");
}

TEST_CASE("gradcheck and gradgradcheck einsum: contractions, batch dims, diagonals, traces, ellipses, three operands") {
  const std::vector<std::pair<std::string, std::vector<Shape>>> cases{
      {"ij,jk->ik", {{2, 3}, {3, 4}}},
      {"bhqd,bhkd->bhqk", {{1, 2, 3, 2}, {1, 2, 4, 2}}},
      {"ii->i", {{3, 3}}},
      {"ii", {{3, 3}}},
      {"iij,jk->ik", {{2, 2, 3}, {3, 2}}},
      {"...ij,...jk->...ik", {{2, 2, 3}, {3, 2}}},
      {"b...d,bd->b...", {{2, 2, 3}, {2, 3}}},
      {"ij,jk,kl->il", {{2, 3}, {3, 2}, {2, 2}}},
      {"ij,kj->ik", {{2, 1}, {3, 2}}},
      {"i,j", {{3}, {2}}},
  };
  uint64_t seed = 9200;
  for (const auto& [equation, shapes] : cases) {
    INFO(equation);
    std::vector<Tensor> inputs;
    for (const Shape& shape : shapes) inputs.push_back(leaf(shape, ++seed));
    auto f = [&](const std::vector<Tensor>& in) { return einsum(equation, in); };
    CHECK(gradcheck(f, inputs));
    CHECK(gradgradcheck(f, inputs));
  }
}

TEST_CASE("einsum refuses, naming the equation, the shapes and the index") {
  Tensor a = zeros({2, 3}, kFloat64), b = zeros({4, 5}, kFloat64);
  CHECK(check::contains(einsum_error("ij,jk->ik", {a, b}), "einsum: 'ij,jk->ik' with [2,3] and [4,5]: index j has sizes 3 and 4"));
  CHECK(check::contains(einsum_error("ij,jk->ik", {a}), "names 2 operand(s), 1 given"));
  CHECK(check::contains(einsum_error("ijk->i", {a}), "operand 0 has 2 dims, its subscripts name 3"));
  CHECK(check::contains(einsum_error("ij->k", {a}), "output index k is in no operand"));
  CHECK(check::contains(einsum_error("ij->ii", {a}), "output index i appears twice"));
  CHECK(check::contains(einsum_error("i1->i", {a}), "is not a subscript"));
  CHECK(check::contains(einsum_error("i..j->i", {a}), "'...'"));
  CHECK(check::contains(einsum_error("ij->i->j", {a}), "one '->' at most"));
  CHECK(check::contains(einsum_error("ii->i", {a}), "index i"));
  CHECK(check::contains(einsum_error("ij,jk", {a, zeros({3, 2}, kFloat32)}), "one floating dtype"));
  CHECK(check::contains(einsum_error("ij", {zeros({2, 3}, kInt64)}), "floating"));
  CHECK(check::contains(einsum_error("...ij,...jk", {zeros({2, 2, 3}, kFloat64), zeros({3, 3, 4}, kFloat64)}),
                        "index '...' has sizes 2 and 3"));
}
