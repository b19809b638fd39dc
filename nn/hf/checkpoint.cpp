#include "nn/hf/checkpoint.h"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cppgrad.h"
#include "runtime/files.h"

using namespace cppgrad;

namespace cppgrad::hf {

namespace {

namespace fs = std::filesystem;
using nn::NamedTensors;

// One tensor of a Hugging Face file: its name and shape there, and where it lives in the model's
// state_dict.
struct Entry {
  std::string hf_name;
  Shape shape;
  std::string model_name;
  bool transposed = false;  // GPT-2's Conv1D: (in, out), a Linear's weight transposed
  int64_t row_begin = 0, rows = -1;  // rows [row_begin, row_begin + rows) of the model's tensor (-1: all)
  bool tied_copy = false;  // gpt2's lm_head.weight: wte.weight again
};

std::vector<Entry> gpt2_entries(const ModelConfig& c, const HFLayout& layout) {
  const int64_t d = c.d_model, ff = c.ff;
  const std::string& p = layout.prefix;
  std::vector<Entry> e = {{p + "wte.weight", {c.vocab, d}, "wte.weight"},
                          {p + "wpe.weight", {c.seq_len, d}, "wpe.weight"}};
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string h = fmt::format("{}h.{}.", p, i), m = fmt::format("blocks.layers.{}.", i);
    const bool T = true;
    e.push_back({h + "ln_1.weight", {d}, m + "norm1.weight"});
    e.push_back({h + "ln_1.bias", {d}, m + "norm1.bias"});
    e.push_back({h + "attn.c_attn.weight", {d, 3 * d}, m + "self_attn.in_proj_weight", T});  // (in, out)
    e.push_back({h + "attn.c_attn.bias", {3 * d}, m + "self_attn.in_proj_bias"});
    e.push_back({h + "attn.c_proj.weight", {d, d}, m + "self_attn.out_proj.weight", T});
    e.push_back({h + "attn.c_proj.bias", {d}, m + "self_attn.out_proj.bias"});
    e.push_back({h + "ln_2.weight", {d}, m + "norm2.weight"});
    e.push_back({h + "ln_2.bias", {d}, m + "norm2.bias"});
    e.push_back({h + "mlp.c_fc.weight", {d, ff}, m + "linear1.weight", T});
    e.push_back({h + "mlp.c_fc.bias", {ff}, m + "linear1.bias"});
    e.push_back({h + "mlp.c_proj.weight", {ff, d}, m + "linear2.weight", T});
    e.push_back({h + "mlp.c_proj.bias", {d}, m + "linear2.bias"});
  }
  e.push_back({p + "ln_f.weight", {d}, "blocks.norm.weight"});
  e.push_back({p + "ln_f.bias", {d}, "blocks.norm.bias"});
  if (layout.lm_head) e.push_back({"lm_head.weight", {c.vocab, d}, "wte.weight", false, 0, -1, /*tied_copy=*/true});
  return e;
}

std::vector<Entry> llama_entries(const ModelConfig& c) {
  const int64_t head_dim = c.head_dim > 0 ? c.head_dim : c.d_model / c.heads;
  const int64_t d = c.d_model, ff = c.ff, q_width = c.heads * head_dim, kv_width = c.kv_heads * head_dim;
  // MultiheadAttention keeps one (3d, d) in_proj_weight when the heads fill d and are not grouped
  const bool fused = c.kv_heads == c.heads && q_width == d;
  std::vector<Entry> e = {{"model.embed_tokens.weight", {c.vocab, d}, "decoder.tok_embeddings.weight"}};
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string h = fmt::format("model.layers.{}.", i), m = fmt::format("decoder.layers.{}.", i);
    e.push_back({h + "input_layernorm.weight", {d}, m + "attention_norm.weight"});
    if (fused) {
      e.push_back({h + "self_attn.q_proj.weight", {d, d}, m + "attention.in_proj_weight", false, 0, d});
      e.push_back({h + "self_attn.k_proj.weight", {d, d}, m + "attention.in_proj_weight", false, d, d});
      e.push_back({h + "self_attn.v_proj.weight", {d, d}, m + "attention.in_proj_weight", false, 2 * d, d});
    } else {
      e.push_back({h + "self_attn.q_proj.weight", {q_width, d}, m + "attention.q_proj_weight"});
      e.push_back({h + "self_attn.k_proj.weight", {kv_width, d}, m + "attention.k_proj_weight"});
      e.push_back({h + "self_attn.v_proj.weight", {kv_width, d}, m + "attention.v_proj_weight"});
    }
    e.push_back({h + "self_attn.o_proj.weight", {d, q_width}, m + "attention.out_proj.weight"});
    e.push_back({h + "post_attention_layernorm.weight", {d}, m + "ffn_norm.weight"});
    e.push_back({h + "mlp.gate_proj.weight", {ff, d}, m + "feed_forward.w1.weight"});
    e.push_back({h + "mlp.up_proj.weight", {ff, d}, m + "feed_forward.w3.weight"});
    e.push_back({h + "mlp.down_proj.weight", {d, ff}, m + "feed_forward.w2.weight"});
  }
  e.push_back({"model.norm.weight", {d}, "decoder.norm.weight"});
  e.push_back({"lm_head.weight", {c.vocab, d}, "decoder.output.weight"});
  return e;
}

