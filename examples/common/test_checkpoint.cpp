// Checkpoints of the examples' training runs are untrusted: the run's optim::TrainingState
// (examples::training_state) refuses every entry a run could not have written, with one line
// naming the key (the cases of issue 16 that
// once crashed, hung or trained on: a 0-d exp_avg, a negative step, a missing schedule, an
// all-zero generator state). Made on a tiny seq2seq run, as `seq2seq --resume` loads it.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>

#include "../../tests/common/check.h"
#include "common/cli.h"
#include "common/run_state.h"
#include "common/tiny_run.h"
#include "seq2seq/model.h"
#include "seq2seq/tasks.h"

using namespace cppgrad;
using cppgrad::nn::NamedTensors;
using doctest::Contains;
using examples::TinyRun;
using cppgrad::check::with_entry;

namespace {

// A checkpoint of a tiny run after two steps, as seq2seq --save writes it.
NamedTensors good_checkpoint() {
  TinyRun tiny;
  examples::TrainingLog log;
  for (; log.step < 2; ++log.step) {
    tiny.train_step();
    log.train_curve.emplace_back(static_cast<double>(log.step + 1), 1.5);
  }
  return examples::training_state(tiny.run(), log).state_dict();
}

// The one-line message the checked load gives for `state`, loaded into a fresh run.
std::string refusal(const NamedTensors& state) {
  TinyRun tiny;
  examples::TrainingLog log;
  try {
    examples::training_state(tiny.run(), log).load_state_dict(state);
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.find('\n') == std::string::npos, message);
    return message;
  }
  return "<accepted>";
}

}  // namespace

TEST_CASE("checkpoint: a run's own checkpoint resumes it exactly") {
  const NamedTensors saved = good_checkpoint();
  TinyRun resumed;
  examples::TrainingLog log;
  examples::training_state(resumed.run(), log).load_state_dict(saved);
  CHECK(log.step == 2);
  CHECK(log.train_curve.size() == 2);
  CHECK(resumed.schedule->last_step() == 2);
  // The loader stands where the saved run's stood: the next batch is the one it would have drawn.
  CHECK(resumed.loader.batch_index() == 2);
  TinyRun straight;
  for (int i = 0; i < 2; ++i) straight.train_step();
  const data::Batch expected = straight.loader.next(), got = resumed.loader.next();
  for (const std::string& name : expected.names()) {
    CAPTURE(name);
    CHECK(got[name].to(kInt64).to_vector<int64_t>() == expected[name].to(kInt64).to_vector<int64_t>());
  }
  // It trains on, and saves what it loaded.
  resumed.train_step();
  CHECK(resumed.schedule->last_step() == 3);
}

