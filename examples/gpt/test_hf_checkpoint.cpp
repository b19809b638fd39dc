// Hugging Face checkpoints against their PyTorch twins: tests/data/hf_* hold a model.safetensors
// under transformers' names, its config.json and the twin's logits, written by
// scripts/make_parity_refs.py (GPT2LMHeadModel and LlamaForCausalLM written out in torch 1.13).
// The loaded model gives the twin's logits, whole and decoded token by token from the cache;
// saving writes the file's tensors back byte for byte; a file that does not fit is refused with
// a message naming what differs.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include "../../tests/common/check.h"  // max_abs_diff, error_message, contains, with_entry
#include "cppgrad.h"
#include "nn/hf/checkpoint.h"

using namespace cppgrad;
using namespace cppgrad::hf;
using namespace cppgrad::check;
namespace fs = std::filesystem;

namespace {

const std::string kData = CPPGRAD_TEST_DATA;

double max_abs(const Tensor& a) {
  double worst = 0;
  for (double v : values(a)) worst = std::max(worst, std::abs(v));
  return worst;
}

struct Case {
  const char* name;
  Arch arch;
  DType dtype;
  int64_t kv_heads;
};
// The llama twins: grouped-query attention (separate q, k, v weights in cppgrad), and as many
// key/value heads as heads (one fused in_proj_weight, whose rows q_proj, k_proj and v_proj are).
constexpr Case kCases[] = {{"hf_gpt2_hub_f32", Arch::GPT2, kFloat32, 4},
                           {"hf_gpt2_f64", Arch::GPT2, kFloat64, 4},
                           {"hf_llama_f32", Arch::Llama, kFloat32, 2},
                           {"hf_llama_f64", Arch::Llama, kFloat64, 4}};

std::shared_ptr<LanguageModel> loaded(const HFCheckpoint& file, DType dtype) {
  auto model = make_model(hf_model_config(file));
  model->to(dtype);
  load_hf_checkpoint(*model, file);
  model->eval();
  return model;
}

std::string describe_sizes(const ModelConfig& c) {
  return fmt::format("{} vocab {} layers {} d {} heads {}/{} ff {} T {}", arch_name(c.arch), c.vocab, c.layers, c.d_model,
                     c.heads, c.kv_heads, c.ff, c.seq_len);
}

// A directory of its own under the system's temporary one, removed at the end of the test.
struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& name)
      : path(fs::temp_directory_path() / fmt::format("cppgrad-hf-{}-{}", name, getpid())) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
};


}  // namespace

TEST_CASE("gpt: Hugging Face checkpoints give their PyTorch twin's logits, whole and from the cache") {
  for (const Case& c : kCases) {
    CAPTURE(c.name);
    const std::string dir = kData + "/" + c.name;
    const HFCheckpoint file = read_hf_checkpoint(dir, c.arch);
    const ModelConfig config = hf_model_config(file);
    CHECK(config.arch == c.arch);
    CHECK(config.layers == 2);
    CHECK(config.d_model == 32);
    CHECK(config.heads == 4);
    CHECK(config.vocab == 300);
    CHECK(config.kv_heads == c.kv_heads);  // llama's from k_proj's rows
    CHECK(config.ff == (c.arch == Arch::Llama ? 64 : 128));
    CHECK(config.norm_eps == (c.arch == Arch::Llama ? 1e-6 : 1e-5));  // config.json's
    auto model = loaded(file, c.dtype);
    const auto twin = nn::load_safetensors(dir + "/twin_logits.safetensors");
    const Tensor& tokens = twin.at("in.tokens");  // (2, 12)
    const Tensor& expected = twin.at("out.logits");  // (2, 12, 300)
    REQUIRE(expected.dtype() == c.dtype);
    NoGradGuard no_grad;
    const Tensor logits = model->forward(tokens);
    REQUIRE(logits.dtype() == c.dtype);
    // The same formulas summed in other orders (BLAS, softmax): float32 agrees to a few units in
    // the last place of logits up to ~10 (1e-5 relative to the largest), float64 to ~1e-14.
    const double scale = std::max(1.0, max_abs(expected));
    const double tolerance = (c.dtype == kFloat32 ? 1e-5 : 1e-10) * scale;
    const double whole = max_abs_diff(logits, expected);
    MESSAGE(fmt::format("{}: largest logit {:.3g}, largest difference {:.3g}", c.name, scale, whole));
    CHECK(whole < tolerance);
    // Cached decoding: the first five tokens at once, then one at a time.
    std::vector<nn::KVCache> caches;
    std::vector<Tensor> steps = {model->forward_step(tokens.slice(1, 0, 5), caches)};
    for (int64_t t = 5; t < tokens.size(1); ++t) steps.push_back(model->forward_step(tokens.slice(1, t, t + 1), caches));
    CHECK(max_abs_diff(cat(steps, 1), expected) < tolerance);
  }
}