std::vector<Entry> entries_of(const ModelConfig& c, const HFLayout& layout) {
  return layout.arch == Arch::GPT2 ? gpt2_entries(c, layout) : llama_entries(c);
}

const Tensor* find(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

// The layer number of `name` when it reads `<head><digits>.<rest>`.
std::optional<int64_t> layer_of(const std::string& name, const std::string& head) {
  if (!name.starts_with(head)) return std::nullopt;
  const char* begin = name.data() + head.size();
  const char* end = name.data() + name.size();
  int64_t i = 0;
  auto [stop, ec] = std::from_chars(begin, end, i);
  if (ec != std::errc() || stop == begin || stop == end || *stop != '.' || i < 0) return std::nullopt;
  return i;
}

// Whether a and b hold the same bits (a tied copy must be one: -0.0 is not 0.0, a NaN may be).
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  auto bits_equal = [](const auto& x, const auto& y) {
    return std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
  };
  if (a.dtype() == kFloat32) return bits_equal(a.to_vector<float>(), b.to_vector<float>());
  if (a.dtype() == kFloat64) return bits_equal(a.to_vector<double>(), b.to_vector<double>());
  if (a.dtype() == kBFloat16) return bits_equal(a.to_vector<bfloat16>(), b.to_vector<bfloat16>());  // a BF16 file
  return false;
}

// "a, b, c and 4 more": the first few of a list, for a one-line message.
std::string listing(const std::vector<std::string>& items) {
  constexpr size_t kShown = 6;
  std::string out;
  for (size_t i = 0; i < std::min(items.size(), kShown); ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kShown) out += fmt::format(" and {} more", items.size() - kShown);
  return out;
}

std::string describe(const ModelConfig& c) {
  return fmt::format("{} of {} layers, d_model {}, {} heads{}{}, ff {}, vocabulary {}{}", arch_name(c.arch), c.layers,
                     c.d_model, c.heads, c.arch == Arch::Llama ? fmt::format(" ({} key/value)", c.kv_heads) : "",
                     c.head_dim > 0 ? fmt::format(" of {} features", c.head_dim) : "", c.ff, c.vocab,
                     c.arch == Arch::GPT2 ? fmt::format(", {} positions", c.seq_len) : "");
}

// ---- config.json ------------------------------------------------------------------------------

// The keys read, by architecture: Hugging Face's names for the same sizes.
struct ConfigKeys {
  const char *heads, *kv_heads, *layers, *d_model, *ff, *vocab, *positions, *norm_eps;
};
constexpr ConfigKeys kGPT2Keys = {"n_head", nullptr, "n_layer", "n_embd", "n_inner", "vocab_size", "n_positions",
                                  "layer_norm_epsilon"};
