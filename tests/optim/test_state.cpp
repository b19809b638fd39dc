// Resumable state: an optimizer's and a schedule's state_dict saved next to the model in one
// safetensors file continue a run exactly; and the errors for bad options and bad state.
#include <doctest/doctest.h>

#include <filesystem>
#include <unistd.h>

#include "cppgrad.h"
#include "optim_helpers.h"

using namespace cppgrad;
using namespace cppgrad::optim;
using optimtest::contains;
using optimtest::error_message;
using optimtest::param;
using optimtest::values;

namespace {

// A temporary file removed at the end of the test; the pid keeps parallel test runs apart.
struct TempFile {
  explicit TempFile(const std::string& stem)
      : path((std::filesystem::temp_directory_path() /
              (stem + "_" + std::to_string(::getpid()) + ".safetensors")).string()) {}
  ~TempFile() { std::filesystem::remove(path); }
  std::string path;
};

// A small float32 regression run: model, AdamW with two groups, a warm-up + cosine schedule.
struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<AdamW> opt;
  std::unique_ptr<WarmupCosineLR> sched;
  Tensor inputs, targets;

  Run() {
    manual_seed(11);
    model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
        std::make_shared<nn::Linear>(3, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 2)});
    Generator data(99);
    inputs = randn({16, 3}, kFloat32, data);
    targets = randn({16, 2}, kFloat32, data);
    std::vector<Tensor> weights, biases;
    for (const auto& [name, p] : model->named_parameters()) (name.ends_with("bias") ? biases : weights).push_back(p);
    opt = std::make_unique<AdamW>(std::vector<ParamGroup>{{weights, 0.01, 0.1, "decay"}, {biases, 0.02, 0.0, "no_decay"}},
                                  AdamWOptions().amsgrad(true));
    sched = std::make_unique<WarmupCosineLR>(*opt, 3, 20, 1e-4);
  }

  void steps(int n) {
    for (int i = 0; i < n; ++i) {
      opt->zero_grad();
      nn::functional::mse_loss((*model)(inputs), targets).backward();
      opt->step();
      sched->step();
    }
  }

  nn::NamedTensors checkpoint() const {
    nn::NamedTensors all = with_prefix("model.", model->state_dict());
    for (auto& entry : with_prefix("optim.", opt->state_dict())) all.push_back(entry);
    for (auto& entry : with_prefix("sched.", sched->state_dict())) all.push_back(entry);
    return all;
  }

  void restore(const nn::NamedTensors& all) {
    model->load_state_dict(under_prefix("model.", all));
    opt->load_state_dict(under_prefix("optim.", all));
    sched->load_state_dict(under_prefix("sched.", all));
  }
};

}  // namespace

TEST_CASE("optimizer and schedule state in a safetensors file resume a run bit for bit") {
  Run straight;
  straight.steps(10);

  TempFile file("cppgrad_optim_resume");
  {
    Run first;
    first.steps(4);
    nn::save_safetensors(file.path, first.checkpoint());
  }
  Run resumed;  // fresh objects: initialised from the seed, then overwritten by the checkpoint
  resumed.restore(nn::load_safetensors(file.path).tensors);
  CHECK(resumed.sched->last_step() == 4);
  resumed.steps(6);

  CHECK(optimtest::identical(resumed.model->state_dict(), straight.model->state_dict()));
  CHECK(optimtest::identical(resumed.opt->state_dict(), straight.opt->state_dict()));
  CHECK(resumed.opt->lr() == straight.opt->lr());
  // And the run did move: the parameters are not the fresh ones.
  Run fresh;
  CHECK_FALSE(optimtest::identical(fresh.model->state_dict(), straight.model->state_dict()));
}