TEST_CASE("checkpoint: every entry a run could not have written is refused, naming its key") {
  const NamedTensors good = good_checkpoint();
  struct Row {
    std::string key;
    Tensor value;  // undefined: the entry is removed
    std::string phrase;
  };
  const std::vector<Row> rows = {
      // once a segfault in Adam::update
      {"optim.state.0.exp_avg", scalar_tensor(0.0), "state.0.exp_avg has shape [], but parameter 0 has shape"},
      // once a hang (the loop ran from -2^62), or 1,040 steps and exit 0
      {"train.step", scalar_tensor(-4611686018427387904.0, kInt64), "'train.step' is -4611686018427387904, must be >= 0"},
      {"train.step", scalar_tensor(3, kInt64), "train.step is 3, but sched.last_step is 2"},
      {"train.step", scalar_tensor(2.0, kFloat64), "'train.step' must be int64 [], got float64 []"},
      {"train.step", Tensor(), "'train.step' is missing"},
      // once loss inf
      {"sched.last_step", scalar_tensor(-1, kInt64), "'last_step' is -1"},
      // once accepted, the schedule silently restarting
      {"sched.last_step", Tensor(), "'last_step' is missing"},
      {"sched.base_lrs.0", Tensor(), "'base_lrs.0' is missing"},
      // once accepted: a generator stuck at zero
      {"rng.default.state", zeros({4}, kInt64), "\"rng.default.\": Generator::load_state_dict: 'state' is all zeros"},
      {"rng.default.state", Tensor(), "'state' is missing"},
      {"rng.default.state", zeros({5}, kInt64), "'state' must be int64 [4]"},
      {"rng.default.cached_normal", scalar_tensor(0.5, kFloat32), "'cached_normal' must be float64"},
      {"rng.default.extra", scalar_tensor(1.0), "unexpected entry 'extra'"},
      // the data loader's position: one the run's loader cannot be at
      {"loader.generator.state", zeros({4}, kInt64), "\"loader.\": DataLoader::load_state_dict: in 'generator.*': "
                                                     "Generator::load_state_dict: 'state' is all zeros"},
      {"loader.batch", scalar_tensor(32, kInt64), "batch 32 out of range for 32 batches per epoch"},
      {"loader.epoch", scalar_tensor(-1, kInt64), "epoch -1 is negative"},
      {"loader.batch_size", scalar_tensor(4, kInt64), "would not resume the same batches"},
      {"loader.epoch", Tensor(), "'epoch' is missing"},
      {"loader.junk", scalar_tensor(1, kInt64), "DataLoader::load_state_dict: unexpected entry 'junk'"},
      {"optim.state.3.step", scalar_tensor(99, kInt64), "optim.state.3.step is 99, more than the 2 steps taken"},
      {"optim.param_groups.0.lr", scalar_tensor(std::numeric_limits<double>::quiet_NaN(), kFloat64), "lr' is nan"},
      // a misspelt name the optimizer would not read: refused, not ignored
      {"optim.param_groups.00.lr", scalar_tensor(1.0, kFloat64), "Optimizer::load_state_dict: unknown key 'param_groups.00.lr'"},
      {"average.0", Tensor(), "'0' is missing"},
      {"model.generator.weight", Tensor(), "missing keys: generator.weight"},
      {"train.loss_curve", Tensor(), "'train.loss_curve' is missing"},
      {"train.loss_curve", tensor({1.0, 2.0, 3.0}), "float64 vector of (step, loss) pairs"},
      {"train.eval_curve", tensor(std::vector<double>{7, 0.5}, {2}), "a point at step 7, not in [1, 2]"},
      {"stray", scalar_tensor(1.0), "unexpected entry 'stray'"},
      // meaning: values no run uses, weights no run reaches
      {"optim.param_groups.0.eps", scalar_tensor(0.0, kFloat64), "('param_groups.0.eps'): eps must be positive"},
      {"model.transformer.encoder.layers.0.self_attn.in_proj_weight", full({12, 4}, 1e30),
       "'model.transformer.encoder.layers.0.self_attn.in_proj_weight' holds 1.0000000150474662e+30 (element 0): 2 "
       "steps of Adam"},
      {"average.0", full({12, 4}, 1e30), "'average.0' holds 1.0000000150474662e+30"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.key);
    const std::string message = refusal(with_entry(good, row.key, row.value));
    CHECK_MESSAGE(message.find(row.phrase) != std::string::npos, message);
  }
}