constexpr ConfigKeys kLlamaKeys = {"num_attention_heads", "num_key_value_heads", "num_hidden_layers", "hidden_size",
                                   "intermediate_size", "vocab_size", "max_position_embeddings", "rms_norm_eps"};

std::string read_config_file(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  CPPGRAD_CHECK(!ec && size <= (1u << 20), "{}: not a readable file of at most 1 MB", excerpt(path.string()));
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

HFCheckpoint::Config parse_config(const std::string& text, const std::string& where, Arch arch) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not JSON: {}", where, e.what()));
  }
  CPPGRAD_CHECK(j.is_object(), "{}: not a JSON object", where);
  auto string_at = [&](const char* key) -> std::optional<std::string> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    CPPGRAD_CHECK(j[key].is_string(), "{}: {} is not a string", where, key);
    return j[key].get<std::string>();
  };
  auto count_at = [&](const char* key) -> std::optional<int64_t> {
    if (key == nullptr || !j.contains(key) || j[key].is_null()) return std::nullopt;
    CPPGRAD_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() > 0, "{}: {} is {}, not a positive count", where,
                  key, excerpt(j[key].dump()));
    return j[key].get<int64_t>();
  };
  // A model's constant, in the range the checkpoints' are held to (model.h).
  auto number_at = [&](const char* key, const ConstantRange& range) -> std::optional<double> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    CPPGRAD_CHECK(j[key].is_number() && j[key].get<double>() > 0, "{}: {} is {}, not a positive number", where, key,
                  excerpt(j[key].dump()));
    check_in_range(where, key, j[key].get<double>(), range);
    return j[key].get<double>();
  };
  const std::string name = arch_name(arch);
  if (auto type = string_at("model_type"))
    CPPGRAD_CHECK(*type == name, "{}: model_type is '{}', not {}", where, excerpt(*type), name);
  const ConfigKeys& k = arch == Arch::GPT2 ? kGPT2Keys : kLlamaKeys;
  HFCheckpoint::Config c{count_at(k.heads), count_at(k.kv_heads), count_at(k.layers), count_at(k.d_model),
                         count_at(k.ff),    count_at(k.vocab),    count_at(k.positions), number_at(k.norm_eps, kNormEpsRange),
                         std::nullopt, arch == Arch::Llama ? count_at("head_dim") : std::nullopt};
  if (arch == Arch::GPT2) {
    // GPT-2's MLP uses GELU's tanh form, which transformers calls gelu_new.
    const auto act = string_at("activation_function");
    CPPGRAD_CHECK(!act || *act == "gelu_new" || *act == "gelu_pytorch_tanh",
                  "{}: activation_function is '{}': hf::GPT2 uses GELU's tanh form (gelu_new)", where, excerpt(*act));
  } else {
    c.rope_theta = number_at("rope_theta", kRopeThetaRange);
    const auto act = string_at("hidden_act");
    CPPGRAD_CHECK(!act || *act == "silu", "{}: hidden_act is '{}': hf::Llama uses SwiGLU (silu)", where, excerpt(*act));
    CPPGRAD_CHECK(!j.contains("rope_scaling") || j["rope_scaling"].is_null(),
                  "{}: rope_scaling is set ({}): hf::Llama has plain rotary positions", where, excerpt(j["rope_scaling"].dump()));
    CPPGRAD_CHECK(!j.contains("attention_bias") || j["attention_bias"] == false,
                  "{}: attention_bias is set: hf::Llama has no biases", where);
    CPPGRAD_CHECK(!j.contains("tie_word_embeddings") || j["tie_word_embeddings"] == false,
                  "{}: tie_word_embeddings is set: hf::Llama has an output projection of its own (lm_head.weight)",
                  where);
  }
  return c;
}

