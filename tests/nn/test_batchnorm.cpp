// BatchNorm1d and F::batch_norm (torch.nn.BatchNorm1d's semantics): PyTorch's own numbers over
// several training steps and an eval step (scripts/make_parity_refs.py writes them), values and
// running statistics by hand, momentum = None as a cumulative average, the state_dict's names,
// gradcheck and gradgradcheck through the batch's statistics, and the errors.
#include <doctest/doctest.h>

#include <cmath>

#include "cppgrad.h"
#include "nn_helpers.h"
#include "parity_helpers.h"

using namespace cppgrad;
using namespace cppgrad::nn;
namespace F = cppgrad::nn::functional;
using namespace nntest;
using namespace paritytest;

namespace {

std::optional<double> momentum_of(const std::string& text) {
  if (text == "None") return std::nullopt;
  return std::stod(text);
}

}  // namespace

TEST_CASE("parity with PyTorch: BatchNorm1d over training steps and an eval step, (N, C) and (N, C, L)") {
  for (const char* name : {"batchnorm1d_nc", "batchnorm1d_ncl_cumulative", "batchnorm1d_nc_two_rows",
                           "batchnorm1d_ncl_one_row", "batchnorm1d_untracked_noaffine"}) {
    INFO(std::string(name));
    const nn::SafetensorsContents file = nn::load_safetensors(kData + "/" + name + ".safetensors");
    REQUIRE(meta(file, "module") == "BatchNorm1d");
    BatchNorm1d bn(meta_int(file, "num_features"), std::stod(meta(file, "eps")), momentum_of(meta(file, "momentum")),
                   meta_flag(file, "affine"), meta_flag(file, "track_running_stats"));
    bn.to(kFloat64);
    // Strict: PyTorch's state_dict names (weight, bias, running_mean, running_var,
    // num_batches_tracked), no more, no fewer, int64 counter included.
    bn.load_state_dict(params_of(file));
    const int64_t train_steps = meta_int(file, "train_steps");
    Tensor loss = zeros({}, kFloat64);
    std::vector<Tensor> inputs;
    for (int64_t step = 0; step <= train_steps; ++step) {
      const std::string i = std::to_string(step);
      bn.train(step < train_steps);
      inputs.push_back(input(file, "x" + i));
      Tensor y = bn.forward(inputs.back());
      expect_close(y, file, "out.y" + i);
      loss = loss + (y * file.at("in.G" + i)).sum();
      if (step == train_steps - 1) {
        size_t compared = 0;
        for (const auto& [buffer, t] : bn.named_buffers()) {
          INFO(buffer);
          if (t.dtype() == kInt64)
            CHECK(values(t) == values(file.at("state." + buffer)));
          else
            expect_close(t, file, "state." + buffer);
          ++compared;
        }
        CHECK(compared == (bn.track_running_stats ? 3u : 0u));
      }
    }
    loss.backward();
    for (int64_t step = 0; step <= train_steps; ++step)
      expect_close(inputs[static_cast<size_t>(step)].grad(), file, "grad.x" + std::to_string(step));
    size_t gradients = 0;  // every grad.param.<name> (buffers have none) against the parameter's
    for (const auto& [param, p] : bn.named_parameters()) expect_close(p.grad(), file, "grad.param." + param), ++gradients;
    CHECK(gradients == (bn.affine ? 2u : 0u));
    for (const auto& [stored, t] : file.tensors) CHECK((stored.rfind("grad.param.", 0) != 0 || bn.affine));
  }
}

TEST_CASE("BatchNorm1d normalises each channel by its batch's mean and biased variance, and keeps unbiased running ones") {
  BatchNorm1d bn(2, /*eps=*/0.0);
  bn.to(kFloat64);
  set_values(bn.weight, {2, 1});
  set_values(bn.bias, {0, 10});
  // channel 0: 1, 3 (mean 2, biased var 1, unbiased 2); channel 1: 0, 0, ... (var 0 + eps 0 would
  // divide by zero, so the second channel varies too): 4, 8 (mean 6, var 4, unbiased 8).
  Tensor x = tensor({{1, 4}, {3, 8}}, kFloat64);
  check_values(bn.forward(x), {-2, 9, 2, 11});
  // running = 0.9 · (0, 0) + 0.1 · (2, 6);  0.9 · (1, 1) + 0.1 · (2, 8)
  check_values(bn.running_mean, {0.2, 0.6});
  check_values(bn.running_var, {1.1, 1.7});
  CHECK(bn.num_batches_tracked.item() == 1);
  CHECK(bn.num_batches_tracked.dtype() == kInt64);
  // Eval: the running statistics, and nothing changes.
  bn.eval();
  check_values(bn.forward(x), {2 * (1 - 0.2) / std::sqrt(1.1), 10 + (4 - 0.6) / std::sqrt(1.7),
                               2 * (3 - 0.2) / std::sqrt(1.1), 10 + (8 - 0.6) / std::sqrt(1.7)});
  check_values(bn.running_mean, {0.2, 0.6});
  CHECK(bn.num_batches_tracked.item() == 1);

  // (N, C, L): the statistics run over N and L. Channel 0 holds 1, 2, 3, 4 (two rows of two).
  BatchNorm1d bn3(1, 0.0, 1.0, /*affine=*/false);
  bn3.to(kFloat64);
  Tensor x3 = tensor(std::vector<double>{1, 2, 3, 4}, Shape{2, 1, 2}).to(kFloat64);
  const double s = std::sqrt(1.25);  // biased variance of 1..4
  check_values(bn3.forward(x3), {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s});
  check_values(bn3.running_mean, {2.5});  // momentum 1: the last batch's
  check_values(bn3.running_var, {5.0 / 3});  // unbiased: 5 / 3
}