TEST_CASE("state_dict names every group's settings and every parameter's buffers") {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  SGD opt({ParamGroup{{a}, 0.1, 0.01, "x"}, ParamGroup{{b}, 0.2, 0.0, "y"}}, SGDOptions(1.0).momentum(0.9));
  (a.sum() + b.sum()).backward();
  opt.step();
  nn::NamedTensors state = opt.state_dict();
  std::vector<std::string> names;
  for (const auto& [name, t] : state) names.push_back(name);
  // Every option SGD has, per group (nesterov as 0 or 1), then the buffers.
  CHECK(names == std::vector<std::string>{"param_groups.0.lr", "param_groups.0.weight_decay", "param_groups.0.momentum",
                                          "param_groups.0.dampening", "param_groups.0.nesterov", "param_groups.1.lr",
                                          "param_groups.1.weight_decay", "param_groups.1.momentum",
                                          "param_groups.1.dampening", "param_groups.1.nesterov",
                                          "state.0.momentum_buffer", "state.1.momentum_buffer"});
  CHECK(state[5].second.item<double>() == 0.2);
  CHECK(state[7].second.item<double>() == 0.9);  // inherited from SGDOptions
  optimtest::check_values(state[10].second, {1.0 + 0.01 * 1.0, 1.0 + 0.01 * 2.0}, 0.0);
  // The saved buffers are copies: later steps do not change them.
  opt.step();
  optimtest::check_values(state[10].second, {1.01, 1.02}, 0.0);
}

TEST_CASE("load_state_dict restores group settings and buffers") {
  Tensor a = param({1.0, 2.0});
  SGD opt({a}, SGDOptions(0.1).momentum(0.9));
  a.sum().backward();
  opt.step();
  nn::NamedTensors state = opt.state_dict();

  Tensor b = param({1.0, 2.0});
  SGD fresh({b}, SGDOptions(0.7).momentum(0.9));
  fresh.load_state_dict(state);
  CHECK(fresh.lr() == 0.1);
  CHECK(optimtest::identical(fresh.state_dict(), state));
  // The momentum buffer carries on: b ← b - lr(μ·1 + 1) rather than a first step's b - lr·1.
  b.sum().backward();
  fresh.step();
  optimtest::check_values(b, {1.0 - 0.1 * 1.9, 2.0 - 0.1 * 1.9});
}

TEST_CASE("load_state_dict casts floating buffers to the parameter's dtype") {
  // Saved from a float64 run, loaded for a float32 one (PyTorch does the same).
  Tensor a = param({1.0, 2.0});
  Adam opt({a}, AdamOptions(0.1));
  a.sum().backward();
  opt.step();

  Tensor b = zeros({2}, TensorOptions(kFloat32).requires_grad());
  Adam fresh({b}, AdamOptions(0.1));
  fresh.load_state_dict(opt.state_dict());
  for (const auto& [name, t] : fresh.state_dict()) {
    if (name == "state.0.exp_avg") CHECK(t.dtype() == kFloat32);
    if (name == "state.0.step") CHECK(t.dtype() == kInt64);
  }
  b.sum().backward();
  fresh.step();  // works, and is Adam's second step
  for (const auto& [name, t] : fresh.state_dict())
    if (name == "state.0.step") CHECK(t.item<int64_t>() == 2);
}

