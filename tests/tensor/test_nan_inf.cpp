// NaN and ±inf through the elementwise rows, clamp, maximum/minimum, the reductions that pick an
// element, where, masked_fill, sort, topk, softmax and relu_dropout, forward and gradient, against
// PyTorch 1.13 (issue 44). Every expected value is PyTorch's: the literals were printed by
// /usr/bin/python3 with torch 1.13.0a0 (Debian 12), from the calls named beside them, on
//   x = torch.tensor([nan, inf, -inf, -1.5, 0.0, 2.0], dtype=..., requires_grad=True)
// with the gradient of y.sum() (so dC = 1). Each case runs in reference mode and in the fast forms
// (the vectorised float32 loops among them), on x repeated 40 times so that the vector bodies and
// their tails both see every value. NaN matches only NaN, an infinity only itself.
#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "helpers.h"
#include "nn/functional.h"
#include "runtime/reference_mode.h"

using namespace cppgrad;
using namespace cppgrad::testing;
using V = std::vector<double>;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const V kSpecial = {kNaN, kInf, -kInf, -1.5, 0.0, 2.0};
constexpr int kRepeat = 40;

V repeated(const V& v) {
  V out;
  for (int r = 0; r < kRepeat; ++r) out.insert(out.end(), v.begin(), v.end());
  return out;
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  V y, dx;  // PyTorch's op(x) and the gradient of op(x).sum()
};

// clang-format off
// torch.relu, torch.sigmoid, torch.tanh, F.silu, F.gelu, F.gelu(approximate="tanh"), torch.exp,
// torch.erf, torch.log, torch.sqrt, torch.abs, torch.sign, x.clamp(-0.5, 1.0), x.clamp(min=-0.5),
// x.clamp(max=1.0); float64.
std::vector<UnaryCase> cases_f64() {
  return {
    {"relu", [](const Tensor& x) { return x.relu(); }, {kNaN, kInf, 0.0, 0.0, 0.0, 2.0}, {1.0, 1.0, 0.0, 0.0, 0.0, 1.0}},
    {"sigmoid", [](const Tensor& x) { return x.sigmoid(); }, {kNaN, 1.0, 0.0, 0.18242552380635635, 0.5, 0.8807970779778823}, {kNaN, 0.0, 0.0, 0.14914645207033286, 0.25, 0.10499358540350662}},
    {"tanh", [](const Tensor& x) { return x.tanh(); }, {kNaN, 1.0, -1.0, -0.9051482536448664, 0.0, 0.9640275800758169}, {kNaN, 0.0, 0.0, 0.1807066389236486, 1.0, 0.07065082485316443}},
    {"silu", [](const Tensor& x) { return x.silu(); }, {kNaN, kInf, kNaN, -0.2736382857095345, 0.0, 1.7615941559557646}, {kNaN, kNaN, kNaN, -0.041294154299142946, 0.5, 1.0907842487848955}},
    {"gelu", [](const Tensor& x) { return x.gelu(); }, {kNaN, kInf, kNaN, -0.10021080190328704, 0.0, 1.9544997361036416}, {kNaN, kNaN, kNaN, -0.1274691922299796, 0.5, 1.085231801078197}},
    {"gelu_tanh", [](const Tensor& x) { return x.gelu("tanh"); }, {kNaN, kInf, kNaN, -0.10042842301976707, 0.0, 1.954597694087775}, {kNaN, kNaN, kNaN, -0.12771079315143308, 0.5, 1.0860992566236183}},
    {"exp", [](const Tensor& x) { return x.exp(); }, {kNaN, kInf, 0.0, 0.22313016014842982, 1.0, 7.38905609893065}, {kNaN, kInf, 0.0, 0.22313016014842982, 1.0, 7.38905609893065}},
    {"erf", [](const Tensor& x) { return x.erf(); }, {kNaN, 1.0, -1.0, -0.9661051464753108, 0.0, 0.9953222650189527}, {kNaN, 0.0, 0.0, 0.11893028922362936, 1.1283791670955126, 0.020666985354092053}},
    {"log", [](const Tensor& x) { return x.log(); }, {kNaN, kInf, kNaN, kNaN, -kInf, 0.6931471805599453}, {kNaN, 0.0, -0.0, -0.6666666666666666, kInf, 0.5}},
    {"sqrt", [](const Tensor& x) { return x.sqrt(); }, {kNaN, kInf, kNaN, kNaN, 0.0, 1.4142135623730951}, {kNaN, 0.0, kNaN, kNaN, kInf, 0.35355339059327373}},
    {"abs", [](const Tensor& x) { return x.abs(); }, {kNaN, kInf, kInf, 1.5, 0.0, 2.0}, {0.0, 1.0, -1.0, -1.0, 0.0, 1.0}},
    {"sign", [](const Tensor& x) { return x.sign(); }, {0.0, 1.0, -1.0, -1.0, 0.0, 1.0}, {0.0, 0.0, 0.0, 0.0, 0.0, 0.0}},
    {"clamp", [](const Tensor& x) { return x.clamp(-0.5, 1.0); }, {kNaN, 1.0, -0.5, -0.5, 0.0, 1.0}, {0.0, 0.0, 0.0, 0.0, 1.0, 0.0}},
    {"clamp_min", [](const Tensor& x) { return x.clamp(-0.5); }, {kNaN, kInf, -0.5, -0.5, 0.0, 2.0}, {0.0, 1.0, 0.0, 0.0, 1.0, 1.0}},
    {"clamp_max", [](const Tensor& x) { return x.clamp(std::nullopt, 1.0); }, {kNaN, 1.0, -kInf, -1.5, 0.0, 1.0}, {0.0, 0.0, 1.0, 1.0, 1.0, 0.0}},
  };
}