TEST_CASE("gpt: a Hugging Face checkpoint saved back is the same tensors, byte for byte") {
  ScratchDir scratch("round-trip");
  for (const Case& c : kCases) {
    CAPTURE(c.name);
    const std::string dir = kData + "/" + c.name;
    const HFCheckpoint file = read_hf_checkpoint(dir);
    auto model = loaded(file, c.dtype);
    const std::string out = (scratch.path / (std::string(c.name) + ".safetensors")).string();
    save_hf_checkpoint(*model, file.layout, out);
    const auto original = nn::load_safetensors(file.path), written = nn::load_safetensors(out);
    std::set<std::string> original_names, written_names;
    for (const auto& [name, t] : original.tensors) original_names.insert(name);
    for (const auto& [name, t] : written.tensors) written_names.insert(name);
    CHECK(written_names == original_names);
    for (const auto& [name, t] : original.tensors) {
      CAPTURE(name);
      if (!written.contains(name)) continue;
      const Tensor& w = written.at(name);
      CHECK(w.dtype() == t.dtype());
      CHECK(w.shape() == t.shape());
      // One tensor's file: its header and its bytes.
      CHECK(nn::serialize_safetensors({{"x", w}}) == nn::serialize_safetensors({{"x", t}}));
    }
  }
}

TEST_CASE("gpt: a Hugging Face checkpoint of another architecture is refused, naming it") {
  CHECK(contains(error_message([] { read_hf_checkpoint(kData + "/hf_llama_f32", Arch::GPT2); }),
                 "a Llama checkpoint (model.embed_tokens.weight), not gpt2"));
  CHECK(contains(error_message([] { read_hf_checkpoint(kData + "/hf_gpt2_hub_f32", Arch::Llama); }),
                 "a GPT-2 checkpoint (wte.weight), not llama"));
  CHECK(contains(error_message([] { read_hf_checkpoint(kData + "/hf_gpt2_f64", Arch::Llama); }),
                 "a GPT-2 checkpoint (transformer.wte.weight), not llama"));
  // A gpt2 model given a llama file's contents.
  const HFCheckpoint llama = read_hf_checkpoint(kData + "/hf_llama_f32");
  auto gpt2 = loaded(read_hf_checkpoint(kData + "/hf_gpt2_hub_f32"), kFloat32);
  CHECK(contains(error_message([&] { load_hf_checkpoint(*gpt2, llama); }), "a llama checkpoint, not gpt2"));
  // Neither architecture's names.
  ScratchDir scratch("other");
  nn::save_safetensors((scratch.path / "model.safetensors").string(), {{"encoder.weight", ones({2, 2})}});
  CHECK(contains(error_message([&] { read_hf_checkpoint(scratch.path.string()); }),
                 "neither GPT-2's names (transformer.wte.weight) nor Llama's (model.embed_tokens.weight); it holds "
                 "encoder.weight"));
}

