// bfloat16 autocast learns as well as float32: examples/seq2seq's small copy task (the one
// check.sh learns) trained twice from each of three seeds for the same 600 steps, once in float32
// and once with every matrix product in bfloat16 (tensor/autocast.h), then judged on the same
// held-out sequences.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "seq2seq/evaluate.h"
#include "seq2seq/model.h"
#include "seq2seq/tasks.h"

using namespace cppgrad;
using namespace seq2seq;
namespace F = cppgrad::nn::functional;

namespace {

constexpr int kSteps = 600;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

HeldOut train_copy_task(bool bf16, uint64_t seed) {
  manual_seed(seed);  // the same initial weights for both runs of a seed
  ModelConfig config;
  config.vocab = 8;
  config.d_model = 64;
  config.heads = 4;
  config.layers = 1;
  config.ff = 128;
  config.dropout = 0;
  config.max_len = 16;
  Seq2SeqModel model(config);
  optim::Adam opt(model.parameters(), optim::AdamOptions(1.0).beta1(0.9).beta2(0.98).eps(1e-9));
  optim::NoamLR schedule(opt, config.d_model, 100, 0.5);
  Generator data(seed);  // the same batches for both runs of a seed
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = make_batch(Task::Copy, 32, 5, config.vocab, data);
    Tensor loss;
    {
      autocast::Guard products(kBFloat16, bf16);
      Tensor logits = model.forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad);
      loss = F::cross_entropy(logits.reshape({-1, config.vocab}), b.tgt_out.reshape({-1}),
                              F::CrossEntropyOptions().ignore_index(PAD));
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    schedule.step();
  }
  autocast::Guard products(kBFloat16, bf16);  // judged as it would be used
  return held_out_eval(model, held_out_batch(Task::Copy, 500, 5, config.vocab, 99));
}

}  // namespace

TEST_CASE("autocast: the copy task trained in bfloat16 reaches float32's held-out accuracy and loss") {
  // bfloat16's products on every CPU: where the CPU has no bfloat16 instructions autocast would
  // multiply in float32, so the float32 GEMM on rounded inputs (a bfloat16 kernel's products) is asked for.
  if (autocast::kernel() == autocast::Kernel::Float32) autocast::set_kernel(autocast::Kernel::RoundedFloat32);
  MESSAGE("autocast's products: ", autocast::kernel_name(autocast::kernel()));
  std::vector<double> fp32_accuracy, bf16_accuracy, fp32_loss, bf16_loss;
  for (uint64_t seed : {1, 2, 3}) {
    const HeldOut fp32 = train_copy_task(false, seed), bf16 = train_copy_task(true, seed);
    MESSAGE("seed ", seed, ", held-out after ", kSteps, " steps: float32 loss ", fp32.loss, ", accuracy ", fp32.accuracy,
            "%; bf16 autocast loss ", bf16.loss, ", accuracy ", bf16.accuracy, "%");
    fp32_accuracy.push_back(fp32.accuracy);
    bf16_accuracy.push_back(bf16.accuracy);
    fp32_loss.push_back(fp32.loss);
    bf16_loss.push_back(bf16.loss);
  }
  // The tolerance is the spread that rounding alone gives this run. bfloat16 perturbs every
  // product by up to 2^-8 relative from the first step on, which moves the trajectory; so does a
  // change of summation order: float32 alone ends apart under OpenBLAS's kernels and in reference
  // mode (the MESSAGEs above print each run; results/2026-11-30-autocast-quality-seeds.md has them
  // for each kernel). So both precisions must learn the task (>= 97% of the 500 held-out sequences whole),
  // bfloat16 within 2.5 points of float32's accuracy (12 sequences) and within 0.05 nats of its
  // loss, judged on the medians of the three seeds: one run in a few lands on a slow trajectory
  // whatever its precision, and a change of rounding anywhere decides which runs do
  // (results/2026-11-30-autocast-quality-seeds.md); a median over seeds is not moved by one.
  const double fp32_acc = median(fp32_accuracy), bf16_acc = median(bf16_accuracy);
  CHECK(fp32_acc >= 97.0);
  CHECK(bf16_acc >= 97.0);
  CHECK(std::abs(bf16_acc - fp32_acc) <= 2.5);
  CHECK(std::abs(median(bf16_loss) - median(fp32_loss)) <= 0.05);
}
