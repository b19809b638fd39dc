// libFuzzer target for Hugging Face checkpoints as cppgrad::hf reads them (nn/hf/checkpoint.h,
// what `gpt --init-from hf:` calls): the bytes are a model.safetensors (no config.json; 4 heads), whose
// names tell GPT-2 or Llama and whose shapes the model's sizes.
//
// Property: the file is refused with cppgrad::Error, or the model it describes is built, loaded,
// runs a forward pass on two tokens, and saved back writes every weight the file had, bit for bit
// (when the weights are all float32 or all float64: the model takes that dtype). No crash, hang,
// leak or undefined behaviour (ASan + UBSan watch), and no model larger than the file (the whole
// file is checked before one is built).
//
// Seeds: the PyTorch twins' files (tests/data/hf_*/model.safetensors).
//   build/fuzz/tests/fuzz/fuzz_hf_checkpoint -dict=tests/fuzz/safetensors.dict CORPUS_DIR tests/data/hf_*/model.safetensors
#include <cstdint>
#include <cstdlib>
#include <span>

#include "cppgrad.h"
#include "nn/hf/checkpoint.h"

using namespace cppgrad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto contents = nn::parse_safetensors(std::span<const uint8_t>(data, size), "<fuzz input>");
    const hf::HFCheckpoint file = hf::hf_checkpoint_of(std::move(contents), "<fuzz input>", std::nullopt);
    const hf::ModelConfig config = hf::hf_model_config(file, /*heads=*/4);
    // The model in the file's dtype, when it has one.
    std::optional<DType> dtype;
    bool one_dtype = true;
    for (const auto& [name, t] : file.tensors) {
      if (!dtype) dtype = t.dtype();
      one_dtype = one_dtype && t.dtype() == *dtype;
    }
    auto model = hf::make_model(config);
    if (one_dtype && dtype == kFloat64) model->to(kFloat64);
    hf::load_hf_checkpoint(*model, file);
    {
      NoGradGuard no_grad;
      model->eval();
      const int64_t T = std::min<int64_t>(2, config.seq_len);
      model->forward(zeros({1, T}, kInt64));
    }
    if (one_dtype && (dtype == kFloat32 || dtype == kFloat64)) {
      const nn::NamedTensors saved = hf::hf_state_dict(*model, file.layout);
      for (const auto& [name, t] : file.tensors) {
        bool found = false;
        for (const auto& [saved_name, s] : saved)
          if (saved_name == name) {
            found = true;
            if (nn::serialize_safetensors({{"x", s}}) != nn::serialize_safetensors({{"x", t}})) std::abort();
          }
        if (!found) std::abort();
      }
    }
  } catch (const Error&) {
    // a clean refusal: what a file that does not fit must get
  }
  return 0;
}