// Every difference between the file and the model of `c`, in the file's names, in one message.
void check_fits(const HFCheckpoint& file, const ModelConfig& c) {
  const std::string where = excerpt(file.path);
  const std::vector<Entry> entries = entries_of(c, file.layout);
  std::vector<std::string> missing, wrong, unexpected;
  std::set<std::string> expected_names;
  for (const Entry& e : entries) {
    expected_names.insert(e.hf_name);
    const Tensor* t = find(file.tensors, e.hf_name);
    if (t == nullptr)
      missing.push_back(e.hf_name);
    else if (t->shape() != e.shape)
      wrong.push_back(fmt::format("{} is {}, not {}", e.hf_name, shape_str(t->shape()), shape_str(e.shape)));
    else if (!t->is_floating_point())
      wrong.push_back(fmt::format("{} is {}, not floating-point", e.hf_name, dtype_name(t->dtype())));
  }
  for (const auto& [name, t] : file.tensors)
    if (!expected_names.count(name)) unexpected.push_back(excerpt(name));
  if (!missing.empty() || !wrong.empty() || !unexpected.empty()) {
    std::vector<std::string> parts;
    if (!missing.empty()) parts.push_back(fmt::format("missing {}", listing(missing)));
    if (!wrong.empty()) parts.push_back(listing(wrong));
    if (!unexpected.empty()) parts.push_back(fmt::format("unexpected {}", listing(unexpected)));
    std::string all;
    for (const auto& p : parts) all += (all.empty() ? "" : "; ") + p;
    throw Error(fmt::format("{} does not fit a {}: {}", where, describe(c), all));
  }

}

}  // namespace

HFLayout default_hf_layout(Arch arch) {
  HFLayout layout;
  layout.arch = arch;
  layout.prefix = arch == Arch::GPT2 ? "transformer." : "model.";
  layout.lm_head = arch == Arch::Llama;  // transformers drops GPT-2's tied copy
  return layout;
}

HFCheckpoint read_hf_checkpoint(const std::string& path, std::optional<Arch> expected) {
  fs::path file = path;
  std::error_code ec;
  if (fs::is_directory(file, ec)) {
    file /= "model.safetensors";
    if (!fs::exists(file, ec) && fs::exists(fs::path(path) / "model.safetensors.index.json", ec))
      throw Error(fmt::format("'{}' holds a checkpoint split into shards (model.safetensors.index.json): read_hf_checkpoint reads "
                              "one model.safetensors", excerpt(path)));
  }
  CPPGRAD_CHECK(fs::is_regular_file(file, ec), "'{}' is not a file (a model.safetensors, or a directory with one)",
                excerpt(file.string()));
  auto contents = nn::load_safetensors(file.string());
  const fs::path config = file.parent_path() / "config.json";
  // A config.json that is a link to nothing is a broken download, not a checkpoint without one.
  const bool config_named = fs::exists(fs::symlink_status(config, ec));
  CPPGRAD_CHECK(!config_named || fs::exists(config, ec), "'{}' is a symbolic link to nothing (config.json must be "
                "the model's or absent)", excerpt(config.string()));
  const std::optional<std::string> config_text = config_named ? std::optional(read_config_file(config)) : std::nullopt;
  return hf_checkpoint_of(std::move(contents), file.string(), config_text, expected);
}