TEST_CASE("gpt: a Hugging Face checkpoint that does not fit is refused, naming what differs") {
  ScratchDir scratch("unfit");
  const std::string dir = kData + "/hf_gpt2_hub_f32";
  const nn::NamedTensors twin = nn::load_safetensors(dir + "/model.safetensors").tensors;
  fs::copy_file(dir + "/config.json", scratch.path / "config.json");
  // What loading `tensors`, written beside the twin's config.json, says.
  auto refusal = [&](const nn::NamedTensors& tensors) {
    nn::save_safetensors((scratch.path / "model.safetensors").string(), tensors);
    return error_message([&] {
      const HFCheckpoint file = read_hf_checkpoint(scratch.path.string(), Arch::GPT2);
      auto model = make_model(hf_model_config(file));
      load_hf_checkpoint(*model, file);
    });
  };
  auto without_layer = [&](const std::string& head) {
    nn::NamedTensors out = twin;
    std::erase_if(out, [&](const auto& entry) { return entry.first.starts_with(head); });
    return out;
  };
  const Tensor wte = nn::load_safetensors(dir + "/model.safetensors").at("wte.weight");

  CHECK(contains(refusal(with_entry(twin, "h.1.ln_2.bias", {})),
                 "does not fit a gpt2 of 2 layers, d_model 32, 4 heads, ff 128, vocabulary 300, 16 positions: missing "
                 "h.1.ln_2.bias"));
  CHECK(contains(refusal(with_entry(with_entry(twin, "h.0.attn.c_proj.weight", zeros({32, 31})), "ln_f.bias", zeros({33}))),
                 "h.0.attn.c_proj.weight is [32,31], not [32,32], ln_f.bias is [33], not [32]"));
  // A Linear's (out, in) where GPT-2's Conv1D keeps (in, out).
  CHECK(contains(refusal(with_entry(twin, "h.1.mlp.c_fc.weight", zeros({128, 32}))),
                 "h.1.mlp.c_fc.weight is [128,32], not [32,128]"));
  CHECK(contains(refusal(with_entry(with_entry(twin, "h.0.attn.rotary.inv_freq", ones({4})), "score.weight", ones({2, 32}))),
                 "unexpected h.0.attn.rotary.inv_freq, score.weight"));
  CHECK(contains(refusal(with_entry(twin, "h.0.ln_1.weight", zeros({32}, kInt64))),
                 "h.0.ln_1.weight is int64, not floating-point"));
  CHECK(contains(refusal(without_layer("h.0.")), "layer 0 is missing (h.0. ...), though layer 1 is there"));
  CHECK(contains(refusal(without_layer("h.1.")), "config.json says layers 2, the weights' shapes 1"));
  Tensor untied = wte.clone();
  untied.at<float>({3, 4}) += 1.0f;
  CHECK(contains(refusal(with_entry(twin, "lm_head.weight", untied)),
                 "lm_head.weight differs from wte.weight (by up to 1): an untied GPT-2"));
  CHECK(refusal(with_entry(twin, "lm_head.weight", wte)).empty());  // the tied copy, as transformers' state_dict has it
}

TEST_CASE("gpt: the heads come from config.json or the caller, and must agree") {
  ScratchDir scratch("heads");
  fs::copy_file(kData + "/hf_llama_f32/model.safetensors", scratch.path / "model.safetensors");
  const HFCheckpoint bare = read_hf_checkpoint(scratch.path.string());  // no config.json
  CHECK(contains(error_message([&] { hf_model_config(bare); }),
                 "how many attention heads? The shapes do not tell: give them (heads)"));
  const ModelConfig eight = hf_model_config(bare, 8);  // head_dim 4: k_proj's 16 rows are 4 key/value heads
  CHECK(eight.heads == 8);
  CHECK(eight.kv_heads == 4);
  CHECK(eight.norm_eps == 1e-6);  // LlamaConfig's default
  const HFCheckpoint with_config = read_hf_checkpoint(kData + "/hf_llama_f32");
  CHECK(contains(error_message([&] { hf_model_config(with_config, 8); }), "heads 8: config.json beside"));
}

TEST_CASE("gpt: a Hugging Face checkpoint whose shapes ask for a huge model is refused before it is built") {
  // d_model 50,000 read off a thin embedding: the model would need 4·d² = 10¹⁰ weights a layer,
  // but the file holds none of them, and hf_model_config says so before anything is allocated.
  ScratchDir scratch("huge");
  nn::save_safetensors((scratch.path / "model.safetensors").string(),
                       {{"wte.weight", zeros({1, 50000})}, {"wpe.weight", zeros({1, 50000})},
                        {"h.0.mlp.c_fc.weight", zeros({50000, 1})}});
  const HFCheckpoint file = read_hf_checkpoint(scratch.path.string());
  CHECK(contains(error_message([&] { hf_model_config(file, 1); }),
                 "does not fit a gpt2 of 1 layers, d_model 50000, 1 heads, ff 1, vocabulary 1, 1 positions: missing "
                 "h.0.ln_1.weight"));
}