TEST_CASE("bad options are errors") {
  Tensor p = param({1.0});
  SUBCASE("negative learning rate") {
    CHECK(contains(error_message([&] { SGD opt({p}, SGDOptions(-0.1)); }), "negative learning rate -0.1"));
    CHECK(contains(error_message([&] { Adam opt({p}, AdamOptions(-1.0)); }), "negative learning rate"));
    CHECK(contains(error_message([&] { AdamW opt({ParamGroup{{p}, -2.0, 0.0, "g"}}); }), "negative learning rate"));
    SGD opt({p}, SGDOptions(0.1));
    CHECK(contains(error_message([&] { opt.set_lr(-0.5); }), "negative learning rate"));
    CHECK(opt.lr() == 0.1);
  }
  SUBCASE("negative weight decay") {
    CHECK(contains(error_message([&] { SGD opt({p}, SGDOptions(0.1).weight_decay(-1.0)); }), "weight_decay"));
    CHECK(contains(error_message([&] { AdamW opt({p}, AdamWOptions().weight_decay(-0.01)); }), "weight_decay"));
  }
  SUBCASE("bad betas and eps") {
    CHECK(contains(error_message([&] { Adam opt({p}, AdamOptions().beta1(1.0)); }), "betas must be in [0, 1)"));
    CHECK(contains(error_message([&] { Adam opt({p}, AdamOptions().beta1(-0.1)); }), "betas"));
    CHECK(contains(error_message([&] { Adam opt({p}, AdamOptions().beta2(1.5)); }), "(0.9, 1.5)"));
    CHECK(contains(error_message([&] { AdamW opt({p}, AdamWOptions().beta2(-0.5)); }), "betas"));
    CHECK(contains(error_message([&] { Adam opt({p}, AdamOptions().eps(-1e-8)); }), "eps"));
  }
  SUBCASE("Nesterov without momentum or with dampening") {
    CHECK(contains(error_message([&] { SGD opt({p}, SGDOptions(0.1).nesterov(true)); }), "Nesterov"));
    CHECK(contains(error_message([&] { SGD opt({p}, SGDOptions(0.1).nesterov(true).momentum(0.9).dampening(0.1)); }),
                   "Nesterov"));
    CHECK(contains(error_message([&] { SGD opt({p}, SGDOptions(0.1).momentum(-0.9)); }), "momentum"));
  }
  SUBCASE("bad parameters") {
    CHECK(contains(error_message([&] { SGD opt(std::vector<ParamGroup>{}, SGDOptions(0.1)); }), "no parameter groups"));
    Tensor not_leaf = p * 2.0;
    CHECK(contains(error_message([&] { SGD opt({not_leaf}, SGDOptions(0.1)); }), "leaf"));
    CHECK(contains(error_message([&] { SGD opt({arange(3)}, SGDOptions(0.1)); }), "floating"));
    CHECK(contains(error_message([&] { SGD opt({Tensor()}, SGDOptions(0.1)); }), "floating"));
  }
  SUBCASE("bad schedules") {
    SGD opt({p}, SGDOptions(0.1));
    CHECK(contains(error_message([&] { NoamLR s(opt, 0, 10); }), "d_model"));
    CHECK(contains(error_message([&] { NoamLR s(opt, 16, 0); }), "warmup_steps"));
    CHECK(contains(error_message([&] { WarmupCosineLR s(opt, 10, 10); }), "total_steps"));
    CHECK(contains(error_message([&] { WarmupCosineLR s(opt, -1, 10); }), "warmup_steps"));
    CHECK(contains(error_message([&] { StepLR s(opt, 0); }), "step_size"));
    CHECK(contains(error_message([&] { LambdaLR s(opt, nullptr); }), "no function"));
  }
}

TEST_CASE("load_state_dict rejects unknown keys and wrong shapes and leaves the state as it was") {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  Adam opt({a, b}, AdamOptions(0.1));
  (a.sum() + b.sum()).backward();
  opt.step();
  const nn::NamedTensors before = opt.state_dict();

  auto with = [&](const std::string& key, const Tensor& t) {
    nn::NamedTensors s = before;
    s.emplace_back(key, t);
    return s;
  };
  auto replaced = [&](const std::string& key, const Tensor& t) {
    nn::NamedTensors s = before;
    for (auto& [name, value] : s)
      if (name == key) value = t;
    return s;
  };
  Tensor one = scalar_tensor(1.0, kFloat64);

  SUBCASE("unknown keys") {
    CHECK(contains(error_message([&] { opt.load_state_dict(with("bogus", one)); }), "unknown key 'bogus'"));
    CHECK(contains(error_message([&] { opt.load_state_dict(with("param_groups.0.momentum", one)); }),
                   "unknown key 'param_groups.0.momentum'"));
    CHECK(contains(error_message([&] { opt.load_state_dict(with("param_groups.3.lr", one)); }), "group 3 of 1"));
    CHECK(contains(error_message([&] { opt.load_state_dict(with("state.2.exp_avg", zeros({1}, kFloat64))); }),
                   "names parameter 2, but there are 2"));
  }
  SUBCASE("wrong shapes") {
    std::string msg = error_message([&] { opt.load_state_dict(replaced("state.0.exp_avg", zeros({3}, kFloat64))); });
    CHECK(contains(msg, "state.0.exp_avg has shape [3]"));
    CHECK(contains(msg, "parameter 0 has shape [2]"));
    CHECK(contains(error_message([&] { opt.load_state_dict(replaced("state.1.exp_avg_sq", zeros({1, 1}, kFloat64))); }),
                   "state.1.exp_avg_sq"));
    CHECK(!error_message([&] { opt.load_state_dict(replaced("param_groups.0.lr", zeros({2}, kFloat64))); }).empty());
  }
  SUBCASE("a schedule's unknown key") {
    StepLR sched(opt, 2);
    nn::NamedTensors s{{"last_step", scalar_tensor(5, kInt64)}, {"base_lrs.0", scalar_tensor(0.5, kFloat64)}};
    s.emplace_back("gamma", one);
    CHECK(contains(error_message([&] { sched.load_state_dict(s); }), "unknown key 'gamma'"));
    s.pop_back();
    s.emplace_back("base_lrs.4", one);
    CHECK(contains(error_message([&] { sched.load_state_dict(s); }), "group 4 of 1"));
    // The rejected loads changed neither the step nor the base rate.
    CHECK(sched.last_step() == 0);
    CHECK(sched.state_dict()[1].second.item<double>() == 0.1);
    CHECK(opt.lr() == 0.1);
  }
  // A rejected load changes nothing.
  CHECK(optimtest::identical(opt.state_dict(), before));
}