// The same calls in float32 (the finite values are float32's, printed as doubles).
std::vector<UnaryCase> cases_f32() {
  std::vector<UnaryCase> c = cases_f64();
  const std::vector<std::pair<V, V>> f32 = {
    {{kNaN, kInf, 0.0, 0.0, 0.0, 2.0}, {1.0, 1.0, 0.0, 0.0, 0.0, 1.0}},
    {{kNaN, 1.0, 0.0, 0.18242552876472473, 0.5, 0.8807970285415649}, {kNaN, 0.0, 0.0, 0.14914646744728088, 0.25, 0.10499362647533417}},
    {{kNaN, 1.0, -1.0, -0.9051482677459717, 0.0, 0.9640275835990906}, {kNaN, 0.0, 0.0, 0.18070662021636963, 1.0, 0.07065081596374512}},
    {{kNaN, kInf, kNaN, -0.2736382782459259, 0.0, 1.7615940570831299}, {kNaN, kNaN, kNaN, -0.0412941612303257, 0.5, 1.0907843112945557}},
    {{kNaN, kInf, kNaN, -0.10021086037158966, 0.0, 1.9544999599456787}, {kNaN, kNaN, kNaN, -0.12746915221214294, 0.5, 1.085231900215149}},
    {{kNaN, kInf, kNaN, -0.10042843222618103, 0.0, 1.9545977115631104}, {kNaN, kNaN, kNaN, -0.12771081924438477, 0.5, 1.0860992670059204}},
    {{kNaN, kInf, 0.0, 0.22313016653060913, 1.0, 7.389056205749512}, {kNaN, kInf, 0.0, 0.22313016653060913, 1.0, 7.389056205749512}},
    {{kNaN, 1.0, -1.0, -0.9661051630973816, 0.0, 0.9953222870826721}, {kNaN, 0.0, 0.0, 0.11893029510974884, 1.128379225730896, 0.02066698670387268}},
    {{kNaN, kInf, kNaN, kNaN, -kInf, 0.6931471824645996}, {kNaN, 0.0, -0.0, -0.6666666865348816, kInf, 0.5}},
    {{kNaN, kInf, kNaN, kNaN, 0.0, 1.4142135381698608}, {kNaN, 0.0, kNaN, kNaN, kInf, 0.3535533845424652}},
    {{kNaN, kInf, kInf, 1.5, 0.0, 2.0}, {0.0, 1.0, -1.0, -1.0, 0.0, 1.0}},
    {{0.0, 1.0, -1.0, -1.0, 0.0, 1.0}, {0.0, 0.0, 0.0, 0.0, 0.0, 0.0}},
    {{kNaN, 1.0, -0.5, -0.5, 0.0, 1.0}, {0.0, 0.0, 0.0, 0.0, 1.0, 0.0}},
    {{kNaN, kInf, -0.5, -0.5, 0.0, 2.0}, {0.0, 1.0, 0.0, 0.0, 1.0, 1.0}},
    {{kNaN, 1.0, -kInf, -1.5, 0.0, 1.0}, {0.0, 0.0, 1.0, 1.0, 1.0, 0.0}},
  };
  REQUIRE(f32.size() == c.size());
  for (size_t i = 0; i < c.size(); ++i) std::tie(c[i].y, c[i].dx) = f32[i];
  return c;
}
// clang-format on