TEST_CASE("gpt: a config.json that is not transformers' config of the model is refused, naming the key") {
  ScratchDir scratch("config");
  fs::copy_file(kData + "/hf_llama_f32/model.safetensors", scratch.path / "model.safetensors");
  auto refusal = [&](const std::string& config) {
    std::ofstream(scratch.path / "config.json", std::ios::trunc) << config;
    return error_message([&] { hf_model_config(read_hf_checkpoint(scratch.path.string())); });
  };
  CHECK(contains(refusal("{\"num_attention_heads\": 4"), "config.json: not JSON"));
  CHECK(contains(refusal("[4]"), "config.json: not a JSON object"));
  CHECK(contains(refusal("{\"num_attention_heads\": \"four\"}"), "num_attention_heads is \"four\", not a positive count"));
  CHECK(contains(refusal("{\"num_attention_heads\": -4}"), "num_attention_heads is -4, not a positive count"));
  CHECK(contains(refusal("{\"rms_norm_eps\": 0}"), "rms_norm_eps is 0, not a positive number"));
  CHECK(contains(refusal("{\"model_type\": \"mistral\"}"), "model_type is 'mistral', not llama"));
  CHECK(contains(refusal("{\"hidden_act\": \"gelu\"}"), "hidden_act is 'gelu': hf::Llama uses SwiGLU (silu)"));
  CHECK(contains(refusal("{\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}"), "rope_scaling is set"));
  CHECK(contains(refusal("{\"tie_word_embeddings\": true}"), "tie_word_embeddings is set"));
  CHECK(contains(refusal("{\"num_attention_heads\": 4, \"num_key_value_heads\": 4}"),
                 "config.json says key/value heads 4, the weights' shapes 2"));
  CHECK(contains(refusal("{\"num_attention_heads\": 4, \"intermediate_size\": 11008}"),
                 "config.json says ff 11008, the weights' shapes 64"));
  // The constants have an upper bound too, the range a checkpoint's metadata is held to.
  CHECK(contains(refusal("{\"rms_norm_eps\": 1e30}"), "rms_norm_eps is 1e+30, not in [1e-12, 0.01]"));
  CHECK(contains(refusal("{\"rope_theta\": 1e300}"), "rope_theta is 1e+300, not in [2, 10000000000]"));
  CHECK(contains(refusal("{\"rope_theta\": 1e-300}"), "rope_theta is 1e-300, not in [2, 10000000000]"));
  CHECK(refusal("{\"num_attention_heads\": 4, \"rms_norm_eps\": 1e-5, \"rope_theta\": 500000.0}").empty());
  const ModelConfig c = hf_model_config(read_hf_checkpoint(scratch.path.string()));
  CHECK(c.norm_eps == 1e-5);
  CHECK(c.rope_theta == 500000.0);
  // GPT-2's activation must be GELU's tanh form.
  fs::copy_file(kData + "/hf_gpt2_hub_f32/model.safetensors", scratch.path / "model.safetensors",
                fs::copy_options::overwrite_existing);
  CHECK(contains(refusal("{\"n_head\": 4, \"activation_function\": \"relu\"}"),
                 "activation_function is 'relu': hf::GPT2 uses GELU's tanh form (gelu_new)"));
  CHECK(contains(refusal("{\"n_head\": 4, \"layer_norm_epsilon\": 1e300}"),
                 "layer_norm_epsilon is 1e+300, not in [1e-12, 0.01]"));
  CHECK(contains(refusal("{\"n_head\": 4, \"layer_norm_epsilon\": 1}"), "layer_norm_epsilon is 1, not in [1e-12, 0.01]"));
  CHECK(refusal("{\"n_head\": 4, \"layer_norm_epsilon\": 1e-12}").empty());  // BERT's, the range's end
}

TEST_CASE("gpt: a Hugging Face checkpoint whose layer numbers run past int64 is refused") {
  ScratchDir scratch("layer-number");
  nn::NamedTensors tensors = nn::load_safetensors(kData + "/hf_gpt2_hub_f32/model.safetensors").tensors;
  tensors.emplace_back("h.9223372036854775807.ln_1.weight", ones({32}));
  nn::save_safetensors((scratch.path / "model.safetensors").string(), tensors);
  CHECK(contains(error_message([&] { hf_model_config(read_hf_checkpoint(scratch.path.string()), 4); }),
                 "layer 2 is missing (h.2. ...), though layer 9223372036854775807 is there"));
}

