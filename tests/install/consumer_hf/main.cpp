// Uses the installed hf component (cppgrad/nn/hf/checkpoint.h): the PyTorch twins' GPT-2 and Llama
// checkpoints (tests/data/hf_gpt2_hub_f32, hf_llama_f32: model.safetensors and config.json, written
// by scripts/make_parity_refs.py) loaded as docs/hugging-face.md shows, their logits against the
// twins' within the bound the gpt example's doctests use (1e-5 of the largest logit, float32), and
// each model saved back under Hugging Face's names and read again to the same logits.
//
//   consumer_hf TESTS_DATA_DIR
//
// Exits 0 when each gives the right answer.
#include <cppgrad/cppgrad.h>
#include <cppgrad/nn/hf/checkpoint.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

using namespace cppgrad;

// The model a Hugging Face checkpoint holds: `dir` has model.safetensors and config.json.
std::shared_ptr<hf::LanguageModel> load_pretrained(const std::string& dir) {
  const hf::HFCheckpoint file = hf::read_hf_checkpoint(dir);  // GPT-2's or Llama's, told by the names
  auto model = hf::make_model(hf::hf_model_config(file));    // sized from the shapes and config.json
  hf::load_hf_checkpoint(*model, file);                      // every name and shape checked
  model->eval();
  return model;
}

double largest_difference(const Tensor& a, const Tensor& b) { return (a - b).abs().max().item<double>(); }

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer_hf TESTS_DATA_DIR\n");
    return 2;
  }
  const std::filesystem::path data = argv[1];
  const std::filesystem::path scratch = std::filesystem::temp_directory_path() / "cppgrad_consumer_hf";
  bool ok = true;
  for (const char* name : {"hf_gpt2_hub_f32", "hf_llama_f32"}) {
    const std::string dir = (data / name).string();
    auto model = load_pretrained(dir);
    const auto twin = nn::load_safetensors(dir + "/twin_logits.safetensors");
    const Tensor& tokens = twin.at("in.tokens");     // (2, 12) int64
    const Tensor& expected = twin.at("out.logits");  // (2, 12, 300), the PyTorch twin's
    NoGradGuard no_grad;
    const Tensor logits = model->forward(tokens);    // (B, T, vocab)
    const double bound = 1e-5 * std::max(1.0, expected.abs().max().item<double>());
    const double whole = largest_difference(logits, expected);

    // Saved as save_pretrained leaves a model (model.safetensors and config.json) and read back.
    std::filesystem::remove_all(scratch);
    hf::save_hf_directory(*model, hf::read_hf_checkpoint(dir).layout, scratch.string());
    const double reread = largest_difference(load_pretrained(scratch.string())->forward(tokens), expected);
    std::filesystem::remove_all(scratch);

    const bool right = logits.shape() == expected.shape() && whole < bound && reread < bound;
    std::printf("%s: %s, largest difference from the twin %.3g (bound %.3g), saved and read back %.3g: %s\n", name,
                model->type_name().c_str(), whole, bound, reread, right ? "ok" : "WRONG");
    ok = ok && right;
  }
  return ok ? 0 : 1;
}