HFCheckpoint hf_checkpoint_of(nn::SafetensorsContents contents, const std::string& path,
                              const std::optional<std::string>& config_json, std::optional<Arch> expected) {
  HFCheckpoint out;
  out.path = path;
  HFLayout& layout = out.layout;
  const bool llama = contents.contains("model.embed_tokens.weight");
  const bool gpt2_prefixed = contents.contains("transformer.wte.weight");
  if (llama) {
    layout = default_hf_layout(Arch::Llama);
  } else if (gpt2_prefixed || contents.contains("wte.weight")) {
    layout.arch = Arch::GPT2;
    layout.prefix = gpt2_prefixed ? "transformer." : "";
    layout.lm_head = contents.contains("lm_head.weight");
  } else {
    std::vector<std::string> names;
    for (const auto& [n, t] : contents.tensors) names.push_back(excerpt(n));
    throw Error(fmt::format("{}: neither GPT-2's names (transformer.wte.weight) nor Llama's (model.embed_tokens.weight); "
                            "it holds {}", excerpt(out.path), names.empty() ? "no tensors" : listing(names)));
  }
  if (expected && *expected != layout.arch)
    throw Error(fmt::format("{}: a {} checkpoint ({}), not {}", excerpt(out.path),
                            layout.arch == Arch::Llama ? "Llama" : "GPT-2",
                            layout.arch == Arch::Llama ? "model.embed_tokens.weight" : layout.prefix + "wte.weight",
                            arch_name(*expected)));
  // GPT-2's attention buffers (the causal mask and the masked score), which Hugging Face's
  // loader ignores: kept aside, as they were, for saving.
  for (auto& [name, t] : contents.tensors) {
    const bool buffer = layer_of(name, layout.prefix + "h.") &&
                        (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"));
    if (layout.arch == Arch::GPT2 && buffer)
      layout.buffers.emplace_back(name, t);
    else
      out.tensors.emplace_back(name, t);
  }
  if (config_json)
    out.config = parse_config(*config_json, excerpt((fs::path(path).parent_path() / "config.json").string()), layout.arch);
  return out;
}

ModelConfig hf_model_config(const HFCheckpoint& file, std::optional<int64_t> heads) {
  const HFLayout& layout = file.layout;
  const auto& given = file.config;
  const std::string where = excerpt(file.path);
  ModelConfig c;
  c.arch = layout.arch;
  auto matrix = [&](const std::string& name) {
    const Tensor* t = find(file.tensors, name);
    CPPGRAD_CHECK(t != nullptr, "{}: no {}", where, name);
    CPPGRAD_CHECK(t->dim() == 2, "{}: {} is {}, not a matrix", where, name, shape_str(t->shape()));
    return t->shape();
  };
  const bool gpt2 = layout.arch == Arch::GPT2;
  const std::string embedding = gpt2 ? layout.prefix + "wte.weight" : "model.embed_tokens.weight";
  const Shape vd = matrix(embedding);
  c.vocab = vd[0], c.d_model = vd[1];
  CPPGRAD_CHECK(c.vocab > 0 && c.d_model > 0, "{}: {} is {}: no tokens or no features", where, embedding, shape_str(vd));
  // The layers: the numbers in the names, which must run 0, 1, ..., n - 1 with no gap (so the
  // count is at most the file's number of tensors, whatever number a name claims).
  const std::string layer_head = gpt2 ? layout.prefix + "h." : "model.layers.";
  std::set<int64_t> seen;
  for (const auto& [name, t] : file.tensors)
    if (auto i = layer_of(name, layer_head)) seen.insert(*i);
  CPPGRAD_CHECK(!seen.empty(), "{}: no layers ({}0. ...)", where, layer_head);
  int64_t layers = 0;
  while (seen.count(layers)) ++layers;
  CPPGRAD_CHECK(layers == static_cast<int64_t>(seen.size()), "{}: layer {} is missing ({}{}. ...), though layer {} is "
                "there", where, layers, layer_head, layers, *seen.rbegin());
  c.layers = layers;
  c.ff = gpt2 ? matrix(layer_head + "0.mlp.c_fc.weight")[1] : matrix("model.layers.0.mlp.gate_proj.weight")[0];
  if (gpt2) c.seq_len = matrix(layout.prefix + "wpe.weight")[0];
  CPPGRAD_CHECK(c.ff > 0 && c.seq_len > 0, "{}: an MLP of {} features, {} positions: empty", where, c.ff, c.seq_len);

  // The heads: the shapes do not tell them.
  CPPGRAD_CHECK(!heads || !given.heads || *heads == *given.heads, "heads {}: config.json beside {} says {}", *heads,
                where, given.heads.value_or(0));
  CPPGRAD_CHECK(heads || given.heads, "{}: how many attention heads? The shapes do not tell: give them (heads), or put the "
                "model's config.json beside it", where);
  c.heads = heads ? *heads : *given.heads;
  c.kv_heads = c.heads;
  if (gpt2) {
    CPPGRAD_CHECK(c.d_model % c.heads == 0, "{}: {} heads do not divide d_model {}", where, c.heads, c.d_model);
  } else {
    // The heads' width: config.json's head_dim (transformers' LlamaConfig), else what q_proj's
    // rows give each head (d_model / heads for most models).
    const int64_t q_rows = matrix("model.layers.0.self_attn.q_proj.weight")[0];
    CPPGRAD_CHECK(given.head_dim || (q_rows > 0 && q_rows % c.heads == 0), "{}: q_proj.weight's {} rows are not {} "
                  "heads of one width (config.json gives no head_dim)", where, q_rows, c.heads);
    const int64_t head_dim = given.head_dim ? *given.head_dim : q_rows / c.heads;
    CPPGRAD_CHECK(q_rows == c.heads * head_dim, "{}: config.json says head_dim {}, and q_proj.weight's {} rows are not {} "
                  "heads of {}", where, head_dim, q_rows, c.heads, head_dim);
    if (head_dim * c.heads != c.d_model) c.head_dim = head_dim;
    const int64_t kv_rows = matrix("model.layers.0.self_attn.k_proj.weight")[0];
    CPPGRAD_CHECK(kv_rows % head_dim == 0 && kv_rows > 0 && c.heads % (kv_rows / head_dim) == 0,
                  "{}: k_proj.weight's {} rows are not key/value heads of {} features{} that divide {} heads", where,
                  kv_rows, head_dim, given.head_dim ? " (config.json's head_dim)" : "", c.heads);
    c.kv_heads = kv_rows / head_dim;
    CPPGRAD_CHECK(head_dim % 2 == 0, "{}: heads of {} features: llama's rotary positions turn features in pairs", where,
                  head_dim);
    if (given.positions) c.seq_len = *given.positions;
  }
  // Hugging Face's defaults when config.json does not say (GPT2Config's, LlamaConfig's).
  c.norm_eps = given.norm_eps.value_or(gpt2 ? 1e-5 : 1e-6);
  c.rope_theta = given.rope_theta.value_or(10000.0);

  // What config.json says must be what the shapes say.
  const std::pair<const std::optional<int64_t>*, int64_t> agree[] = {
      {&given.layers, c.layers}, {&given.d_model, c.d_model}, {&given.ff, c.ff}, {&given.vocab, c.vocab},
      {&given.kv_heads, c.kv_heads}};
  const char* names[] = {"layers", "d_model", "ff", "vocabulary", "key/value heads"};
  for (size_t i = 0; i < std::size(agree); ++i)
    CPPGRAD_CHECK(!*agree[i].first || **agree[i].first == agree[i].second,
                  "{}: config.json says {} {}, the weights' shapes {}", where, names[i], **agree[i].first, agree[i].second);
  if (gpt2)
    CPPGRAD_CHECK(!given.positions || *given.positions == c.seq_len,
                  "{}: config.json says {} positions, wpe.weight has {}", where, given.positions.value_or(0), c.seq_len);
  // The whole file checked now, so that a model is built only for a file that holds all its
  // weights (a hostile file's shapes cannot ask for more memory than the file has bytes).
  check_fits(file, c);
  return c;
}

void load_hf_checkpoint(LanguageModel& model, const HFCheckpoint& file) {
  const ModelConfig& c = model.config;
  const std::string where = excerpt(file.path);
  CPPGRAD_CHECK(file.layout.arch == c.arch, "{}: a {} checkpoint, not {}", where, arch_name(file.layout.arch),
                arch_name(c.arch));
  check_fits(file, c);
  const std::vector<Entry> entries = entries_of(c, file.layout);

  // The model's state_dict from the file's tensors: transposed back from Conv1D's layout, the
  // fused projection's rows gathered in order, converted to the model's dtype.
  const DType dtype = model.parameters().front().dtype();
  std::map<std::string, std::vector<Tensor>> parts;
  std::vector<std::string> order;
  for (const Entry& e : entries) {
    const Tensor& t = *find(file.tensors, e.hf_name);
    if (e.tied_copy) {
      const Tensor& tied = *find(file.tensors, file.layout.prefix + "wte.weight");
      if (!same_bits(t, tied)) {
        NoGradGuard no_grad;
        const double differs = (t.to(kFloat64) - tied.to(kFloat64)).abs().max().item();
        throw Error(fmt::format("{}: lm_head.weight differs from {}wte.weight (by up to {:.3g}): an untied GPT-2, and "
                                "hf::GPT2 ties them", where, file.layout.prefix, differs));
      }
      continue;
    }
    if (!parts.count(e.model_name)) order.push_back(e.model_name);
    parts[e.model_name].push_back((e.transposed ? t.t() : t).to(dtype));
  }
  NamedTensors state;
  for (const auto& name : order) {
    const auto& p = parts[name];
    state.emplace_back(name, p.size() == 1 ? p.front().contiguous() : cat(p, 0));
  }
  model.load_state_dict(state, /*strict=*/true);
}

NamedTensors hf_state_dict(const LanguageModel& model, const HFLayout& layout) {
  CPPGRAD_CHECK(layout.arch == model.config.arch, "hf_state_dict: a {} layout for a {} model", arch_name(layout.arch),
                arch_name(model.config.arch));
  const NamedTensors state = model.state_dict();
  NamedTensors out;
  for (const Entry& e : entries_of(model.config, layout)) {
    const Tensor* t = find(state, e.model_name);
    CPPGRAD_CHECK(t != nullptr, "hf_state_dict: the model has no {}", e.model_name);
    Tensor w = t->detach();
    if (e.rows >= 0) w = w.narrow(0, e.row_begin, e.rows);
    if (e.transposed) w = w.t();
    out.emplace_back(e.hf_name, w.contiguous());
  }
  for (const auto& b : layout.buffers) out.push_back(b);
  return out;
}

void save_hf_checkpoint(const LanguageModel& model, const HFLayout& layout, const std::string& path) {
  nn::save_safetensors(path, hf_state_dict(model, layout), {{"format", "pt"}});
}

void save_hf_directory(const LanguageModel& model, const HFLayout& layout, const std::string& dir) {
  const ModelConfig& c = model.config;
  const bool f64 = model.parameters().front().dtype() == kFloat64;
  nlohmann::ordered_json j;
  if (c.arch == Arch::GPT2) {
    j = {{"model_type", "gpt2"}, {"architectures", {"GPT2LMHeadModel"}}, {"vocab_size", c.vocab},
         {"n_positions", c.seq_len}, {"n_embd", c.d_model}, {"n_layer", c.layers}, {"n_head", c.heads},
         {"n_inner", c.ff}, {"activation_function", "gelu_new"}, {"layer_norm_epsilon", c.norm_eps},
         {"tie_word_embeddings", true}};
  } else {
    j = {{"model_type", "llama"}, {"architectures", {"LlamaForCausalLM"}}, {"vocab_size", c.vocab},
         {"hidden_size", c.d_model}, {"intermediate_size", c.ff}, {"num_hidden_layers", c.layers},
         {"num_attention_heads", c.heads}, {"num_key_value_heads", c.kv_heads}, {"max_position_embeddings", c.seq_len},
         {"rms_norm_eps", c.norm_eps}, {"rope_theta", c.rope_theta}, {"hidden_act", "silu"},
         {"tie_word_embeddings", false}};
    if (c.head_dim > 0) j["head_dim"] = c.head_dim;
  }
  j["torch_dtype"] = f64 ? "float64" : "float32";
  std::error_code ec;
  fs::create_directories(dir, ec);
  CPPGRAD_CHECK(!ec, "cannot create the directory '{}': {}", excerpt(dir), ec.message());
  save_hf_checkpoint(model, layout, (fs::path(dir) / "model.safetensors").string());
  const fs::path config = fs::path(dir) / "config.json";
  files::write_file_atomically(config.string(), std::string_view(j.dump(2) + "\n"), "save_hf_directory");
}

}  // namespace cppgrad::hf
