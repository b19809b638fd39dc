// optim::TrainingState: a whole run (model with dropout, Adam, a schedule, a shuffling data
// loader, the default generator, the step and a scalar of the loop's own) saved mid-run and
// resumed into fresh objects continues bit for bit; every entry a run could not have written is
// refused, naming it; and a save never leaves a half-written file.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

#include "cppgrad.h"
#include "optim_helpers.h"

using namespace cppgrad;
using namespace cppgrad::optim;
using optimtest::contains;
using optimtest::error_message;
using optimtest::identical;
using check::with_entry;
namespace fs = std::filesystem;

namespace {

// A directory of its own, removed at the end; the pid keeps parallel test runs apart.
struct TempDir {
  TempDir() : path(fs::temp_directory_path() / ("cppgrad_training_state_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  fs::path path;
};

// A regression run of `dtype`. `seed` seeds everything the run draws (weights, dropout, the
// data's order): a resumed run is built from another seed, so all it continues with must come
// from the file.
struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<Adam> opt;
  std::unique_ptr<StepLR> sched;
  std::unique_ptr<data::DataLoader> loader;
  int64_t step = 0;
  double last_loss = 0;
  TrainingState state;

  Run(DType dtype, uint64_t seed) {
    manual_seed(seed);
    model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
        std::make_shared<nn::Linear>(3, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.25),
        std::make_shared<nn::Linear>(8, 2)});
    model->to(dtype);
    Generator fixed(5);  // the data set itself is the same in every run
    const Tensor x = randn({20, 3}, dtype, fixed), y = randn({20, 2}, dtype, fixed);
    loader = std::make_unique<data::DataLoader>(std::make_shared<data::TensorDataset>(NamedTensors{{"x", x}, {"y", y}}),
                                                data::DataLoaderOptions(4).shuffle(true).seed(seed));
    opt = std::make_unique<Adam>(model->parameters(), AdamOptions(0.01).amsgrad(true));
    sched = std::make_unique<StepLR>(*opt, 3, 0.5);
    state.add("model", *model).add("optim", *opt).add("sched", *sched).add("loader", *loader);
    state.add("rng.default", default_generator()).add_scalar("step", step, Bounds::at_least(0));
    state.add_scalar("last_loss", last_loss, Bounds::at_least(0));
  }

  void steps(int n) {
    model->train();
    for (int i = 0; i < n; ++i, ++step) {  // 5 batches an epoch: the run crosses epochs mid-way
      const data::Batch b = loader->next();
      opt->zero_grad();
      Tensor loss = nn::functional::mse_loss((*model)(b["x"]), b["y"]);
      loss.backward();
      opt->step();
      sched->step();
      last_loss = loss.item();
    }
  }
};

}  // namespace

TEST_CASE("TrainingState: a run saved mid-run and resumed in fresh objects continues bit for bit") {
  for (DType dtype : {kFloat64, kFloat32}) {
    CAPTURE(dtype_name(dtype));
    TempDir dir;
    Run straight(dtype, 1);
    straight.steps(13);
    {
      Run first(dtype, 1);
      first.steps(7);
      first.state.save(dir.file("run.safetensors"), {{"note", "seven steps"}});
    }
    Run resumed(dtype, 2);  // another seed: weights, order and dropout differ until loaded
    CHECK_FALSE(identical(resumed.model->state_dict(), straight.model->state_dict()));
    const nn::Metadata metadata = resumed.state.load(dir.file("run.safetensors"));
    CHECK(metadata.at("note") == "seven steps");
    CHECK(resumed.step == 7);
    CHECK(resumed.loader->epoch() == 1);
    CHECK(resumed.sched->last_step() == 7);
    resumed.steps(6);
    // The same operations on the same values in the same order: equal bits, not a tolerance.
    CHECK(identical(resumed.model->state_dict(), straight.model->state_dict()));
    CHECK(identical(resumed.opt->state_dict(), straight.opt->state_dict()));
    CHECK(identical(resumed.state.state_dict(), straight.state.state_dict()));
    CHECK(resumed.last_loss == straight.last_loss);
  }
}

TEST_CASE("TrainingState: the file holds each part under its name, in the order added") {
  Run run(kFloat64, 1);
  run.steps(2);
  std::vector<std::string> names;
  for (const auto& [name, t] : run.state.state_dict()) names.push_back(name);
  CHECK(names.front() == "model.0.weight");
  CHECK(std::find(names.begin(), names.end(), "optim.param_groups.0.lr") != names.end());
  CHECK(std::find(names.begin(), names.end(), "loader.generator.state") != names.end());
  CHECK(std::find(names.begin(), names.end(), "rng.default.state") != names.end());
  CHECK(names[names.size() - 2] == "step");
  CHECK(names.back() == "last_loss");
}

