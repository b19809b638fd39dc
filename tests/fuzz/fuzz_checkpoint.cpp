// libFuzzer target for whole training checkpoints: the bytes are parsed as a safetensors file
// and loaded into a seq2seq run as `seq2seq --resume` builds it (model, Adam, the paper's
// schedule, the moving average, both generators; optim::TrainingState::load_state_dict), then, when accepted,
// that run trains one step.
//
// Property: a checkpoint is refused with cppgrad::Error, or it trains a step with no Error and no
// crash, hang, leak or undefined behaviour (ASan + UBSan watch). An entry the loader let through
// that the update rules cannot take (a 0-d exp_avg once segfaulted in Adam) is a finding.
//
// Its seed, a real checkpoint of the tiny model after three steps, is written by the target itself:
//   CPPGRAD_FUZZ_WRITE_SEED=corpus/seed.safetensors build/fuzz/tests/fuzz/fuzz_checkpoint
//   build/fuzz/tests/fuzz/fuzz_checkpoint -dict=tests/fuzz/safetensors.dict corpus
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "common/run_state.h"
#include "common/tiny_run.h"
#include "framed_mutator.h"
#include "seq2seq/model.h"
#include "seq2seq/tasks.h"

using namespace cppgrad;

namespace {


using examples::TinyRun;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  if (const char* path = std::getenv("CPPGRAD_FUZZ_WRITE_SEED")) {
    TinyRun tiny;
    examples::TrainingLog log;
    for (; log.step < 3; ++log.step) tiny.train_step();
    log.train_curve = {{1, 1.9}, {2, 1.8}, {3, 1.7}};
    log.eval_curve = {{3, 1.75}};
    examples::training_state(tiny.run(), log).save(path, {{"task", "copy"}});
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nn::SafetensorsContents contents;
  try {
    contents = nn::parse_safetensors({data, size}, "<fuzz input>");
  } catch (const Error&) {
    return 0;  // a malformed container
  }
  TinyRun tiny;
  examples::TrainingLog log;
  try {
    examples::training_state(tiny.run(), log).load_state_dict(contents.tensors);
  } catch (const Error&) {
    return 0;  // a clean refusal: what a bad checkpoint must get
  }
  // Accepted: the run must train on. No Error is caught from here on.
  tiny.train_step();
  return 0;
}

// Edits the header or the data block on its own (framed_mutator.h).
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return fuzzing::mutate_framed(data, size, max_size, seed);
}
