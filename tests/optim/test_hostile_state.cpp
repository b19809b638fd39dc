// Untrusted optimizer, schedule and average state: every entry load_state_dict reads is checked
// for presence, dtype, shape and range, and a bad one is one Error naming the key, never a
// crash (a 0-d exp_avg), a hang (a step of -2^62) or a silently restarted schedule.
#include <doctest/doctest.h>

#include <limits>

#include "cppgrad.h"
#include "optim_helpers.h"

using namespace cppgrad;
using namespace cppgrad::optim;
using optimtest::error_message;
using optimtest::param;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Two parameters stepped once by `opt`: its state then holds every buffer.
template <class Opt>
nn::NamedTensors stepped_state(Opt& opt, const std::vector<Tensor>& params) {
  for (const Tensor& p : params) p.sum().backward();
  opt.step();
  return opt.state_dict();
}

// `state` with entry `key` replaced by `value` (or removed when `value` is undefined).
nn::NamedTensors with_entry(nn::NamedTensors state, const std::string& key, const Tensor& value) {
  nn::NamedTensors out;
  bool found = false;
  for (auto& [name, t] : state) {
    if (name == key) {
      found = true;
      if (value.defined()) out.emplace_back(name, value);
    } else {
      out.emplace_back(name, t);
    }
  }
  if (!found && value.defined()) out.emplace_back(key, value);
  return out;
}

// The message load_state_dict gives for `state`; the optimizer must be left as it was.
template <class Opt>
std::string refusal(Opt& opt, const nn::NamedTensors& state) {
  const nn::NamedTensors before = opt.state_dict();
  const std::string message = error_message([&] { opt.load_state_dict(state); });
  CHECK(optimtest::identical(opt.state_dict(), before));
  return message;
}

}  // namespace

TEST_CASE("hostile optimizer state: Adam refuses every malformed entry, naming its key") {
  std::vector<Tensor> params = {param({1, 2, 3}), param({4, 5})};
  Adam opt(params, AdamOptions(0.1).amsgrad(true));
  const nn::NamedTensors good = stepped_state(opt, params);
  opt.load_state_dict(good);  // the real state loads

  struct Row {
    std::string key;
    Tensor value;  // undefined: the entry is removed
    std::string phrase;
  };
  const std::vector<Row> rows = {
      {"state.0.exp_avg", scalar_tensor(0.0), "state.0.exp_avg has shape [], but parameter 0 has shape [3]"},  // once a segfault
      {"state.0.exp_avg", zeros({2}), "shape [2]"},
      {"state.0.exp_avg", zeros({3}, kInt64), "state.0.exp_avg has dtype int64"},
      {"state.0.exp_avg", tensor({0.0, kNaN, 0.0}), "state.0.exp_avg holds nan"},
      {"state.1.exp_avg_sq", tensor({-1.0, 0.0}), "state.1.exp_avg_sq holds -1, not a finite non-negative"},
      {"state.1.max_exp_avg_sq", Tensor(), "state.1.max_exp_avg_sq is missing"},
      {"state.0.step", Tensor(), "state.0.step is missing"},
      {"state.0.step", scalar_tensor(-4611686018427387904.0, kInt64), "state.0.step is -4611686018427387904"},  // once a hang
      {"state.0.step", scalar_tensor(-3, kInt64), "not in [1, 2^53]"},
      {"state.0.step", scalar_tensor(0, kInt64), "not in [1, 2^53]"},
      {"state.0.step", scalar_tensor(2.0, kFloat64), "state.0.step must be a 0-d int64"},
      {"state.0.step", tensor(std::vector<int64_t>{1, 1}, {2}), "state.0.step must be a 0-d int64"},
      {"state.0.momentum", zeros({3}), "unexpected key state.0.momentum"},
      {"state.7.exp_avg", zeros({3}), "names parameter 7, but there are 2"},
      {"param_groups.0.lr", Tensor(), "'param_groups.0.lr' is missing"},
      {"param_groups.0.lr", scalar_tensor(kNaN, kFloat64), "is nan, not a finite non-negative number"},
      {"param_groups.0.lr", scalar_tensor(-1.0, kFloat64), "is -1"},
      {"param_groups.0.weight_decay", zeros({2}, kFloat64), "must be a 0-d floating tensor"},
      {"param_groups.3.lr", scalar_tensor(0.1, kFloat64), "names group 3 of 1"},
      {"param_groups.0.betas", scalar_tensor(0.1, kFloat64), "unknown key 'param_groups.0.betas'"},
      // spellings state_dict() never writes, that read as group 0's lr (and once overrode it)
      {"param_groups.00.lr", scalar_tensor(0.1, kFloat64), "unknown key 'param_groups.00.lr'"},
      {"param_groups. 0.lr", scalar_tensor(0.1, kFloat64), "unknown key 'param_groups. 0.lr'"},
      {"param_groups.0.lr junk", scalar_tensor(0.1, kFloat64), "unknown key 'param_groups.0.lr junk'"},
      {"state.00.exp_avg", zeros({3}), "unknown key 'state.00.exp_avg'"},
      // values no run uses, that once trained on NaN or an exploding loss
      {"param_groups.0.eps", scalar_tensor(0.0, kFloat64), "('param_groups.0.eps'): eps must be positive, got 0"},
      {"param_groups.0.weight_decay", scalar_tensor(1e30, kFloat64),
       "('param_groups.0.weight_decay'): weight_decay 1e+30 is above 100"},
      {"param_groups.0.lr", scalar_tensor(1e30, kFloat64), "('param_groups.0.lr'): lr 1e+30 is above 1000"},
      {"param_groups.0.beta2", scalar_tensor(0.0, kFloat64),
       "('param_groups.0.beta2'): betas (0.9, 0): beta2 must be above beta1² = 0.81"},
      {"param_groups.0.beta1", scalar_tensor(1.0, kFloat64), "('param_groups.0.beta1'): betas must be in [0, 1)"},
      // moments no gradients leave: |m| beyond its bound beside v, a running maximum below v
      {"state.0.exp_avg", tensor({3e38, 0.0, 0.0}), "(element 0) beside an exp_avg_sq of 0.001"},
      {"state.1.max_exp_avg_sq", zeros({2}), "state.1.max_exp_avg_sq holds 0 (element 0), below its exp_avg_sq"},
      {"whatever", scalar_tensor(0.1, kFloat64), "unknown key 'whatever'"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.key);
    const std::string message = refusal(opt, with_entry(good, row.key, row.value));
    CHECK_MESSAGE(message.find(row.phrase) != std::string::npos, message);
  }
  // A parameter not stepped yet has no state at all: that loads.
  nn::NamedTensors fresh;
  for (const auto& [name, t] : good)
    if (!name.starts_with("state.1.")) fresh.emplace_back(name, t);
  opt.load_state_dict(fresh);
  // And the optimizer steps on from a checked state without trouble.
  opt.load_state_dict(good);
  for (const Tensor& p : params) p.sum().backward();
  opt.step();
  CHECK(opt.state_dict().at(0).second.defined());
}

