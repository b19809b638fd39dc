// A small seeded training run that can stop, save a checkpoint and be resumed in a fresh
// process. resume_test.sh runs it three ways and compares the outputs byte for byte:
//
//   resume_main train    --steps N --save PATH   [--threads T]   N steps, then a checkpoint
//   resume_main resume   --load PATH --steps M --out PATH [--threads T] [--skip-rng]
//   resume_main straight --steps K --out PATH    [--threads T]   K steps from the start
//
// The run: a float32 MLP with dropout, a fresh random batch every step (drawn from the default
// generator, as dropout's masks are), AdamW with two parameter groups and AMSGrad, and a
// warm-up + cosine schedule. A checkpoint holds the model ("model."), the optimizer
// ("optim."), the schedule ("sched.") and the default generator's state ("rng."), in one
// safetensors file. The output file holds the same four parts after the last step.
// --skip-rng resumes without restoring the generator: the run then diverges, which shows that
// the generator state is what makes the resumed run exact.
#include <bit>
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

// The generator's state as tensors: the four xoshiro words and the seed as int64 (same bits),
// the cached Box–Muller value as float64, and its flag as bool.
nn::NamedTensors generator_state(const Generator& gen) {
  Generator::State st = gen.state();
  std::vector<int64_t> words;
  for (uint64_t w : st.s) words.push_back(std::bit_cast<int64_t>(w));
  Tensor flag = zeros({}, kBool);
  flag.data<bool>()[0] = st.has_cached_normal;
  return {{"s", tensor(words, {4})},
          {"seed", tensor(std::vector<int64_t>{std::bit_cast<int64_t>(st.seed)}, {})},
          {"cached_normal", scalar_tensor(st.cached_normal, kFloat64)},
          {"has_cached_normal", flag}};
}

void set_generator_state(Generator& gen, const nn::SafetensorsContents& file, const std::string& prefix) {
  const Tensor& s = file.at(prefix + "s");
  require(s.dtype() == kInt64 && s.shape() == Shape{4}, prefix + "s must be int64 [4]");
  Generator::State st{};
  for (size_t i = 0; i < 4; ++i) st.s[i] = std::bit_cast<uint64_t>(s.data<int64_t>()[i]);
  st.seed = std::bit_cast<uint64_t>(file.at(prefix + "seed").item<int64_t>());
  st.cached_normal = file.at(prefix + "cached_normal").item<double>();
  st.has_cached_normal = file.at(prefix + "has_cached_normal").item<bool>();
  gen.set_state(st);
}

nn::NamedTensors take_prefixed(const nn::NamedTensors& all, const std::string& prefix) {
  nn::NamedTensors out;
  for (const auto& [name, t] : all)
    if (name.starts_with(prefix)) out.emplace_back(name.substr(prefix.size()), t);
  return out;
}

void append_prefixed(nn::NamedTensors& out, const std::string& prefix, const nn::NamedTensors& in) {
  for (const auto& [name, t] : in) out.emplace_back(prefix + name, t);
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
        AdamOptions().amsgrad(true));
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

  void save(const std::string& path) const {
    nn::NamedTensors all;
    append_prefixed(all, "model.", model->state_dict());
    append_prefixed(all, "optim.", opt->state_dict());
    append_prefixed(all, "sched.", sched->state_dict());
    append_prefixed(all, "rng.", generator_state(default_generator()));
    nn::save_safetensors(path, all);
  }

  void load(const std::string& path, bool restore_generator) {
    nn::SafetensorsContents file = nn::load_safetensors(path);
    model->load_state_dict(take_prefixed(file.tensors, "model."));
    opt->load_state_dict(take_prefixed(file.tensors, "optim."));
    sched->load_state_dict(take_prefixed(file.tensors, "sched."));
    if (restore_generator) set_generator_state(default_generator(), file, "rng.");
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