// Runs `body` in reference mode and in the fast forms, naming the mode in a failure.
void in_both_modes(const std::function<void()>& body) {
  for (bool reference : {true, false}) {
    ReferenceModeGuard mode(reference);
    INFO((reference ? "reference mode" : "fast forms"));
    body();
  }
}

void check_unary(const std::vector<UnaryCase>& cases, DType dtype, double tol) {
  in_both_modes([&] {
    for (const UnaryCase& c : cases) {
      INFO(c.name << " in " << dtype_name(dtype));
      Tensor x = tensor(repeated(kSpecial), {static_cast<int64_t>(kSpecial.size()) * kRepeat}).to(dtype).requires_grad_();
      Tensor y = c.op(x);
      y.sum().backward();
      CHECK(check::mismatch(values(y), repeated(c.y), tol) == "");
      CHECK(check::mismatch(values(x.grad()), repeated(c.dx), tol) == "");
    }
  });
}
}  // namespace

TEST_CASE("NaN and inf: the unary rows and clamp, forward and gradient, as PyTorch 1.13 (float64)") {
  check_unary(cases_f64(), kFloat64, 1e-12);
}

TEST_CASE("NaN and inf: the unary rows and clamp, forward and gradient, as PyTorch 1.13 (float32, vectorised)") {
  check_unary(cases_f32(), kFloat32, 2e-6);
}

// torch.maximum(a, b) and torch.minimum(a, b), float64, and the gradients of their sum: a NaN on
// either side sends dC to both inputs, as PyTorch's backward (neither wins, nor is it a tie).
TEST_CASE("NaN and inf: maximum and minimum propagate NaN and their gradients follow PyTorch's") {
  in_both_modes([] {
    for (bool is_max : {true, false}) {
      INFO((is_max ? "maximum" : "minimum"));
      Tensor a = tensor({kNaN, 1.0, 2.0, kNaN, 3.0, kInf}, kFloat64).requires_grad_();
      Tensor b = tensor({1.0, kNaN, 2.0, kNaN, -kInf, kInf}, kFloat64).requires_grad_();
      Tensor y = is_max ? maximum(a, b) : minimum(a, b);
      y.sum().backward();
      CHECK(check::mismatch(values(y), is_max ? V{kNaN, kNaN, 2.0, kNaN, 3.0, kInf} : V{kNaN, kNaN, 2.0, kNaN, -kInf, kInf}) == "");
      CHECK(check::mismatch(values(a.grad()), is_max ? V{1.0, 1.0, 0.5, 1.0, 1.0, 0.5} : V{1.0, 1.0, 0.5, 1.0, 0.0, 0.5}) == "");
      CHECK(check::mismatch(values(b.grad()), is_max ? V{1.0, 1.0, 0.5, 1.0, 0.0, 0.5} : V{1.0, 1.0, 0.5, 1.0, 1.0, 0.5}) == "");
    }
  });
}

// torch.max(v), torch.min(v), torch.max(m, 1), torch.min(m, 1), argmax/argmin, float64, on
// v = [1, nan, inf, -inf, 0, -2] and m = [[1, nan, 3], [-inf, 2, inf]]: the NaN wins and its index
// is returned; the gradient goes to it. Two NaNs share the gradient of max(): torch.max of
// [1, nan, 3, nan] backward gives [0, 0.5, 0, 0.5].
TEST_CASE("NaN and inf: max, min, argmax and argmin pick the NaN, as PyTorch") {
  in_both_modes([] {
    Tensor v = tensor({1.0, kNaN, kInf, -kInf, 0.0, -2.0}, kFloat64).requires_grad_();
    for (bool is_max : {true, false}) {
      INFO((is_max ? "max" : "min"));
      v.zero_grad();
      Tensor y = is_max ? v.max() : v.min();
      y.backward();
      CHECK(std::isnan(y.item()));
      CHECK(values(v.grad()) == V{0, 1, 0, 0, 0, 0});
    }
    Tensor two = tensor({1.0, kNaN, 3.0, kNaN}, kFloat64).requires_grad_();
    two.max().backward();
    CHECK(values(two.grad()) == V{0, 0.5, 0, 0.5});
    CHECK(v.argmax().item<int64_t>() == 1);
    CHECK(v.detach().argmin(0).item<int64_t>() == 1);
    Tensor m = tensor({{1.0, kNaN, 3.0}, {-kInf, 2.0, kInf}}, kFloat64).requires_grad_();
    auto [top, top_index] = m.max(1);
    top.sum().backward();
    CHECK(check::mismatch(values(top), {kNaN, kInf}) == "");
    CHECK(values(top_index) == V{1, 2});
    CHECK(values(m.grad()) == V{0, 1, 0, 0, 0, 1});
    m.zero_grad();
    auto [low, low_index] = m.min(1);
    low.sum().backward();
    CHECK(check::mismatch(values(low), {kNaN, -kInf}) == "");
    CHECK(values(low_index) == V{1, 0});
    CHECK(values(m.grad()) == V{0, 1, 0, 1, 0, 0});
    CHECK(values(m.argmax(1)) == V{1, 2});
    CHECK(values(m.argmin(1)) == V{1, 0});
  });
}