TEST_CASE("hostile optimizer state: SGD keeps a momentum buffer exactly when momentum is on") {
  std::vector<Tensor> params = {param({1, 2})};
  SGD with_momentum(params, SGDOptions(0.1).momentum(0.9));
  const nn::NamedTensors good = stepped_state(with_momentum, params);
  CHECK(refusal(with_momentum, with_entry(good, "state.0.momentum_buffer", scalar_tensor(1.0)))
            .find("state.0.momentum_buffer has shape []") != std::string::npos);
  CHECK(refusal(with_momentum, with_entry(good, "state.0.momentum_buffer", tensor({1.0, kNaN})))
            .find("holds nan") != std::string::npos);
  // A checkpoint whose group has no momentum (its options travel with it) keeps no buffer.
  SGD plain(params, SGDOptions(0.1));
  const nn::NamedTensors no_momentum = with_entry(good, "param_groups.0.momentum", scalar_tensor(0.0, kFloat64));
  CHECK(refusal(plain, no_momentum).find("unexpected key state.0.momentum_buffer") != std::string::npos);
}

TEST_CASE("hostile schedule state: every entry present, of its dtype and in range") {
  std::vector<Tensor> params = {param({1, 2})};
  SGD opt(params, SGDOptions(0.1));
  NoamLR schedule(opt, 16, 10);
  schedule.step();
  const nn::NamedTensors good = schedule.state_dict();
  auto refused = [&](const nn::NamedTensors& state) {
    const int64_t step_before = schedule.last_step();
    const std::string message = error_message([&] { schedule.load_state_dict(state); });
    CHECK(schedule.last_step() == step_before);
    return message;
  };
  // Once accepted: an empty state silently restarted the schedule; a negative step gave lr inf.
  CHECK(refused({}).find("'last_step' is missing") != std::string::npos);
  CHECK(refused(with_entry(good, "base_lrs.0", Tensor())).find("'base_lrs.0' is missing") != std::string::npos);
  CHECK(refused(with_entry(good, "last_step", scalar_tensor(-5, kInt64))).find("is -5, not in [0, 2^53]") !=
        std::string::npos);
  CHECK(refused(with_entry(good, "last_step", scalar_tensor(1.0, kFloat32))).find("0-d int64") != std::string::npos);
  CHECK(refused(with_entry(good, "base_lrs.0", scalar_tensor(kNaN, kFloat64))).find("not a finite") != std::string::npos);
  CHECK(refused(with_entry(good, "base_lrs.1", scalar_tensor(0.1, kFloat64))).find("names group 1 of 1") !=
        std::string::npos);
  CHECK(refused(with_entry(good, "base_lrs.00", scalar_tensor(0.1, kFloat64))).find("unknown key") != std::string::npos);
  schedule.load_state_dict(good);
  CHECK(schedule.last_step() == 1);
}

TEST_CASE("hostile average state: the averages are floating and finite") {
  std::vector<Tensor> params = {param({1, 2})};
  ExponentialMovingAverage average(params, 0.9);
  CHECK(error_message([&] { average.load_state_dict({{"0", tensor({1.0, kNaN})}}); }).find("holds nan") !=
        std::string::npos);
  CHECK(error_message([&] { average.load_state_dict({{"0", zeros({2}, kInt64)}}); }).find("dtype int64") !=
        std::string::npos);
  CHECK(average.averages()[0].to_vector<double>() == std::vector<double>{1, 2});  // left as it was
}
