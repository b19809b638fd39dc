// Each fast form of the autograd floor against its reference (runtime/reference_mode.h), on the
// same inputs: values and gradients. Each case sets the mode itself, so it compares the two
// forms whichever mode CTest runs the suite in.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "autograd/fast/log_softmax_nll.h"
#include "cppgrad.h"
#include "helpers.h"

using namespace cppgrad;
using check::max_abs_diff;

namespace {

// The output and input gradient of f(x) · G (G fixed), with reference mode on or off.
template <class F>
std::pair<Tensor, std::vector<Tensor>> run_in_mode(bool reference, const std::vector<Tensor>& inputs, F f) {
  ReferenceModeGuard mode(reference);
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.detach().requires_grad_());
  Tensor out = f(leaves);
  Generator gen(99);
  (out * randn(out.shape(), out.dtype(), gen)).sum().backward();
  std::vector<Tensor> grads;
  for (const Tensor& t : leaves) grads.push_back(t.grad());
  return {out.detach(), grads};
}

template <class F>
void check_forms_agree(const std::vector<Tensor>& inputs, F f, double tolerance) {
  auto [fast_out, fast_grads] = run_in_mode(false, inputs, f);
  auto [ref_out, ref_grads] = run_in_mode(true, inputs, f);
  CHECK(max_abs_diff(fast_out, ref_out) <= tolerance);
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("gradient of input ", i);
    CHECK(max_abs_diff(fast_grads[i], ref_grads[i]) <= tolerance);
  }
}

}  // namespace

TEST_CASE("fast forms: layer_norm's fused kernels equal its formula as tensor ops, with and without affine") {
  Generator gen(1);
  for (DType dtype : {kFloat64, kFloat32}) {
    // The two forms sum each row of 37 order-1 values in a different order (eight lanes in double
    // against the reduction kernels in the tensor's dtype): float64 results differ by a few ulps
    // of 1, under 1e-12; float32 ones by a few ulps of 1e-7, under 1e-5.
    const double tolerance = dtype == kFloat64 ? 1e-12 : 1e-5;
    INFO("dtype ", dtype_name(dtype));
    Tensor x = randn({5, 3, 37}, dtype, gen), w = randn({37}, dtype, gen), b = randn({37}, dtype, gen);
    check_forms_agree({x, w, b}, [](const std::vector<Tensor>& in) { return layer_norm(in[0], 1, in[1], in[2], 1e-5); },
                      tolerance);
    check_forms_agree({x}, [](const std::vector<Tensor>& in) { return layer_norm(in[0], 1, {}, {}, 1e-5); }, tolerance);
    check_forms_agree({x, randn({3, 37}, dtype, gen)},
                      [](const std::vector<Tensor>& in) { return layer_norm(in[0], 2, in[1], {}, 1e-5); }, tolerance);
  }
}

// A fused op's gradient under create_graph is its reference's, differentiated by autograd at the
// saved inputs (autograd/fast/fused.h): the second derivative (a Hessian-vector product through a
// non-leaf input with a hook) equals the reference mode's, and the hook runs once a pass.
TEST_CASE("fast forms: layer_norm and masked_softmax's second derivatives equal their reference's") {
  Generator gen(5);
  Tensor x = randn({3, 4, 6}, kFloat64, gen), w = randn({6}, kFloat64, gen), b = randn({6}, kFloat64, gen);
  Tensor added = randn({4, 6}, kFloat64, gen), G = randn({3, 4, 6}, kFloat64, gen), V = randn({3, 4, 6}, kFloat64, gen);
  auto hvp = [&](bool reference, const std::function<Tensor(const Tensor&, const std::vector<Tensor>&)>& f,
                 const std::vector<Tensor>& extra) {
    ReferenceModeGuard mode(reference);
    Tensor leaf = x.detach().requires_grad_();
    std::vector<Tensor> params;
    for (const Tensor& t : extra) params.push_back(t.detach().requires_grad_());
    int hook_calls = 0;
    Tensor h = leaf * 1.5;  // a non-leaf input
    h.register_hook([&](const Tensor& g) {
      ++hook_calls;
      return g;
    });
    std::vector<Tensor> wrt{leaf};
    wrt.insert(wrt.end(), params.begin(), params.end());
    std::vector<Tensor> first = autograd::grad({(f(h, params) * G).sum()}, wrt, {}, false, /*create_graph=*/true);
    CHECK(hook_calls == 1);
    Tensor dot = (first[0] * V).sum();
    for (size_t i = 1; i < first.size(); ++i) dot = dot + first[i].sum();
    std::vector<Tensor> second = autograd::grad({dot}, wrt, {}, false, false, /*allow_unused=*/true);
    CHECK(hook_calls == 2);
    first.insert(first.end(), second.begin(), second.end());
    return first;
  };
  auto agree = [&](const std::function<Tensor(const Tensor&, const std::vector<Tensor>&)>& f,
                   const std::vector<Tensor>& extra) {
    std::vector<Tensor> fast = hvp(false, f, extra), ref = hvp(true, f, extra);
    for (size_t i = 0; i < fast.size(); ++i) {
      INFO("derivative ", i);
      REQUIRE(fast[i].defined() == ref[i].defined());  // bias: no second derivative in either
      if (fast[i].defined()) CHECK(max_abs_diff(fast[i], ref[i]) <= 1e-10);
    }
  };
  agree([](const Tensor& h, const std::vector<Tensor>& p) { return layer_norm(h, 1, p[0], p[1], 1e-5); }, {w, b});
  agree([](const Tensor& h, const std::vector<Tensor>& p) { return masked_softmax(h, p[0], true, 0.7); }, {added});
}