// torch.where(c, w, zeros) and w.masked_fill(mask, 5.0) with w = [1, nan, 3, -inf]: a NaN is
// selected or replaced as any value, and the gradient is dC where it was taken.
TEST_CASE("NaN and inf: where and masked_fill select NaN as any value") {
  in_both_modes([] {
    Tensor w = tensor({1.0, kNaN, 3.0, -kInf}, kFloat64).requires_grad_();
    Tensor c = tensor({1.0, 1.0, 0.0, 0.0}) != 0.0;
    Tensor y = where(c, w, zeros({4}, kFloat64));
    y.sum().backward();
    CHECK(check::mismatch(values(y), {1.0, kNaN, 0.0, 0.0}) == "");
    CHECK(values(w.grad()) == V{1, 1, 0, 0});
    w.zero_grad();
    Tensor filled = w.masked_fill(tensor({0.0, 1.0, 0.0, 1.0}) != 0.0, 5.0);
    filled.sum().backward();
    CHECK(values(filled) == V{1, 5, 3, 5});
    CHECK(values(w.grad()) == V{1, 0, 1, 0});
  });
}

// u.sort(), u.sort(descending=True), u.topk(5), u.topk(5, largest=False) on
// u = [1, nan, inf, -inf, nan, 0, 1, -inf, inf, 2] (float32): NaN sorts above +inf.
TEST_CASE("NaN and inf: sort and topk put NaN above +inf, as PyTorch") {
  Tensor u = tensor({1.0, kNaN, kInf, -kInf, kNaN, 0.0, 1.0, -kInf, kInf, 2.0});
  CHECK(values(u.sort().indices) == V{3, 7, 5, 0, 6, 9, 2, 8, 1, 4});
  CHECK(values(u.sort(0, /*descending=*/true).indices) == V{1, 4, 2, 8, 9, 0, 6, 5, 3, 7});
  CHECK(values(u.topk(5).indices) == V{1, 4, 2, 8, 9});
  CHECK(check::mismatch(values(u.topk(5).values), {kNaN, kNaN, kInf, kInf, 2.0}) == "");
  CHECK(values(u.topk(5, 0, /*largest=*/false).indices) == V{3, 7, 5, 0, 6});
}

// Ties in topk come out as PyTorch 1.13's CPU kernel leaves them, which is not by index:
// t.topk(k).indices and t.topk(k, largest=False).indices for t = [3, 1, 3, 2, 1, 3, 1, 2, 3, 1]
// (float32); on 200 values i % 5, where k·64 <= n takes PyTorch's partial_sort branch; and row by
// row on [[2, 1, 2, 2], [0, 0, 1, 0]] (dim 1) and down its columns (dim 0).
TEST_CASE("topk orders tied values as PyTorch 1.13") {
  Tensor t = tensor({3.0, 1, 3, 2, 1, 3, 1, 2, 3, 1});
  const std::vector<std::tuple<int64_t, V, V>> expected = {
      {1, {2}, {6}},
      {3, {2, 8, 5}, {6, 4, 1}},
      {5, {2, 8, 5, 0, 7}, {1, 9, 6, 4, 3}},
      {10, {0, 2, 8, 5, 3, 7, 9, 6, 4, 1}, {1, 9, 6, 4, 3, 7, 0, 8, 2, 5}},
  };
  for (const auto& [k, largest, smallest] : expected) {
    INFO("k = " << k);
    CHECK(values(t.topk(k).indices) == largest);
    CHECK(values(t.topk(k, 0, /*largest=*/false).indices) == smallest);
    CHECK(values(t.to(kFloat64).topk(k).indices) == largest);  // float64 and int64 order alike
    CHECK(values(t.to(kInt64).topk(k, 0, false).indices) == smallest);
  }
  V ramp;
  for (int i = 0; i < 200; ++i) ramp.push_back(i % 5);
  Tensor big = tensor(ramp, {200});
  CHECK(values(big.topk(3).indices) == V{14, 9, 4});
  CHECK(values(big.topk(3, 0, false).indices) == V{10, 5, 0});
  Tensor rows = tensor({{2.0, 1, 2, 2}, {0.0, 0, 1, 0}});
  CHECK(values(rows.topk(2, 1).indices) == V{2, 3, 2, 3});
  CHECK(values(rows.topk(2, 1, false).indices) == V{1, 3, 1, 3});
  CHECK(values(rows.topk(1, 0).indices) == V{0, 0, 0, 0});
}