TEST_CASE("gpt: a model of gpt's own, saved under Hugging Face's names, reads back as the same model") {
  ScratchDir scratch("own");
  for (Arch arch : {Arch::GPT2, Arch::Llama}) {
    CAPTURE(arch_name(arch));
    ModelConfig c;
    c.arch = arch, c.vocab = 13, c.layers = 3, c.d_model = 16, c.heads = 4, c.ff = 24, c.seq_len = 10;
    c.kv_heads = arch == Arch::Llama ? 2 : 4;
    c.norm_eps = 1e-6, c.rope_theta = 500.0;
    manual_seed(5);
    auto model = make_model(c);
    const std::string dir = (scratch.path / arch_name(arch)).string();
    save_hf_directory(*model, default_hf_layout(arch), dir);  // model.safetensors and config.json
    const HFCheckpoint file = read_hf_checkpoint(dir, arch);
    CHECK(file.layout.prefix == (arch == Arch::GPT2 ? "transformer." : "model."));
    CHECK(file.layout.lm_head == (arch == Arch::Llama));  // transformers drops GPT-2's tied copy
    const ModelConfig read = hf_model_config(file);  // every size and constant from the files
    CHECK(describe_sizes(read) == describe_sizes(c));
    CHECK(read.norm_eps == c.norm_eps);
    CHECK(read.rope_theta == (arch == Arch::Llama ? c.rope_theta : 10000.0));  // GPT-2 has none
    auto again = make_model(read);
    load_hf_checkpoint(*again, file);
    const nn::NamedTensors original = model->state_dict(), loaded = again->state_dict();
    REQUIRE(original.size() == loaded.size());
    for (size_t i = 0; i < original.size(); ++i) {
      CAPTURE(original[i].first);
      CHECK(loaded[i].first == original[i].first);
      CHECK(max_abs_diff(loaded[i].second, original[i].second) == 0.0);  // copied, never computed
    }
  }
}

TEST_CASE("gpt: a config.json that links to nothing is refused, not taken for an absent one") {
  ScratchDir scratch("dangling");
  ModelConfig c;
  c.vocab = 13, c.layers = 1, c.d_model = 16, c.heads = 4, c.ff = 24, c.seq_len = 10;
  manual_seed(5);
  const std::string dir = (scratch.path / "model").string();
  save_hf_directory(*make_model(c), default_hf_layout(c.arch), dir);
  std::filesystem::remove(scratch.path / "model" / "config.json");
  std::filesystem::create_symlink(scratch.path / "nowhere.json", scratch.path / "model" / "config.json");
  CHECK_THROWS_WITH_AS(read_hf_checkpoint(dir), doctest::Contains("config.json' is a symbolic link to nothing"), Error);
  std::filesystem::remove(scratch.path / "model" / "config.json");
  CHECK_FALSE(read_hf_checkpoint(dir).config.heads.has_value());  // absent: the shapes decide, heads unsaid
}