TEST_CASE("fast forms: relu_dropout and dropout's vectorised loops give the reference's numbers") {
  Generator gen(2);
  Tensor x = randn({40, 33}, kFloat32, gen);
  // The mask is word i of an integer stream in both forms, and each output one product with it:
  // the same bits.
  auto relu_drop = [](const std::vector<Tensor>& in) {
    Generator g(17);
    return relu_dropout(in[0], 0.3, g);
  };
  auto drop = [](const std::vector<Tensor>& in) {
    Generator g(17);
    return dropout(in[0], 0.3, g);
  };
  check_forms_agree({x}, relu_drop, 0.0);
  check_forms_agree({x}, drop, 0.0);
}

TEST_CASE("fast forms: the engine's in-place sums of slices equal the slices' own backward") {
  // The q, k and v slices of one projection, a strided slice, a slice of a leaf, and a
  // gradient shared by two inputs: the fast form adds each slice's gradient in place, the
  // reference pads it with zeros and adds out of place. The same additions of the same values
  // in the same order (x + 0 is x exactly): equal, the tolerance only rounding's margin.
  auto f = [](const std::vector<Tensor>& in) {
    Tensor y = in[0] * 2.0;
    std::vector<Tensor> qkv = y.chunk(3, 1);
    Tensor every_other = y.slice(0, 1, 4, 2);
    Tensor shared = qkv[0] + qkv[0];
    return (shared * qkv[1]).sum() + (qkv[2] * 3.0).sum() + (every_other * every_other).sum() + (y * y).sum() +
           (in[1].narrow(0, 2, 3) * in[1].narrow(0, 2, 3)).sum();
  };
  Generator gen(3);
  check_forms_agree({randn({4, 6}, kFloat64, gen), randn({6, 2}, kFloat64, gen)}, f, 1e-12);
}

TEST_CASE("fast forms: softmax's vectorised exp is within float32 rounding of std::exp") {
  Generator gen(4);
  Tensor x = randn({6, 300}, kFloat32, gen) * 4.0;
  Tensor mask = rand({6, 300}, kFloat32, gen).lt(full({}, 0.2, kFloat32));
  // exp_float is within 2 ulp of the exact exp (tests/tensor/test_softmax.cpp); sums of 300
  // weights of at most 1 in float32 round to a few 1e-7: 1e-6 bounds both.
  check_forms_agree({x}, [](const std::vector<Tensor>& in) { return in[0].softmax(1); }, 1e-6);
  check_forms_agree({x}, [](const std::vector<Tensor>& in) { return in[0].log_softmax(1); }, 1e-5);
  check_forms_agree({x}, [&](const std::vector<Tensor>& in) { return masked_softmax(in[0], mask, false, 0.5); }, 1e-6);
  Tensor added = randn({1, 300}, kFloat32, gen);
  check_forms_agree({x, added}, [](const std::vector<Tensor>& in) { return masked_softmax(in[0], in[1], true, 0.5); },
                    1e-6);
}

