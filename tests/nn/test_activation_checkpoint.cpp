// Activation checkpointing (autograd::checkpoint, and the Transformer stacks' option): the
// gradients are those of the plain model bit for bit (the replay runs the same kernels on the
// same values in the same order, dropout included), the random stream goes on as if nothing
// had been replayed, memory falls, and the unsupported uses fail with a clear Error.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cppgrad.h"
#include "runtime/allocator.h"

using namespace cppgrad;
using namespace cppgrad::nn;

namespace {

std::vector<double> as_doubles(const Tensor& t) { return t.to(kFloat64).contiguous().to_vector<double>(); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Every parameter's gradient and the input's, after one backward of sum(out · G).
struct Run {
  std::vector<double> output, input_grad;
  std::vector<std::vector<double>> param_grads;
  Generator::State rng_after;
};

// A 3-layer encoder with dropout, in training mode, on a fixed input: checkpointed or not.
Run encoder_run(bool checkpointed, DType dtype) {
  manual_seed(7);
  TransformerEncoder encoder(TransformerLayerOptions(8, 2).dim_feedforward(16).dropout(0.2), 3);
  encoder.to(dtype);
  encoder.train();
  encoder.set_checkpoint_layers(checkpointed);
  Generator data(3);
  Tensor x = randn({2, 5, 8}, dtype, data).requires_grad_();
  Tensor padding = zeros({2, 5}, kBool);
  {
    NoGradGuard no_grad;
    padding.select(0, 1).narrow(0, 3, 2).fill_(1.0);  // the second sequence has 3 tokens
  }
  Tensor G = randn({2, 5, 8}, dtype, data);
  manual_seed(11);  // dropout's stream
  Tensor out = encoder.forward(x, {}, padding);
  (out * G).sum().backward();
  Run run{as_doubles(out), as_doubles(x.grad()), {}, default_generator().state()};
  for (const Tensor& p : encoder.parameters()) run.param_grads.push_back(as_doubles(p.grad()));
  return run;
}

}  // namespace

TEST_CASE("checkpoint: a function's gradients equal the plain ones bit for bit") {
  Generator gen(1);
  Tensor W = randn({4, 4}, kFloat64, gen).requires_grad_();
  Tensor x = randn({3, 4}, kFloat64, gen).requires_grad_();
  auto f = [&](const std::vector<Tensor>& in) { return (in[0].matmul(W).tanh() * in[0]).sum({1}); };

  Tensor plain = f({x});
  plain.sum().backward();
  const std::vector<double> dx = as_doubles(x.grad()), dW = as_doubles(W.grad());
  x.zero_grad();
  W.zero_grad();

  Tensor y = autograd::checkpoint(f, {x});
  CHECK(as_doubles(y) == as_doubles(plain));
  CHECK(y.grad_fn()->name() == "CheckpointBackward");
  y.sum().backward();
  CHECK(as_doubles(x.grad()) == dx);
  CHECK(as_doubles(W.grad()) == dW);  // W was never passed in: found as a parameter fn reads
}

TEST_CASE("checkpoint: gradcheck through a checkpointed function, inputs and parameters") {
  Generator gen(2);
  Tensor W = randn({3, 3}, kFloat64, gen).requires_grad_();
  auto inner = [&](const std::vector<Tensor>& in) { return (in[0].matmul(W) + in[1]).sigmoid() * in[1]; };
  auto checkpointed = [&](const std::vector<Tensor>& in) {
    return autograd::checkpoint(inner, {in[0], in[1]}) + in[2].matmul(W).sum();
  };
  Tensor a = randn({2, 3}, kFloat64, gen).requires_grad_();
  Tensor b = randn({2, 3}, kFloat64, gen).requires_grad_();
  CHECK(gradcheck(checkpointed, {a, b, W}));
}

TEST_CASE("checkpoint: a Transformer encoder with dropout gives the same output and gradients bit for bit") {
  const Run plain = encoder_run(false, kFloat64);
  const Run checkpointed = encoder_run(true, kFloat64);
  CHECK(checkpointed.output == plain.output);
  CHECK(checkpointed.input_grad == plain.input_grad);
  REQUIRE(checkpointed.param_grads.size() == plain.param_grads.size());
  for (size_t i = 0; i < plain.param_grads.size(); ++i) CHECK(checkpointed.param_grads[i] == plain.param_grads[i]);
  // The replays restored the generator: the stream after backward is where the plain run left it.
  CHECK(checkpointed.rng_after.s == plain.rng_after.s);

  const Run plain32 = encoder_run(false, kFloat32);
  const Run checkpointed32 = encoder_run(true, kFloat32);
  CHECK(checkpointed32.input_grad == plain32.input_grad);
  for (size_t i = 0; i < plain32.param_grads.size(); ++i) CHECK(checkpointed32.param_grads[i] == plain32.param_grads[i]);
}

TEST_CASE("checkpoint: a whole Transformer (the decoder reads the encoder's output as an input)") {
  struct Grads {
    std::vector<double> tgt;
    std::vector<std::pair<std::string, std::vector<double>>> params;
  };
  auto run = [](bool checkpointed) {
    manual_seed(5);
    Transformer model(TransformerOptions(8, 2).num_encoder_layers(2).num_decoder_layers(2).dim_feedforward(16).dropout(0.1));
    model.to(kFloat64);
    model.set_checkpoint_layers(checkpointed);
    Generator data(9);
    Tensor src = randn({2, 4, 8}, kFloat64, data), tgt = randn({2, 3, 8}, kFloat64, data).requires_grad_();
    Tensor causal = generate_square_subsequent_mask(3, kFloat64);
    manual_seed(13);
    model.forward(src, tgt, {}, causal).square().sum().backward();
    Grads g{as_doubles(tgt.grad()), {}};
    for (const auto& [name, p] : model.named_parameters()) g.params.emplace_back(name, as_doubles(p.grad()));
    return g;
  };
  const Grads plain = run(false), checkpointed = run(true);
  CHECK(checkpointed.tgt == plain.tgt);
  REQUIRE(plain.params.size() == checkpointed.params.size());
  for (size_t i = 0; i < plain.params.size(); ++i) {
    const auto& [name, expected] = plain.params[i];
    const std::vector<double>& got = checkpointed.params[i].second;
    INFO(name);
    REQUIRE(got.size() == expected.size());
    if (name.rfind("decoder.", 0) == 0) {
      CHECK(got == expected);  // the decoder's layers replay exactly
      continue;
    }
    // The encoder's output (memory) is read by both decoder layers, twice each (key and value).
    // Plain, its four gradients are added one by one; checkpointed, each layer's two are added
    // inside its replay and arrive as one: (a + b) + (c + d) against ((a + b) + c) + d. The
    // encoder's gradients therefore agree to rounding, not to the bit (measured: ~1e-25 here).
    double worst = 0, scale = 0;
    for (size_t j = 0; j < got.size(); ++j) {
      const double diff = std::abs(got[j] - expected[j]);
      worst = diff > worst || diff != diff ? diff : worst;  // NaN-aware
      scale = std::max(scale, std::abs(expected[j]));
    }
    CHECK(worst <= 1e-12 * std::max(scale, 1.0));
  }
}

TEST_CASE("checkpoint: nested checkpoints, and autograd::grad through one writes no .grad") {
  Generator gen(4);
  Tensor W = randn({4, 4}, kFloat64, gen).requires_grad_();
  Tensor x = randn({2, 4}, kFloat64, gen).requires_grad_();
  auto layer = [&](const std::vector<Tensor>& in) { return in[0].matmul(W).relu(); };
  auto two_layers = [&](const std::vector<Tensor>& in) {
    return autograd::checkpoint(layer, {autograd::checkpoint(layer, {in[0]})});
  };
  Tensor plain = layer({layer({x})}).sum();
  const std::vector<Tensor> expected = autograd::grad({plain}, {x, W});

  Tensor nested = autograd::checkpoint(two_layers, {x}).sum();
  const std::vector<Tensor> got = autograd::grad({nested}, {x, W});
  CHECK(as_doubles(got[0]) == as_doubles(expected[0]));
  CHECK(as_doubles(got[1]) == as_doubles(expected[1]));
  CHECK_FALSE(W.grad().defined());
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("checkpoint: the memory of a deep stack falls to about one layer's activations") {
  auto peak_bytes = [](bool checkpointed) {
    manual_seed(0);
    TransformerEncoder encoder(TransformerLayerOptions(32, 4).dim_feedforward(128).dropout(0.1), 8);
    encoder.set_checkpoint_layers(checkpointed);
    Tensor x = randn({4, 64, 32});
    Tensor loss = encoder.forward(x).square().mean();  // warm the allocator once
    loss.backward();
    encoder.zero_grad();
    reset_peak_allocated();
    const int64_t before = allocator_stats().in_use_bytes;
    loss = encoder.forward(x).square().mean();
    loss.backward();
    return allocator_stats().peak_bytes - before;
  };
  const int64_t plain = peak_bytes(false), checkpointed = peak_bytes(true);
  MESSAGE("peak bytes above the model, 8 layers: plain ", plain, ", checkpointed ", checkpointed);
  // Allocation sizes do not depend on the CPU or BLAS kernel: the ratio is exact, not timed.
  // Eight layers' activations against one layer's plus eight layer outputs: well under half.
  CHECK(checkpointed * 2 < plain);
}

TEST_CASE("checkpoint: refused uses name what to do") {
  Generator gen(6);
  Tensor W = randn({3, 3}, kFloat64, gen).requires_grad_();
  Tensor x = randn({2, 3}, kFloat64, gen).requires_grad_();

  Tensor outside = x * 2.0;  // has a history, and is not passed in
  const std::string captured =
      error_of([&] { autograd::checkpoint([&](const std::vector<Tensor>& in) { return in[0].matmul(W) + outside; }, {x}); });
  CHECK(captured.find("checkpoint") != std::string::npos);
  CHECK(captured.find("passed in the inputs") != std::string::npos);

  Tensor y = autograd::checkpoint([&](const std::vector<Tensor>& in) { return in[0].matmul(W).tanh(); }, {x}).sum();
  const std::string twice = error_of([&] { autograd::grad({y}, {x}, {}, false, /*create_graph=*/true); });
  CHECK(twice.find("double backward") != std::string::npos);

  // Under no-grad it is the function itself.
  NoGradGuard no_grad;
  Tensor z = autograd::checkpoint([&](const std::vector<Tensor>& in) { return in[0].matmul(W); }, {x});
  CHECK_FALSE(z.requires_grad());
}