TEST_CASE("BatchNorm1d with momentum None keeps the cumulative average of the batches' statistics") {
  BatchNorm1d bn(1, 1e-5, std::nullopt);
  bn.to(kFloat64);
  const std::vector<std::vector<double>> batches{{0, 2}, {4, 10}, {-1, 1}};
  double mean_sum = 0, var_sum = 0;
  for (const auto& b : batches) {
    bn.forward(tensor(b, Shape{2, 1}).to(kFloat64));
    mean_sum += (b[0] + b[1]) / 2;
    var_sum += (b[0] - b[1]) * (b[0] - b[1]) / 2;  // unbiased variance of two values
  }
  check_values(bn.running_mean, {mean_sum / 3}, 1e-14);
  check_values(bn.running_var, {var_sum / 3}, 1e-14);  // the initial 1 has weight 1 - 1/1 = 0
  CHECK(bn.num_batches_tracked.item() == 3);
  CHECK(bn.extra_repr() == "1, eps=1e-05, momentum=None, affine=true, track_running_stats=true");
  bn.reset_running_stats();
  check_values(bn.running_mean, {0});
  check_values(bn.running_var, {1});
  CHECK(bn.num_batches_tracked.item() == 0);
}

TEST_CASE("BatchNorm1d's state_dict has PyTorch's names, without running statistics eval uses the batch's") {
  BatchNorm1d bn(3);
  std::vector<std::string> names;
  for (const auto& [name, t] : bn.state_dict()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(bn.named_parameters().size() == 2);
  bn.to(kFloat64);
  CHECK(bn.running_var.dtype() == kFloat64);
  CHECK(bn.num_batches_tracked.dtype() == kInt64);  // the counter stays an integer
  CHECK(bn.num_batches_tracked.dim() == 0);
  CHECK(bn.str() == "BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)");

  BatchNorm1d bare(3, 1e-5, 0.1, /*affine=*/false, /*track_running_stats=*/false);
  CHECK(bare.state_dict().empty());
  bare.to(kFloat64);
  Tensor x = randn64({4, 3}, 8101);
  Tensor trained = bare.forward(x);
  bare.eval();
  CHECK(max_abs_diff(bare.forward(x), trained) == 0.0);
}

TEST_CASE("gradcheck and gradgradcheck batch_norm through the batch's statistics, and in eval") {
  Tensor x2 = randn64({5, 3}, 8201, true), x3 = randn64({3, 2, 4}, 8202, true);
  Tensor w = randn64({3}, 8203, true), b = randn64({3}, 8204, true), w2 = randn64({2}, 8205, true);
  auto train2 = [&](const std::vector<Tensor>& in) { return F::batch_norm(in[0], {}, {}, in[1], in[2], true, 0.1, 1e-3); };
  CHECK(gradcheck(train2, {x2, w, b}));
  CHECK(gradgradcheck(train2, {x2, w, b}));
  auto train3 = [&](const std::vector<Tensor>& in) { return F::batch_norm(in[0], {}, {}, in[1], {}, true, 0.1, 0.0); };
  CHECK(gradcheck(train3, {x3, w2}));
  CHECK(gradgradcheck(train3, {x3, w2}));
  // Eval: an affine map of x per channel.
  Tensor rm = randn64({2}, 8206), rv = randn64({2}, 8207).abs() + 0.5;
  auto eval3 = [&](const std::vector<Tensor>& in) { return F::batch_norm(in[0], rm, rv, in[1], {}, false); };
  CHECK(gradcheck(eval3, {x3, w2}));
  CHECK(gradgradcheck(eval3, {x3, w2}));
  // The module in training, its running statistics updated at every evaluation gradcheck makes.
  BatchNorm1d bn(2);
  bn.to(kFloat64);
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return bn.forward(in[0]); }, {x3, bn.weight, bn.bias}));
}

TEST_CASE("BatchNorm1d refuses, naming the shapes: one value per channel in training, wrong channels or rank") {
  BatchNorm1d bn(3);
  std::string one_row = error_message([&] { bn.forward(ones({1, 3})); });
  CHECK(contains(one_row, "Expected more than 1 value per channel when training, got input size [1,3]"));
  CHECK(contains(error_message([&] { bn.forward(ones({1, 3, 1})); }), "got input size [1,3,1]"));
  CHECK(bn.num_batches_tracked.item() == 0);  // a refused batch counts for nothing
  bn.forward(ones({1, 3, 2}));                  // one row of two values per channel is a batch
  bn.eval();
  CHECK(bn.forward(ones({1, 3})).shape() == Shape{1, 3});  // eval takes a single row
  CHECK(contains(error_message([&] { bn.forward(ones({2, 4})); }), "input [2,4] has 4 channels (dim 1), not 3"));
  CHECK(contains(error_message([&] { bn.forward(ones({2, 3, 4, 5})); }), "expected 2D or 3D input"));
  CHECK(contains(error_message([&] { bn.forward(ones({2, 3}, kInt64)); }), "floating"));
  CHECK(contains(error_message([&] { F::batch_norm(ones({2, 3}), {}, {}); }), "running_mean and running_var"));
  CHECK(contains(error_message([&] { F::batch_norm(ones({2, 3}), zeros({2}), ones({2}), {}, {}, true); }),
                 "running_mean [2] should have one value per channel, (3), for input [2,3]"));
  CHECK(contains(error_message([&] { F::batch_norm(ones({2, 3}), {}, {}, ones({4}), {}, true); }), "weight [4]"));
  CHECK(contains(error_message([&] { BatchNorm1d bad(0); }), "num_features 0"));
  CHECK(contains(error_message([&] { BatchNorm1d bad(3, 1e-5, 1.5); }), "momentum 1.5"));
}