// Cross-entropy's −log softmax(x)[target] in one kernel each way (autograd/fast/log_softmax_nll.h)
// against log_softmax then gather, both in fast mode: the shift from the same row functions, y
// made again as log_softmax writes it, and a row sum of one non-zero term: the same bits, for
// the value and the gradient, whatever that gradient is (zeros of both signs included, as an
// ignored target's row gets).
TEST_CASE("fast forms: cross-entropy's fused log_softmax and gather give their bits, forward and backward") {
  ReferenceModeGuard fast_mode(false);
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    const std::vector<double> x = a.to(kFloat64).to_vector<double>(), y = b.to(kFloat64).to_vector<double>();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (std::signbit(x[i]) != std::signbit(y[i]) || !(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]))))
        return false;
    return true;
  };
  Generator gen(5);
  for (DType dtype : {kFloat32, kFloat64}) {
    INFO("dtype ", dtype_name(dtype));
    // 9 rows of 1,000 classes (the vectorised rows' blocks, and a tail), one of them far below the rest
    Tensor x = randn({9, 1000}, dtype, gen) * 4.0;
    x.narrow(0, 3, 1).sub_(full({}, 1e4, dtype));
    Tensor target = randint(0, 1000, {9}, gen);
    Tensor g = randn({9}, dtype, gen);
    g.narrow(0, 1, 1).fill_(0.0);
    g.narrow(0, 2, 1).fill_(-0.0);
    Tensor fused_x = x.detach().requires_grad_(), formula_x = x.detach().requires_grad_();
    Tensor fused = fast::log_softmax_nll(fused_x, target);
    REQUIRE(fused.defined());
    Tensor formula = -formula_x.log_softmax(1).gather(1, target.unsqueeze(1)).squeeze(1);
    CHECK(same_bits(fused, formula));
    fused.backward(g);
    formula.backward(g);
    CHECK(same_bits(fused_x.grad(), formula_x.grad()));
  }
  // Declined where log_softmax's reference row must run: a row of −inf, or logits that are not
  // one contiguous matrix.
  Tensor masked = zeros({2, 5});
  masked.narrow(0, 1, 1).fill_(-std::numeric_limits<double>::infinity());
  CHECK_FALSE(fast::log_softmax_nll(masked, zeros({2}, kInt64)).defined());
  CHECK_FALSE(fast::log_softmax_nll(randn({5, 2}, kFloat32, gen).t(), zeros({2}, kInt64)).defined());
  CHECK_THROWS_WITH_AS(fast::log_softmax_nll(zeros({2, 5}), full({2}, 5.0, kInt64)),
                       doctest::Contains("target 5 of row 0 is out of range for 5 classes"), Error);
}

// A tied table (an embedding whose weight is also the output layer's): index_select's rows add
// into the gradient that has already arrived, each row's contributions summed first in index
// order (autograd/fast/accumulate.h), which is what index_select's backward (a table of zeros
// with the rows added in index order) followed by the sum gives, bit for bit, without that
// table of zeros. Checked against that formula's bits, and by the memory the backward takes.
TEST_CASE("fast forms: a tied table's selected rows add into its gradient, with the bits of index_select's backward") {
  ReferenceModeGuard fast_mode(false);
  Generator gen(6);
  const int64_t rows = 4096, width = 64;  // 1 MiB of float32
  Tensor index = tensor({3, 7, 3, 3, 4095, 0, 7}, kInt64);
  Tensor dense = randn({rows, width}, kFloat32, gen), picked = randn({7, width}, kFloat32, gen);
  Tensor w = randn({rows, width}, kFloat32, gen).requires_grad_();
  // The engine retraces the forward in reverse creation order: the output layer's term, made
  // after the rows as in a model, gives w its gradient first.
  Tensor selected = w.index_select(0, index);
  Tensor loss = (selected * picked).sum() + (w * dense).sum();
  reset_peak_allocated();
  const int64_t before = allocator_stats().in_use_bytes;
  loss.backward();
  const int64_t backward_peak = allocator_stats().peak_bytes - before;
  Tensor expected = dense + index_add(zeros({rows, width}, kFloat32), 0, index, picked);
  std::vector<float> got = w.grad().to_vector<float>(), want = expected.to_vector<float>();
  CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  // The gradient itself (1 MiB) and the rows, but no second table: under 1.5 MiB at the peak.
  CHECK(backward_peak < rows * width * 4 * 3 / 2);
  // A gradient that arrived shared (an add hands one tensor to both its inputs) is not written
  // in place: the rows go into a copy, and the other input's gradient stays what it was.
  Tensor u = randn({rows, width}, kFloat32, gen).requires_grad_();
  Tensor w2 = w.detach().requires_grad_();
  Tensor selected_again = w2.index_select(0, index);  // made first, so its backward runs last
  Tensor shared_loss = (selected_again * picked).sum() + ((w2 + u) * dense).sum();
  shared_loss.backward();
  std::vector<float> got_w = w2.grad().to_vector<float>(), got_u = u.grad().to_vector<float>(),
                     want_u = dense.to_vector<float>();
  CHECK(std::memcmp(got_w.data(), want.data(), got_w.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(got_u.data(), want_u.data(), got_u.size() * sizeof(float)) == 0);
  // An index changed in place after the forward fails the backward, as index_select's own
  // backward, which reads the index it saved, does.
  Tensor changed = tensor({1, 2}, kInt64);
  Tensor v = randn({4, 3}, kFloat32, gen).requires_grad_();
  Tensor twice = (v.index_select(0, changed) * 1.0).sum() + v.sum();
  changed.add_(full({}, 1.0, kInt64));
  CHECK_THROWS_WITH_AS(twice.backward(), doctest::Contains("modified by an in-place operation"), Error);
}
