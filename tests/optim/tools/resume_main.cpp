// A small seeded training run that can stop, save a checkpoint and be resumed in a fresh
// process. resume_test.sh runs it three ways and compares the outputs byte for byte:
//
//   resume_main train    --steps N --save PATH   [--threads T]   N steps, then a checkpoint
//   resume_main resume   --load PATH --steps M --out PATH [--threads T] [--skip-rng]
//   resume_main straight --steps K --out PATH    [--threads T]   K steps from the start
//
// The run: a float32 MLP with dropout, a fresh random batch every step (drawn from the default
// generator, as dropout's masks are), AdamW with two parameter groups and AMSGrad, and a
// warm-up + cosine schedule. A checkpoint (optim::TrainingState) holds the model ("model."), the
// optimizer ("optim."), the schedule ("sched.") and the default generator's state ("rng."), in
// one safetensors file. The output file holds the same four parts after the last step.
// --skip-rng resumes without restoring the generator: the run then diverges, which shows that
// the generator state is what makes the resumed run exact.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cppgrad.h"

using namespace cppgrad;
using namespace cppgrad::optim;

namespace {

// Throws cppgrad::Error with `message` unless `ok`.
void require(bool ok, const std::string& message) {
  if (!ok) throw Error("resume_main: " + message);
}

struct Args {
  std::string mode, save, load, out;
  int steps = -1;
  int threads = 1;
  bool skip_rng = false;
};

Args parse(int argc, char** argv) {
  Args a;
  require(argc >= 2, "expected a mode: train, resume or straight");
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--skip-rng") {
      a.skip_rng = true;
      continue;
    }
    require(i + 1 < argc, flag + " needs a value");
    std::string value = argv[++i];
    if (flag == "--steps")
      a.steps = std::stoi(value);
    else if (flag == "--threads")
      a.threads = std::stoi(value);
    else if (flag == "--save")
      a.save = value;
    else if (flag == "--load")
      a.load = value;
    else if (flag == "--out")
      a.out = value;
    else
      require(false, "unknown flag " + flag);
  }
  require(a.steps >= 0, "--steps is required");
  require(a.mode == "train" || a.mode == "resume" || a.mode == "straight", "unknown mode " + a.mode);
  require(a.mode != "train" || !a.save.empty(), "train needs --save");
  require(a.mode != "resume" || (!a.load.empty() && !a.out.empty()), "resume needs --load and --out");
  require(a.mode != "straight" || !a.out.empty(), "straight needs --out");
  return a;
}

constexpr int64_t kIn = 32, kHidden = 256, kOut = 8, kBatch = 128;

struct Training {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<AdamW> opt;
  std::unique_ptr<WarmupCosineLR> sched;
  Tensor true_weight;  // the targets are a fixed linear map of the inputs, plus noise

  Training() {
    manual_seed(2024);
    model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
        std::make_shared<nn::Linear>(kIn, kHidden), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.2),
        std::make_shared<nn::Linear>(kHidden, kHidden), std::make_shared<nn::GELU>(),
        std::make_shared<nn::Linear>(kHidden, kOut)});
    Generator fixed(7);
    true_weight = randn({kIn, kOut}, kFloat32, fixed);
    std::vector<Tensor> weights, biases;
    for (const auto& [name, p] : model->named_parameters())
      (name.ends_with("bias") ? biases : weights).push_back(p);
    opt = std::make_unique<AdamW>(
        std::vector<ParamGroup>{{weights, 3e-3, 0.05, "decay"}, {biases, 6e-3, 0.0, "no_decay"}},
        AdamWOptions().amsgrad(true));
    sched = std::make_unique<WarmupCosineLR>(*opt, 4, 40, 1e-5);
  }

  void steps(int n) {
    model->train();
    for (int i = 0; i < n; ++i) {
      Tensor x = randn({kBatch, kIn});
      Tensor y = matmul(x, true_weight) + 0.1 * randn({kBatch, kOut});
      opt->zero_grad();
      Tensor loss = nn::functional::mse_loss((*model)(x), y);
      loss.backward();
      clip_grad_norm_(model->parameters(), 1.0);
      opt->step();
      sched->step();
    }
  }

  // Everything a checkpoint holds; the "rng." entries go to and come from `rng`.
  optim::TrainingState state(Generator& rng) {
    optim::TrainingState s;
    s.add("model", *model).add("optim", *opt).add("sched", *sched).add("rng", rng);
    return s;
  }

  void save(const std::string& path) { state(default_generator()).save(path); }

  void load(const std::string& path, bool restore_generator) {
    Generator discarded;  // --skip-rng: the entries are read and checked, then not used
    state(restore_generator ? default_generator() : discarded).load(path);
  }
};

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args = parse(argc, argv);
    set_num_threads(args.threads);
    Training run;
    if (args.mode == "train") {
      run.steps(args.steps);
      run.save(args.save);
    } else if (args.mode == "resume") {
      run.load(args.load, !args.skip_rng);
      run.steps(args.steps);
      run.save(args.out);
    } else {
      run.steps(args.steps);
      run.save(args.out);
    }
    std::printf("%s: %d steps, %d thread(s), last_step %lld, lr %.6g\n", args.mode.c_str(), args.steps, args.threads,
                static_cast<long long>(run.sched->last_step()), run.opt->lr());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