TEST_CASE("checkpoint: a file of another format is refused, naming both formats and the release that reads it") {
  auto message = [](const std::map<std::string, std::string>& metadata) {
    try {
      examples::check_checkpoint_format(metadata);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(examples::kCheckpointFormat == 2);
  CHECK(message({{"checkpoint_format", "2"}, {"program", "seq2seq"}}) == "accepted");
  // Format 1, the files of cppgrad 0.1.0, named no format; naming it does not make it readable.
  CHECK(message({{"program", "seq2seq"}}) ==
        "--resume: the checkpoint is of format 1 (its metadata names no checkpoint_format), and this program reads "
        "format 2 only: cppgrad 0.1.0 reads format 1 (or start a new run)");
  CHECK(message({{"checkpoint_format", "1"}}) ==
        "--resume: the checkpoint is of format 1, and this program reads format 2 only: cppgrad 0.1.0 reads format 1 "
        "(or start a new run)");
  CHECK(message({{"checkpoint_format", "3"}}) ==
        "--resume: the checkpoint is of format 3, newer than this program's 2: resume it with the release that wrote it");
  for (const std::string garbled : {"0", "-1", "2 ", "two", "", "99999999999999999999"}) {
    CAPTURE(garbled);
    CHECK(message({{"checkpoint_format", garbled}}) ==
          "--resume: the checkpoint's checkpoint_format is '" + garbled + "', not a format number");
  }
}

TEST_CASE("checkpoint: another program's checkpoint is refused by name where one program's is read") {
  auto read = [](const std::map<std::string, std::string>& metadata) {
    try {
      examples::require_writer(metadata, "seq2seq", "run.safetensors");
      return std::string("accepted");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  CHECK(read({{"program", "seq2seq"}}) == "accepted");
  CHECK(read({}) == "accepted");  // names none: the tensors and sizes are checked next
  CHECK(read({{"program", "gpt"}}) == "run.safetensors: this is a gpt checkpoint (its metadata's program), not seq2seq's");
}

TEST_CASE("checkpoint: a model size in the metadata is a whole number of at least 1, or refused by name") {
  auto read = [](const std::map<std::string, std::string>& metadata) {
    try {
      return std::to_string(examples::metadata_count(metadata, "d_model", "run.safetensors", "seq2seq --save", 1));
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  CHECK(read({{"d_model", "32"}}) == "32");
  CHECK(read({}) == "run.safetensors has no 'd_model' in its metadata (not written by seq2seq --save?)");
  // Each was an uncaught std::stoll exception ("stoll"), an accepted prefix or a size of 0 before.
  for (const std::string garbled : {"abc", "32abc", "0", "-4", "", "99999999999999999999"}) {
    CAPTURE(garbled);
    CHECK(read({{"d_model", garbled}}) ==
          "run.safetensors has 'd_model' = '" + garbled + "' in its metadata, not a whole number of 1 or more");
  }
}

TEST_CASE("checkpoint: a weight no run reaches is refused, and the bound follows the steps and rates taken") {
  TinyRun tiny;
  examples::TrainingLog log;
  // Adam with betas (0.9, 0.98) moves a weight by at most lr·0.1/√(0.02·(1 - 0.81/0.98)) a step.
  const double per_step = 0.1 / std::sqrt(0.02 * (1.0 - 0.81 / 0.98));
  CHECK(examples::reachable_weight(*tiny.opt, *tiny.schedule, 0) == examples::kInitialWeight);
  double rates = 0;
  for (int64_t k = 0; k < 5; ++k) rates += tiny.schedule->lr_at(k, 1.0);
  CHECK(examples::reachable_weight(*tiny.opt, *tiny.schedule, 5) ==
        doctest::Approx(examples::kInitialWeight + rates * per_step).epsilon(1e-12));
  // No such bound for an optimizer without Adam's step bound.
  optim::SGD sgd(tiny.model->parameters(), optim::SGDOptions(0.1));
  optim::NoamLR noam(sgd, 4, 4, 0.5);
  CHECK(std::isinf(examples::reachable_weight(sgd, noam, 5)));
}

TEST_CASE("checkpoint: a non-finite loss, gradient norm or weight stops the run, naming the step and the first one") {
  TinyRun tiny;
  const nn::Module& model = *tiny.model;
  const auto [first_name, first] = model.named_parameters().front();
  auto stopped = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const examples::Diverged& e) {
      return e.what();
    }
    return "<went on>";
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(stopped([&] { examples::stop_if_non_finite(4, "the training loss", 2.5, model); }) == "<went on>");
  CHECK(stopped([&] { examples::stop_if_non_finite(4, "the training loss", nan, model); }) ==
        "step 4: the training loss is nan; every parameter and gradient is finite; training stopped, nothing saved");
  // The first non-finite gradient, when every weight is finite.
  tiny.train_step();
  Tensor grad = first.grad();
  REQUIRE(grad.defined());
  grad.data<float>()[2] = std::numeric_limits<float>::infinity();
  CHECK(stopped([&] { examples::stop_if_non_finite(5, "the gradient norm", HUGE_VAL, model); }) ==
        fmt::format("step 5: the gradient norm is inf; the first non-finite: the gradient of {} holds inf (element 2); "
                    "training stopped, nothing saved", first_name));
  // A weight before any gradient; and the pass over the weights, and over a checkpoint's entries.
  first.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  CHECK(stopped([&] { examples::stop_if_non_finite(5, "the training loss", nan, model); })
            .find(fmt::format("the first non-finite: {} holds nan (element 1)", first_name)) != std::string::npos);
  CHECK(stopped([&] { examples::stop_if_weights_non_finite(6, model); }) ==
        fmt::format("step 6: the weights are not finite: {} holds nan (element 1); nothing saved", first_name));
  examples::TrainingLog log;
  CHECK(stopped([&] { examples::stop_if_state_non_finite(examples::training_state(tiny.run(), log).state_dict()); }) ==
        fmt::format("not saved: 'model.{}' holds nan (element 1 of [12,4]): a checkpoint is never written from a "
                    "non-finite state", first_name));
}