TEST_CASE("gpt: a Llama whose config.json gives head_dim (8 heads of 4 on d_model 16) loads, gives its twin's logits, saves it") {
  // Heads of d_model / heads = 2 features would read k_proj's 8 rows as 4 key/value heads, and the
  // config's 2 would then be blamed: the width is config.json's head_dim, as transformers reads it.
  const std::string dir = kData + "/hf_llama_head_dim_f64";
  const HFCheckpoint file = read_hf_checkpoint(dir, Arch::Llama);
  CHECK(file.config.head_dim == 4);
  const ModelConfig config = hf_model_config(file);
  CHECK(config.d_model == 16);
  CHECK(config.heads == 8);
  CHECK(config.kv_heads == 2);
  CHECK(config.head_dim == 4);
  auto model = loaded(file, kFloat64);
  auto* llama = dynamic_cast<Llama*>(model.get());
  REQUIRE(llama != nullptr);
  CHECK((*llama->decoder->layers)[0]->attention->q_proj_weight.shape() == Shape{32, 16});
  const auto twin = nn::load_safetensors(dir + "/twin_logits.safetensors");
  const Tensor& tokens = twin.at("in.tokens");
  const Tensor& expected = twin.at("out.logits");
  NoGradGuard no_grad;
  const double tolerance = 1e-10 * std::max(1.0, max_abs(expected));
  CHECK(max_abs_diff(model->forward(tokens), expected) < tolerance);
  std::vector<nn::KVCache> caches;
  std::vector<Tensor> steps = {model->forward_step(tokens.slice(1, 0, 5), caches)};
  for (int64_t t = 5; t < tokens.size(1); ++t) steps.push_back(model->forward_step(tokens.slice(1, t, t + 1), caches));
  CHECK(max_abs_diff(cat(steps, 1), expected) < tolerance);

  // Saved under Hugging Face's names, with head_dim in config.json, and read back as the same model.
  ScratchDir scratch("head-dim");
  const std::string saved = (scratch.path / "saved").string();
  save_hf_directory(*model, file.layout, saved);
  std::ifstream config_json(scratch.path / "saved" / "config.json");
  const std::string text((std::istreambuf_iterator<char>(config_json)), std::istreambuf_iterator<char>());
  CHECK(contains(text, "\"head_dim\": 4"));
  const ModelConfig again = hf_model_config(read_hf_checkpoint(saved));
  CHECK(describe_sizes(again) == describe_sizes(config));
  CHECK(again.head_dim == 4);

  // Without head_dim in config.json the width is what q_proj's rows give each head.
  fs::copy_file(dir + "/model.safetensors", scratch.path / "model.safetensors");
  auto with_config = [&](const std::string& head_dim_entry) {
    std::ifstream in(dir + "/config.json");
    std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = json.find("  \"head_dim\": 4,\n");
    REQUIRE(at != std::string::npos);
    json.replace(at, std::string("  \"head_dim\": 4,\n").size(), head_dim_entry);
    std::ofstream(scratch.path / "config.json", std::ios::trunc) << json;
    return read_hf_checkpoint(scratch.path.string());
  };
  const ModelConfig inferred = hf_model_config(with_config(""));
  CHECK(inferred.head_dim == 4);
  CHECK(inferred.kv_heads == 2);
  // A head_dim the weights do not have is refused, naming what differs.
  auto refusal = [&](const std::string& entry) {
    return error_message([&] {
      const HFCheckpoint f = with_config(entry);
      load_hf_checkpoint(*make_model(hf_model_config(f)), f);
    });
  };
  CHECK(contains(refusal("  \"head_dim\": 2,\n"), "config.json says head_dim 2, and q_proj.weight's 32 rows are not 8 heads of 2"));
  CHECK(contains(refusal("  \"head_dim\": 8,\n"), "config.json says head_dim 8, and q_proj.weight's 32 rows are not 8 heads of 8"));
  CHECK(contains(refusal("  \"head_dim\": -4,\n"), "head_dim is -4, not a positive count"));
  // Without config.json's head_dim, q_proj's rows must split evenly, and k_proj's into heads of that width.
  ScratchDir bare("head-dim-bare");
  fs::copy_file(kData + "/hf_llama_f32/model.safetensors", bare.path / "model.safetensors");  // d 32, no config.json
  const HFCheckpoint no_config = read_hf_checkpoint(bare.path.string());
  CHECK(contains(error_message([&] { hf_model_config(no_config, 3); }),
                 "q_proj.weight's 32 rows are not 3 heads of one width (config.json gives no head_dim)"));
  CHECK(contains(error_message([&] { hf_model_config(no_config, 1); }),
                 "k_proj.weight's 16 rows are not key/value heads of 32 features that divide 1 heads"));
  CHECK(contains(error_message([&] { hf_model_config(no_config, 32); }),
                 "heads of 1 features: llama's rotary positions turn features in pairs"));
  CHECK(refusal("  \"head_dim\": 4,\n").empty());
}

TEST_CASE("gpt: a llama of gpt's own with heads of their own width saves and reads back, a gpt2 refuses head_dim") {
  ModelConfig c;
  c.arch = Arch::Llama, c.vocab = 13, c.layers = 2, c.d_model = 12, c.heads = 4, c.kv_heads = 2, c.head_dim = 6;
  c.ff = 20, c.seq_len = 10;
  manual_seed(6);
  auto model = make_model(c);
  ScratchDir scratch("own-head-dim");
  save_hf_directory(*model, default_hf_layout(Arch::Llama), scratch.path.string());
  const HFCheckpoint file = read_hf_checkpoint(scratch.path.string(), Arch::Llama);
  CHECK(file.config.head_dim == 6);
  const ModelConfig read = hf_model_config(file);
  CHECK(read.head_dim == 6);
  CHECK(describe_sizes(read) == describe_sizes(c));
  auto again = make_model(read);
  load_hf_checkpoint(*again, file);
  const nn::NamedTensors original = model->state_dict(), loaded = again->state_dict();
  REQUIRE(original.size() == loaded.size());
  for (size_t i = 0; i < original.size(); ++i) CHECK(max_abs_diff(loaded[i].second, original[i].second) == 0.0);
  c.arch = Arch::GPT2, c.kv_heads = 4;
  CHECK(contains(error_message([&] { make_model(c); }), "GPT-2's heads share d_model out (head_dim is llama's)"));
}