// torch.softmax(s, 0) and torch.log_softmax(s, 0), float64, and the gradients of
// (y * [1, 2, 3]).sum(): a +inf or a NaN in a row makes the whole row NaN, a -inf is a 0 weight.
// (A row that is -inf throughout gives 0 here and NaN in PyTorch, on purpose: tensor/tensor.h.)
TEST_CASE("NaN and inf: softmax and log_softmax rows with infinities and NaN, as PyTorch") {
  struct Row {
    V in, y, dy, log_y, dlog_y;
  };
  const V nan3 = {kNaN, kNaN, kNaN};
  const std::vector<Row> rows = {
      {{kInf, 1.0, 0.0}, nan3, nan3, nan3, nan3},
      {{kNaN, 1.0, 0.0}, nan3, nan3, nan3, nan3},
      {{kInf, -kInf, 0.0}, nan3, nan3, nan3, nan3},
      {{-kInf, 1.0, 0.0},
       {0.0, 0.7310585786300049, 0.26894142136999516},
       {-0.0, -0.19661193324148193, 0.19661193324148185},
       {-kInf, -0.31326168751822286, -1.3132616875182228},
       {1.0, -2.3863514717800296, 1.3863514717800294}},
  };
  in_both_modes([&] {
    for (const Row& r : rows) {
      INFO("row " << r.in[0] << ", " << r.in[1] << ", " << r.in[2]);
      Tensor s = tensor(r.in, {3}).requires_grad_();
      Tensor weights = tensor({1.0, 2.0, 3.0}, kFloat64);
      Tensor y = s.softmax(0);
      (y * weights).sum().backward();
      CHECK(check::mismatch(values(y), r.y, 1e-12) == "");
      CHECK(check::mismatch(values(s.grad()), r.dy, 1e-12) == "");
      s.zero_grad();
      Tensor log_y = s.log_softmax(0);
      (log_y * weights).sum().backward();
      CHECK(check::mismatch(values(log_y), r.log_y, 1e-12) == "");
      CHECK(check::mismatch(values(s.grad()), r.dlog_y, 1e-12) == "");
    }
  });
}

// dropout(relu(x)) in one kernel and as the two ops (reference mode) with the same generator:
// relu(NaN) is NaN, so every NaN stays NaN (a dropped one too, NaN·0), and its gradient is
// dropout's factor, as relu's is dC there in PyTorch.
TEST_CASE("NaN and inf: relu_dropout passes NaN forward and its gradient, in both forms alike") {
  for (DType dtype : {kFloat32, kFloat64}) {
    INFO(dtype_name(dtype));
    std::vector<V> ys, grads;
    for (bool reference : {true, false}) {
      ReferenceModeGuard mode(reference);
      Generator gen(44);
      Tensor x = tensor(repeated(kSpecial), {static_cast<int64_t>(kSpecial.size()) * kRepeat}).to(dtype).requires_grad_();
      Tensor y = nn::functional::relu_dropout(x, 0.5, /*training=*/true, gen);
      y.sum().backward();
      ys.push_back(values(y));
      grads.push_back(values(x.grad()));
    }
    CHECK(check::mismatch(ys[1], ys[0], 0) == "");
    CHECK(check::mismatch(grads[1], grads[0], 0) == "");
    int kept_nans = 0;
    for (size_t i = 0; i < ys[0].size(); i += kSpecial.size()) {
      CHECK(std::isnan(ys[0][i]));                        // relu(NaN)·factor
      CHECK((grads[0][i] == 0.0 || grads[0][i] == 2.0));  // the factor, 0 or 1/(1 - p)
      CHECK(grads[0][i + 2] == 0.0);                      // -inf: relu's gradient is 0
      kept_nans += grads[0][i] == 2.0;
    }
    CHECK(kept_nans > 0);
  }
}