TEST_CASE("state(param) reads and writes one parameter's named state, as optimizer.state[p]") {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  Adam opt({a, b}, AdamOptions(0.1));
  CHECK(opt.state(a).empty());  // before the first step
  (a.sum() + b.sum()).backward();
  opt.step();
  const auto& sa = opt.state(a);
  CHECK(sa.size() == 3);
  CHECK(sa.at("step").item<int64_t>() == 1);
  optimtest::check_values(sa.at("exp_avg"), {0.1, 0.1});  // (1 - β1)·g with g = 1
  optimtest::check_values(opt.state(b).at("exp_avg_sq"), {0.001});

  // Writing: zero a's moments and step counter, and the next step is a first step again.
  opt.state(a)["exp_avg"].zero_();
  opt.state(a)["exp_avg_sq"].zero_();
  opt.state(a)["step"] = zeros({}, kInt64);
  std::vector<double> before = values(a);
  opt.step();  // the same gradient: Adam's first step moves by lr·g/(|g| + ε) ≈ 0.1
  optimtest::check_values(a, {before[0] - 0.1 / (1.0 + 1e-8), before[1] - 0.1 / (1.0 + 1e-8)});
  CHECK(opt.state(a).at("step").item<int64_t>() == 1);
  CHECK(opt.state(b).at("step").item<int64_t>() == 2);

  // The same entries as state_dict's "state.<i>.<name>".
  for (const auto& [name, t] : opt.state_dict())
    if (name == "state.1.exp_avg") CHECK(values(t) == values(opt.state(b).at("exp_avg")));
  Tensor stranger = param({0.0});
  CHECK(contains(error_message([&] { opt.state(stranger); }), "Adam::state: the tensor of shape [1] is not one of"));
}

TEST_CASE("a buffer written into state() by hand must be its parameter's shape, dtype and layout") {
  // Each once reached the update, which wrote past the smaller buffer (ASan heap-buffer-overflow).
  Tensor w = param(std::vector<double>(8, 1.0));
  auto train_once = [&](Optimizer& opt) {
    (w * 2.0).sum().backward();
    opt.step();
  };
  Adam adam({w}, AdamOptions(0.1));
  train_once(adam);
  const Tensor kept = adam.state(w).at("exp_avg");
  adam.state(w)["exp_avg"] = ones({1}, w.dtype());
  const std::vector<double> before = values(w);
  std::string e = error_message([&] { train_once(adam); });
  CHECK(contains(e, "Adam::step: state.0.exp_avg must be a contiguous float64 [8] like its parameter, got float64 [1]"));
  CHECK(values(w) == before);  // refused before any parameter moved
  adam.state(w)["exp_avg"] = kept;
  adam.state(w)["exp_avg_sq"] = ones({8}, kFloat32);
  CHECK(contains(error_message([&] { adam.step(); }), "state.0.exp_avg_sq must be a contiguous float64 [8] like its "
                                                        "parameter, got float32 [8]"));
  adam.state(w)["exp_avg_sq"] = ones({2, 8}, w.dtype()).t().contiguous().t().select(0, 0);  // a strided row
  CHECK(contains(error_message([&] { adam.step(); }), "(not contiguous)"));
  SGD sgd({w}, SGDOptions(0.1).momentum(0.9));
  train_once(sgd);
  sgd.state(w)["momentum_buffer"] = ones({1}, w.dtype());
  CHECK(contains(error_message([&] { train_once(sgd); }), "SGD::step: state.0.momentum_buffer must be"));
  sgd.state(w)["momentum_buffer"] = zeros_like(w);  // the right layout is taken
  train_once(sgd);
}