TEST_CASE("TrainingState: every entry a run could not have written is refused, naming it") {
  Run saved(kFloat64, 1);
  saved.steps(3);
  const NamedTensors good = saved.state.state_dict();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Row {
    std::string key;
    Tensor value;  // undefined: the entry is removed
    std::string phrase;
  };
  const std::vector<Row> rows = {
      {"stray", scalar_tensor(1.0), "unexpected entry 'stray': no part of this run is named so"},
      {"rng.extra", scalar_tensor(1.0), "unexpected entry 'rng.extra'"},
      {"model.0.weight", Tensor(), "missing keys: 0.weight"},
      {"model.0.weight", zeros({8, 4}, kFloat64), "0.weight: checkpoint [8,4] vs model [8,3]"},
      {"model.9.weight", zeros({1}, kFloat64), "unexpected keys: 9.weight"},
      // a misspelt name the optimizer would not read: refused, not ignored
      {"optim.param_groups.00.lr", scalar_tensor(1.0, kFloat64), "Optimizer::load_state_dict: unknown key 'param_groups.00.lr'"},
      {"optim.param_groups.0.lr", scalar_tensor(nan, kFloat64), "\"optim.\""},
      {"sched.last_step", Tensor(), "\"sched.\""},
      {"loader.epoch", scalar_tensor(-1, kInt64), "epoch -1 is negative"},
      {"loader.stray", scalar_tensor(1, kInt64), "DataLoader::load_state_dict: unexpected entry 'stray'"},
      {"loader.generator.state", zeros({4}, kInt64), "in 'generator.*': Generator::load_state_dict: 'state' is all zeros"},
      {"rng.default.state", zeros({4}, kInt64), "'state' is all zeros"},
      {"rng.default.state", zeros({5}, kInt64), "'state' must be int64 [4], got int64 [5]"},
      {"rng.default.seed", Tensor(), "'seed' is missing"},
      {"rng.default.cached_normal", scalar_tensor(nan, kFloat64), "'cached_normal' is nan, must be finite"},
      {"rng.default.cached_normal", scalar_tensor(0.5, kFloat32), "'cached_normal' must be float64 [], got float32 []"},
      {"rng.default.words", zeros({5}, kInt64), "Generator::load_state_dict: unexpected entry 'words'"},
      {"step", Tensor(), "'step' is missing"},
      {"step", scalar_tensor(-2, kInt64), "'step' is -2, must be >= 0"},
      {"step", scalar_tensor(3.0, kFloat64), "'step' must be int64 [], got float64 []"},
      {"last_loss", scalar_tensor(nan, kFloat64), "'last_loss' is nan, must be >= 0"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.key);
    Run fresh(kFloat64, 2);
    const std::string message = error_message([&] { fresh.state.load_state_dict(with_entry(good, row.key, row.value)); });
    CHECK_MESSAGE(contains(message, row.phrase), message);
    CHECK_MESSAGE(message.find('\n') == std::string::npos, message);  // one line, whatever the part
  }
  // The untampered state loads.
  Run fresh(kFloat64, 2);
  fresh.state.load_state_dict(good);
  CHECK(fresh.step == 3);
}

TEST_CASE("TrainingState: constants, checks between parts, and names that overlap") {
  int64_t step = 4;
  Generator gen(3);
  TrainingState state;
  state.add_constant("vocab", tensor(std::vector<int64_t>{97, 98, 99}, {3})).add("rng", gen).add_scalar("step", step);
  state.require([&] { CPPGRAD_CHECK(step % 2 == 0, "checkpoint: step {} is odd", step); });
  const NamedTensors good = state.state_dict();
  state.load_state_dict(good);
  CHECK(contains(error_message([&] { state.load_state_dict(with_entry(good, "vocab", tensor(std::vector<int64_t>{97, 98, 100}, {3}))); }),
                 "'vocab' is not this run's"));
  CHECK(contains(error_message([&] { state.load_state_dict(with_entry(good, "vocab", tensor({97.0, 98.0, 99.0}))); }),
                 "'vocab' is not this run's (float32 [3] saved, int64 [3] here)"));
  CHECK(contains(error_message([&] { state.load_state_dict(with_entry(good, "step", scalar_tensor(5, kInt64))); }),
                 "step 5 is odd"));
  CHECK(contains(error_message([&] { state.add("rng.default", default_generator()); }), "overlap"));
  CHECK(contains(error_message([&] { state.add_scalar("step", step); }), "overlap"));
}

TEST_CASE("TrainingState: a checkpoint is never written from a non-finite state") {
  TempDir dir;
  const std::string path = dir.file("run.safetensors");
  Run run(kFloat32, 1);
  run.steps(2);
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    CAPTURE(bad);
    NoGradGuard no_grad;
    Tensor weight = run.model->parameters()[2];  // the second Linear's weight
    const float kept = weight.data<float>()[1];
    weight.data<float>()[1] = static_cast<float>(bad);
    CHECK(contains(error_message([&] { run.state.save(path); }), "'model.3.weight' holds"));
    CHECK(!fs::exists(path));  // nothing written
    weight.data<float>()[1] = kept;
  }
  run.state.save(path);  // finite again: written, and it loads
  Run resumed(kFloat32, 2);
  resumed.state.load(path);
  CHECK(resumed.step == 2);
}

TEST_CASE("TrainingState: a save never leaves a half-written file") {
  TempDir dir;
  const std::string path = dir.file("run.safetensors");
  Run run(kFloat64, 1);
  bool fail_now = false;
  run.state.add_tensor(
      "flaky", [&] {
        CPPGRAD_CHECK(!fail_now, "flaky: cannot save now");
        return scalar_tensor(1.0, kFloat64);
      },
      [](const Tensor&) {});
  run.steps(2);
  run.state.save(path);
  std::ifstream in(path, std::ios::binary);
  const std::string before((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  run.steps(1);
  fail_now = true;  // a part that throws while the state is gathered: the old file stays as it was
  CHECK(contains(error_message([&] { run.state.save(path); }), "cannot save now"));
  std::ifstream again(path, std::ios::binary);
  CHECK(std::string((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>()) == before);
  // A directory that cannot be written: refused, with nothing left anywhere.
  fail_now = false;
  CHECK_THROWS_AS(run.state.save(dir.file("missing/run.safetensors")), Error);
  int files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path)) ++files;
  CHECK(files == 1);  // run.safetensors, and no temporary beside it
  Run resumed(kFloat64, 2);
  resumed.state.add_tensor("flaky", [] { return scalar_tensor(1.0, kFloat64); }, [](const Tensor&) {});
  resumed.state.load(path);
  CHECK(resumed.step == 2);
}
