#include "gpt/options.h"

#include <cmath>
#include <filesystem>

#include "common/checkpoints.h"
#include "common/cli_app.h"
#include "common/data_parallel.h"
#include "common/observe.h"

using namespace cppgrad;

namespace gpt {

namespace {

struct SizePreset {
  const char* name;
  int64_t layers, d_model, heads, ff, seq_len;
};
// tiny: seconds (the tests); small: the default run, minutes on 2 cores; gpt-M: nanoGPT's
// Shakespeare-character model's shape, hours.
constexpr SizePreset kSizes[] = {{"tiny", 2, 64, 4, 256, 64}, {"small", 4, 128, 4, 512, 128},
                                 {"gpt-M", 6, 384, 6, 1536, 256}};

// The options that shape the model, with their fields.
struct SizeOption {
  const char* option;
  const char* key;  // in the checkpoint's metadata
  int64_t ModelConfig::*field;
};
constexpr SizeOption kSizeOptions[] = {{"--layers", "layers", &ModelConfig::layers},
                                       {"--d-model", "d_model", &ModelConfig::d_model},
                                       {"--heads", "heads", &ModelConfig::heads},
                                       {"--kv-heads", "kv_heads", &ModelConfig::kv_heads},
                                       {"--ff", "ff", &ModelConfig::ff},
                                       {"--seq-len", "seq_len", &ModelConfig::seq_len}};

const SizePreset& preset(const std::string& name) {
  for (const auto& p : kSizes)
    if (name == p.name) return p;
  throw Error(fmt::format("--size: unknown size '{}' (tiny, small or gpt-M)", excerpt(name)));
}

// --size's sizes, for those not given one by one.
void apply_preset(const CLI::App& app, Options& o) {
  const SizePreset& p = preset(o.size);
  if (app.count("--layers") == 0) o.model.layers = p.layers;
  if (app.count("--d-model") == 0) o.model.d_model = p.d_model;
  if (app.count("--heads") == 0) o.model.heads = p.heads;
  if (app.count("--ff") == 0) o.model.ff = p.ff;
  if (app.count("--seq-len") == 0) o.model.seq_len = p.seq_len;
}

std::string metadata_at(const Checkpoint& c, const std::string& key) {
  auto it = c.metadata.find(key);
  CPPGRAD_CHECK(it != c.metadata.end(), "--resume: the checkpoint has no '{}' in its metadata (not written by gpt?)", key);
  return it->second;
}

// A size or a step count from the checkpoint's metadata: 1 or more (a size of 0 would divide by
// zero below), 0 or more where `least` says so.
int64_t metadata_int(const Checkpoint& c, const std::string& key, int64_t least = 1) {
  return examples::metadata_count(c.metadata, key, "--resume: the checkpoint", "gpt", least);
}

// A constant of the model kept in the metadata (norm_eps, rope_theta), in the range a
// config.json's is held to (model.h).
double metadata_number(const Checkpoint& c, const ConstantRange& range) {
  const std::string text = metadata_at(c, range.name);
  double value = std::nan("");
  try {
    size_t used = 0;
    value = std::stod(text, &used);
    if (used != text.size()) value = std::nan("");
  } catch (const std::exception&) {  // not a number, or one past a double's range (1e999)
  }
  CPPGRAD_CHECK(!std::isnan(value), "--resume: the checkpoint's {} is '{}', not a number a double holds", range.name, excerpt(text));
  check_in_range("--resume: the checkpoint's metadata", range.name, value, range);
  return value;
}

// GPT-2's vocabulary files in `dir`: OpenAI's names (encoder.json, vocab.bpe) or the Hub's
// (vocab.json, merges.txt), the same formats.
std::optional<std::pair<std::filesystem::path, std::filesystem::path>> gpt2_vocab_files(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& [vocab, merges] : {std::pair{"encoder.json", "vocab.bpe"}, std::pair{"vocab.json", "merges.txt"}})
    if (std::filesystem::exists(dir / vocab, ec) && std::filesystem::exists(dir / merges, ec))
      return std::pair{dir / vocab, dir / merges};
  return std::nullopt;
}

// --init-from: the model is the file's; the sizes given must agree with it.
void take_pretrained(const CLI::App& app, Options& o, const HFCheckpoint& file) {
  CPPGRAD_CHECK(app.count("--size") == 0, "--size: with --init-from, the model's sizes are the file's");
  const bool heads_given = app.count("--heads") > 0;
  CPPGRAD_CHECK(heads_given || file.config.heads, "--init-from: {}: how many attention heads? The shapes do not tell: "
                "give --heads, or put the model's config.json beside it", excerpt(file.path));
  ModelConfig m;
  try {
    m = hf_model_config(file, heads_given ? std::optional(o.model.heads) : std::nullopt);
  } catch (const Error& e) {
    throw Error(fmt::format("--init-from: {}", e.what()));
  }
  for (const auto& s : kSizeOptions) {
    if (s.field == &ModelConfig::seq_len) continue;
    CPPGRAD_CHECK(app.count(s.option) == 0 || o.model.*s.field == m.*s.field, "{} {}: the model of {} has {} {}",
                  s.option, o.model.*s.field, excerpt(file.path), s.key, m.*s.field);
  }
  // --seq-len: the training windows, at most the positions the model knows.
  const bool window_given = app.count("--seq-len") > 0;
  CPPGRAD_CHECK(!window_given || o.model.seq_len <= m.seq_len, "--seq-len {}: the model of {} knows {} positions",
                o.model.seq_len, excerpt(file.path), m.seq_len);
  o.window = window_given ? o.model.seq_len : m.seq_len;
  m.dropout = o.model.dropout;
  o.model = m;
  o.arch = arch_name(m.arch);
  o.size = "pretrained";  // as the run's first line names it
  // Its tokenizer: the token ids are the embedding's rows. One beside the model: GPT-2's files, or
  // the character or BPE tokenizer --save-hf wrote there.
  if (app.count("--tokenizer") == 0 && o.gpt2_vocab.empty()) {
    const auto dir = std::filesystem::path(file.path).parent_path();
    std::optional<HFTokenizerFiles> beside;
    try {
      beside = find_hf_tokenizer(dir);
    } catch (const Error& e) {
      throw Error(fmt::format("--init-from: {}", e.what()));
    }
    CPPGRAD_CHECK(beside, "--init-from: give the model's tokenizer: none lies beside {} (GPT-2's vocab.json and "
                  "merges.txt, or encoder.json and vocab.bpe; or what gpt's --save-hf writes): --gpt2-vocab DIR{}",
                  excerpt(file.path), m.arch == Arch::GPT2 ? "" : "; Llama's own (tokenizer.model) is not one gpt "
                  "reads, so only --tokenizer char or bpe, whose ids are not the ones it learnt");
    if (beside->kind == "gpt2")
      o.gpt2_vocab = dir.string();
    else
      o.tokenizer = beside->kind, o.saved_tokenizer = beside;
  }
}

}  // namespace

void add_options(CLI::App& app, Options& o) {
  app.add_option("--data", o.data, "the text to learn, plain or .gz (its last 10% is held out); default: the Jargon File")
      ->check(CLI::ExistingFile);
  app.add_option("--max-data-mb", o.max_data_mb, "largest --data read, in MB uncompressed")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--arch", o.arch, "gpt2 (LayerNorm, GELU, learned positions, tied embeddings) or llama (RMSNorm, "
                                   "rotary positions, grouped-query attention, SwiGLU, no biases)");
  app.add_option("--size", o.size, "the model's sizes: tiny (2 layers, d_model 64, T 64), small (4, 128, T 128) or gpt-M "
                                   "(6 layers, d_model 384, 6 heads, ff 1536, T 256); the options below override it");
  examples::add_size_options(app, o.model, "Transformer blocks");
  app.add_option("--kv-heads", o.model.kv_heads, "key/value heads, llama only (must divide --heads; default: --heads)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--seq-len", o.model.seq_len, "tokens per training window, and the longest context")
      ->check(CLI::Range(1, 65536));
  app.add_option("--tokenizer", o.tokenizer, "char (one token a byte) or bpe (byte-level BPE learnt on the training part)")
      ->check(CLI::IsMember({"char", "bpe"}));
  app.add_option("--bpe-vocab", o.bpe_vocab, "the learnt BPE's vocabulary size (256 bytes + merges)")
      ->check(CLI::Range(int64_t{256}, int64_t{1} << 20));
  app.add_option("--gpt2-vocab", o.gpt2_vocab, "GPT-2's own tokenizer: a directory with encoder.json and vocab.bpe "
                                               "(or the Hub's vocab.json and merges.txt)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--init-from", o.init_from, "hf:PATH: start from a Hugging Face GPT-2 or Llama model.safetensors (or "
                                             "its directory, with config.json); the sizes are its own")
      ->check(examples::names_a_path());
  app.add_option("--export-onnx", o.export_onnx, "at the end, write the model as an ONNX inference graph: input "
                                                 "tokens (batch, sequence), output logits")
      ->check(examples::names_a_path());
  app.add_option("--save-hf", o.save_hf, "at the end, write the model to DIR/model.safetensors under Hugging Face's "
                                         "names, DIR/config.json, and its tokenizer: a BPE's vocab.json and merges.txt "
                                         "(GPT-2's byte-level format), or characters' vocab.json (each byte -> its id), "
                                         "with tokenizer_config.json naming the kind; --init-from hf:DIR reads them back")
      ->check(examples::names_a_path());
  app.add_option("--steps", o.steps, "training steps in all (a resumed run continues up to this); 0: train nothing, "
                                     "print the run's figures and sample the model as it starts (--resume's, "
                                     "--init-from's or untrained)")
      ->check(CLI::Range(0, 100'000'000));
  app.add_option("--batch", o.batch, "windows per micro-batch, over all processes")->check(CLI::Range(1, 65536));
  app.add_option("--accum", o.accum, "micro-batches whose gradients one step sums (gradient accumulation)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--lr", o.lr, "peak learning rate of AdamW, after the linear warm-up")->check(examples::number_in(1e-8, 1.0));
  app.add_option("--min-lr", o.min_lr, "the rate the cosine decay ends at")->check(examples::number_in(0.0, 1.0));
  app.add_option("--warmup", o.warmup, "warm-up steps, the rate rising linearly to --lr (default: 100, at most a "
                                       "tenth of --decay-steps; resuming: the checkpoint's)")->check(CLI::Range(0, 100'000'000));
  app.add_option("--decay-steps", o.decay_steps, "the step the cosine decay reaches --min-lr (default: --steps; "
                                                 "resuming: the checkpoint's, which a larger --decay-steps extends)")
      ->check(CLI::Range(1, 100'000'000));
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decay of the 2-D weights (matrices and embeddings)")
      ->check(examples::number_in(0.0, 1.0));
  app.add_option("--beta2", o.beta2, "AdamW's β₂ (its β₁ is 0.9, and β₂ must be above β₁²)")
      ->check(examples::number_above(0.81, 0.9999999));
  app.add_option("--clip", o.clip, "largest gradient norm (larger ones are scaled down to it)")
      ->check(examples::number_in(1e-6, 1e6));
  app.add_option("--seed", o.seed, "random seed (weights, windows, dropout, sampling)")->check(examples::digits_only());
  app.add_option("--dtype", o.dtype, "fp32, or bf16: matrix products in bfloat16 (autocast), weights, gradients and "
                                     "AdamW in float32")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--threads", o.threads, "threads for BLAS and cppgrad's loops (default: all cores)")
      ->check(CLI::Range(1, 256));
  app.add_option("--save", o.save, "write a checkpoint (model, tokenizer, optimizer, schedule, step, RNG) at the end")
      ->check(examples::names_a_path());
  app.add_option("--resume", o.resume, "continue from a checkpoint written by --save (its model and tokenizer), or by --save-every: latest (the newest in --save-dir; none yet: a new run) or a directory (its newest)")
      ->check(examples::resume_target());
  examples::add_checkpoint_options(app, o.checkpoints);
  app.add_option("--eval-every", o.eval_every, "steps between held-out evaluations")->check(CLI::Range(1, 100'000'000));
  app.add_option("--eval-windows", o.eval_windows, "held-out windows evaluated (spread evenly over the held-out part)")
      ->check(CLI::Range(1, 1'000'000));
  app.add_flag("--checkpoint", o.checkpoint, "activation checkpointing: recompute each block's activations in backward");
  app.add_option("--plot", o.plot, "write the train and held-out loss curves as SVG")->check(examples::names_a_path());
  examples::add_trace_option(app, o.trace);
  examples::add_log_dir_option(app, o.log_dir);
  app.add_option("--write-tokens", o.write_tokens, "write the training and held-out token ids to PREFIX.train.npy and "
                                                   "PREFIX.held_out.npy (int64), as the PyTorch twin reads them")
      ->check(examples::names_a_path());
  app.add_option("--sample-len", o.sample.length, "tokens to sample after training")->check(CLI::Range(0, 10'000'000));
  app.add_option("--temperature", o.sample.temperature, "sampling temperature (0: always the most likely token)")
      ->check(examples::number_in(0.0, 100.0));
  app.add_option("--top-k", o.sample.top_k, "sample among the k most likely tokens only (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--top-p", o.sample.top_p, "nucleus sampling: among the most likely tokens whose probabilities "
                                            "reach p (1: all)")->check(examples::number_in(1e-9, 1.0));
  app.add_option("--prompt", o.prompts, "text the sample continues (default: a token of the held-out text); given "
                                        "several times, one sample each, written together in one left-padded batch")
      ->allow_extra_args(false);
}

Arch parse_arch(const std::string& name) {
  if (name == "gpt2") return Arch::GPT2;
  if (name == "llama") return Arch::Llama;
  throw Error(fmt::format("--arch: unknown architecture '{}' (gpt2 or llama)", name));
}

std::optional<HFCheckpoint> read_pretrained(const CLI::App& app, const Options& o) {
  if (o.init_from.empty()) return std::nullopt;
  CPPGRAD_CHECK(o.init_from.starts_with("hf:"), "--init-from: '{}' must be hf:PATH (a Hugging Face model.safetensors, "
                "or the directory holding it)", excerpt(o.init_from));
  CPPGRAD_CHECK(o.resume.empty(), "--init-from: not with --resume (a resumed run's model is its checkpoint's)");
  const std::optional<Arch> arch = app.count("--arch") ? std::optional(parse_arch(o.arch)) : std::nullopt;
  try {
    return read_hf_checkpoint(o.init_from.substr(3), arch);
  } catch (const Error& e) {
    throw Error(fmt::format("--init-from: {}", e.what()));
  }
}

void init_from(LanguageModel& model, const HFCheckpoint& file, bool say) {
  try {
    load_hf_checkpoint(model, file);
  } catch (const Error& e) {
    throw Error(fmt::format("--init-from: {}", e.what()));
  }
  if (say) fmt::print("weights from {} ({} under Hugging Face's names)\n", file.path, arch_name(model.config.arch));
}

// --gpt2-vocab is the gpt2 tokenizer: another given with it is refused, not overridden.
void take_gpt2_vocab(const CLI::App& app, Options& o) {
  if (o.gpt2_vocab.empty()) return;
  CPPGRAD_CHECK(app.count("--tokenizer") == 0, "--gpt2-vocab is GPT-2's tokenizer: --tokenizer {} asks for another",
                o.tokenizer);
  o.tokenizer = "gpt2";
}

int64_t finish_options(const CLI::App& app, Options& o, const Checkpoint* resumed, const HFCheckpoint* pretrained) {
  const bool size_given = app.count("--size") > 0;
  if (pretrained) {
    take_pretrained(app, o, *pretrained);
    take_gpt2_vocab(app, o);
    if (o.decay_steps == 0) o.decay_steps = std::max<int64_t>(o.steps, 1);
    if (app.count("--warmup") == 0) o.warmup = std::min<int64_t>(o.warmup, o.decay_steps / 10);
  } else if (resumed) {
    // The model is the checkpoint's: what was given must agree with it.
    const std::string arch = metadata_at(*resumed, "arch");
    CPPGRAD_CHECK(app.count("--arch") == 0 || o.arch == arch, "--resume: the checkpoint's model is {}, not {}",
                  excerpt(arch), o.arch);
    o.arch = arch;
    if (size_given) apply_preset(app, o);
    // --seq-len is the training windows, shorter than the model's context after --init-from.
    const int64_t window = metadata_int(*resumed, "window");
    for (const auto& s : kSizeOptions) {
      const int64_t saved = metadata_int(*resumed, s.key);
      const int64_t compared = s.field == &ModelConfig::seq_len ? window : saved;
      const bool given = app.count(s.option) > 0 || (size_given && s.field != &ModelConfig::kv_heads);
      CPPGRAD_CHECK(!given || o.model.*s.field == compared, "--resume: the checkpoint's model has {} {}, not {}", s.key,
                    compared, o.model.*s.field);
      o.model.*s.field = saved;
    }
    o.window = window;
    // The size the run's first line names: the preset whose sizes the checkpoint has, if one.
    if (!size_given) {
      o.size = "custom";
      for (const auto& p : kSizes)
        if (o.model.layers == p.layers && o.model.d_model == p.d_model && o.model.heads == p.heads &&
            o.model.ff == p.ff && window == p.seq_len)
          o.size = p.name;
    }
    o.model.vocab = metadata_int(*resumed, "vocab");  // a pretrained model's (--init-from), or the tokenizer's
    o.model.norm_eps = metadata_number(*resumed, kNormEpsRange);
    o.model.rope_theta = metadata_number(*resumed, kRopeThetaRange);
    // Written only for heads whose width is not d_model / heads (a Hugging Face model's head_dim).
    if (resumed->metadata.count("head_dim")) o.model.head_dim = metadata_int(*resumed, "head_dim");
    CPPGRAD_CHECK(app.count("--tokenizer") == 0 || o.tokenizer == resumed->tokenizer.kind,
                  "--resume: the checkpoint's tokenizer is {}, not {}", resumed->tokenizer.kind, o.tokenizer);
    o.tokenizer = resumed->tokenizer.kind;
    CPPGRAD_CHECK(o.gpt2_vocab.empty(), "--gpt2-vocab: resuming, the tokenizer is the checkpoint's");
    // A resumed run may extend its schedule (kept_options' notice says so), never shorten it: the
    // steps taken followed the checkpoint's, and the resumed weights are checked against the rates
    // the schedule gives those steps (examples::reachable_weight), which a longer decay only raises.
    const int64_t saved_decay = metadata_int(*resumed, "decay_steps");
    CPPGRAD_CHECK(o.decay_steps >= saved_decay, "--decay-steps {}: the checkpoint's run decays over {} steps; a resumed "
                  "run may extend its schedule, not shorten it", o.decay_steps, saved_decay);
    if (app.count("--warmup") == 0) o.warmup = metadata_int(*resumed, "warmup", 0);
  } else {
    apply_preset(app, o);
    o.window = o.model.seq_len;
    take_gpt2_vocab(app, o);
    if (o.decay_steps == 0) o.decay_steps = std::max<int64_t>(o.steps, 1);
    if (app.count("--warmup") == 0) o.warmup = std::min<int64_t>(o.warmup, o.decay_steps / 10);  // short runs
  }
  CPPGRAD_CHECK(o.warmup < o.decay_steps, "--warmup {} must be less than --decay-steps {} (default: --steps)", o.warmup,
                o.decay_steps);
  auto& m = o.model;
  m.arch = parse_arch(o.arch);
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  // Sizes a resumed run takes from its checkpoint are the metadata's to answer for, not an option's.
  const std::string sizes_from = resumed ? "--resume: the checkpoint's metadata" : "--heads";
  // A model of heads of their own width (head_dim, from a Hugging Face config.json) is checked by
  // the attention layer it builds.
  CPPGRAD_CHECK(m.head_dim > 0 || m.d_model % m.heads == 0, "{}: {} heads do not divide {} {}", sizes_from, m.heads,
                resumed ? "d_model" : "--d-model", m.d_model);
  CPPGRAD_CHECK(m.heads % m.kv_heads == 0, "{}: {} key/value heads do not divide the {} query heads",
                resumed ? sizes_from : "--kv-heads", m.kv_heads, m.heads);
  CPPGRAD_CHECK(m.arch == Arch::Llama || m.kv_heads == m.heads, "--kv-heads: gpt2 has as many key/value heads as "
                "heads ({}); grouped-query attention is --arch llama's", m.heads);
  CPPGRAD_CHECK(m.arch == Arch::GPT2 || m.head_dim > 0 || (m.d_model / m.heads) % 2 == 0, "--heads: llama's rotary "
                "positions need an even head width, and d_model {} / {} heads = {}", m.d_model, m.heads, m.d_model / m.heads);
  CPPGRAD_CHECK(o.min_lr <= o.lr, "--min-lr {} is above --lr {}", o.min_lr, o.lr);
  if (!o.save.empty()) examples::check_writable("--save", o.save);
  if (!o.plot.empty()) examples::check_writable("--plot", o.plot);
  if (!o.export_onnx.empty()) examples::check_writable("--export-onnx", o.export_onnx);
  if (!o.save_hf.empty()) examples::check_writable_in("--save-hf", o.save_hf, "model.safetensors");
  if (!o.write_tokens.empty()) examples::check_writable("--write-tokens", o.write_tokens + ".train.npy");
  // Parameters: 4 d² + 3 d·ff a block at most, the embeddings (a vocabulary of at most
  // --bpe-vocab, or GPT-2's 50257) and positions; each float kept 4 times (weights, gradient,
  // AdamW's two moments).
  const double d = static_cast<double>(m.d_model), ff = static_cast<double>(m.ff);
  const double vocab = m.vocab > 0           ? static_cast<double>(m.vocab)
                       : o.tokenizer == "gpt2" ? 50257.0
                       : o.tokenizer == "bpe"  ? static_cast<double>(o.bpe_vocab)
                                               : 256.0;
  const double learned_positions = m.arch == Arch::GPT2 ? static_cast<double>(m.seq_len) : 0.0;  // rotary: none
  const double attention_width = m.head_dim > 0 ? std::max(d, static_cast<double>(m.heads * m.head_dim)) : d;
  examples::check_memory("the model", 4.0 * (2.0 * vocab * d + learned_positions * d +
                                             static_cast<double>(m.layers) * (4.0 * d * attention_width + 3.0 * d * ff)));
  const int64_t rank_batch = examples::per_rank_batch("--batch", o.batch);
  if (o.threads > 0) set_num_threads(o.threads);
  return rank_batch;
}

int64_t Tokenizer::vocab_size() const { return chars ? chars->size() : bpe->vocab_size(); }

std::vector<int64_t> Tokenizer::encode(std::string_view text) const {
  return chars ? chars->encode(text) : bpe->encode(text);
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  return chars ? chars->decode(ids) : bpe->decode(ids);
}

Tensor Tokenizer::to_tensor() const {
  std::vector<int64_t> bytes;
  if (chars) {
    bytes.assign(chars->chars.begin(), chars->chars.end());
  } else {
    const std::string file = bpe->serialize();
    bytes.assign(file.begin(), file.end());
    for (int64_t& b : bytes) b &= 0xff;  // char may be signed
  }
  return tensor(bytes, {static_cast<int64_t>(bytes.size())});
}

Tokenizer Tokenizer::from_tensor(const std::string& kind, const Tensor& saved) {
  CPPGRAD_CHECK(saved.dtype() == kInt64 && saved.dim() == 1, "--resume: data.tokenizer must be int64 [n], not {} {}",
                dtype_name(saved.dtype()), shape_str(saved.shape()));
  std::string bytes;
  for (int64_t b : saved.to_vector<int64_t>()) {
    CPPGRAD_CHECK(b >= 0 && b < 256, "--resume: data.tokenizer holds {}, not a byte", b);
    bytes.push_back(static_cast<char>(b));
  }
  Tokenizer t{kind, {}, {}};
  if (kind == "char") {
    t.chars = data::CharVocabulary::of(bytes);
    CPPGRAD_CHECK(t.chars->size() == static_cast<int64_t>(bytes.size()), "--resume: data.tokenizer names a character twice");
    t.chars->chars.assign(bytes.begin(), bytes.end());  // the saved order is the ids' order
    t.chars->ids.fill(-1);
    for (size_t i = 0; i < bytes.size(); ++i) t.chars->ids[static_cast<unsigned char>(bytes[i])] = static_cast<int64_t>(i);
  } else if (kind == "bpe" || kind == "gpt2") {
    t.bpe = data::BPETokenizer::parse(bytes, "the checkpoint's data.tokenizer");
  } else {
    throw Error(fmt::format("--resume: the checkpoint's tokenizer is '{}', not char, bpe or gpt2", excerpt(kind)));
  }
  return t;
}

Checkpoint read_checkpoint(const std::string& path) {
  auto file = nn::load_safetensors(path);
  examples::check_checkpoint_format(file.metadata);  // before any entry is read as this format's
  auto kind = file.metadata.find("tokenizer");
  CPPGRAD_CHECK(kind != file.metadata.end() && file.contains("data.tokenizer"),
                "--resume: '{}' holds no tokenizer: not a checkpoint written by gpt", excerpt(path));
  Tokenizer tokenizer = Tokenizer::from_tensor(kind->second, file.at("data.tokenizer"));
  return {std::move(file.tensors), std::move(file.metadata), std::move(tokenizer)};
}

Corpus read_corpus(const Options& o, const Checkpoint* resumed) {
  const std::string text = examples::read_data_file("--data", o.data, o.max_data_mb * 1'000'000);
  const auto n = static_cast<int64_t>(text.size());
  const int64_t split = n - n / 10;  // bytes [split, n) are held out
  const std::string_view train_text = std::string_view(text).substr(0, static_cast<size_t>(split));
  const std::string_view held_text = std::string_view(text).substr(static_cast<size_t>(split));
  Corpus c;
  if (resumed) {
    c.tokenizer = resumed->tokenizer;
  } else if (o.saved_tokenizer) {
    try {
      c.tokenizer = load_hf_tokenizer(*o.saved_tokenizer);
    } catch (const Error& e) {
      throw Error(fmt::format("--init-from: {}", e.what()));
    }
  } else if (o.tokenizer == "char") {
    c.tokenizer = {"char", data::CharVocabulary::of(text), {}};
  } else if (o.tokenizer == "gpt2") {
    const std::filesystem::path dir(o.gpt2_vocab);
    const auto files = gpt2_vocab_files(dir);
    try {
      CPPGRAD_CHECK(files, "'{}' holds neither encoder.json and vocab.bpe nor vocab.json and merges.txt",
                    excerpt(o.gpt2_vocab));
      c.tokenizer = {"gpt2", {}, data::BPETokenizer::load_gpt2(files->first, files->second)};
    } catch (const Error& e) {
      throw Error(fmt::format("--gpt2-vocab: {}", e.what()));
    }
  } else {
    c.tokenizer = {"bpe", {}, data::BPETokenizer::train(train_text, o.bpe_vocab)};
  }
  if (c.tokenizer.chars)  // a text of other characters than the checkpoint's (or model's) cannot be encoded
    for (unsigned char ch : text)
      CPPGRAD_CHECK(c.tokenizer.chars->contains(ch), "--data: '{}' has the byte {}, which the {}'s characters lack",
                    excerpt(o.data), int{ch}, resumed ? "checkpoint" : "model");
  c.train = c.tokenizer.encode(train_text);
  c.held_out = c.tokenizer.encode(held_text);
  c.bytes = n, c.held_out_bytes = n - split;
  const int64_t T = o.window;
  CPPGRAD_CHECK(static_cast<int64_t>(c.held_out.size()) > T, "--data: '{}' has {} held-out tokens (the last 10% of {} "
                "bytes); they must be more than --seq-len {}", excerpt(o.data), c.held_out.size(), n, T);
  CPPGRAD_CHECK(static_cast<int64_t>(c.train.size()) > T, "--data: '{}' has {} training tokens, not more than --seq-len {}",
                excerpt(o.data), c.train.size(), T);
  size_t longest = 0;
  for (const std::string& prompt : o.prompts) {
    if (c.tokenizer.chars)
      for (unsigned char ch : prompt)
        CPPGRAD_CHECK(c.tokenizer.chars->contains(ch), "--prompt: the character {} does not occur in the text",
                      std::isprint(ch) ? fmt::format("'{}'", static_cast<char>(ch)) : fmt::format("byte {}", int{ch}));
    c.prompts.push_back(c.tokenizer.encode(prompt));
    CPPGRAD_CHECK(o.prompts.size() == 1 || !c.prompts.back().empty(), "--prompt: an empty prompt among {}", o.prompts.size());
    longest = std::max(longest, c.prompts.back().size());
  }
  // One batch has no room to start again from half the context, as a single sample does.
  CPPGRAD_CHECK(o.prompts.size() < 2 || static_cast<int64_t>(longest) + o.sample.length <= o.model.seq_len,
                "--prompt given {} times: the longest prompt ({} tokens) and --sample-len {} do not fit in the "
                "model's {} positions", o.prompts.size(), longest, o.sample.length, o.model.seq_len);
  return c;
}

void check_vocabularies_agree(const Options& o, const Tokenizer& tokenizer) {
  const int64_t tokens = tokenizer.vocab_size(), rows = o.model.vocab;
  if (tokens == rows) return;
  const std::string model = !o.init_from.empty() ? fmt::format("the model of --init-from {}", excerpt(o.init_from))
                            : !o.resume.empty()  ? fmt::format("the model of --resume {}", excerpt(o.resume))
                                                 : std::string("the model");
  const char* option = !o.resume.empty() ? "--resume" : tokenizer.kind == "gpt2" ? "--gpt2-vocab" : "--tokenizer";
  throw Error(fmt::format("{}: the {} tokenizer has {} tokens and {} has a vocabulary of {}: a token id is a "
                          "row of its embedding, so the two must be the same size (give the model's own tokenizer{})",
                          option, tokenizer.kind, tokens, model, rows,
                          o.tokenizer == "bpe" && o.resume.empty() && rows >= 256 ? fmt::format(", or --bpe-vocab {}", rows)
                                                                                   : ""));
}

void choose_checkpoint_to_resume(Options& o, bool lead) {
  const bool latest = o.resume == "latest";
  o.resume = examples::resolve_resume(o.resume, o.checkpoints, lead);
  if (latest && !o.resume.empty() && !o.init_from.empty()) {
    if (lead) fmt::print("note: --resume latest continues {}; --init-from {} started the run\n", o.resume, o.init_from);
    o.init_from.clear();
  }
}

nn::Metadata checkpoint_metadata(const Options& o, const examples::KeptOptions& kept, double held_out_loss) {
  nn::Metadata metadata = {{"arch", o.arch},
                           {"tokenizer", o.tokenizer},
                           {"data", o.data},
                           {"decay_steps", std::to_string(o.decay_steps)},
                           {"warmup", std::to_string(o.warmup)},
                           {"held_out_loss", fmt::format("{:.4f}", held_out_loss)},
                           {"processes", std::to_string(distributed::world_size())}};
  for (const auto& s : kSizeOptions) metadata[s.key] = std::to_string(o.model.*s.field);
  metadata["window"] = std::to_string(o.window);
  metadata["vocab"] = std::to_string(o.model.vocab);
  metadata["norm_eps"] = fmt::format("{}", o.model.norm_eps);  // the shortest text that reads back the same double
  metadata["rope_theta"] = fmt::format("{}", o.model.rope_theta);
  if (o.model.head_dim > 0) metadata["head_dim"] = std::to_string(o.model.head_dim);
  kept.save_into(metadata);  // the options a resume takes from the file
  return metadata;
}

examples::KeptOptions kept_options(CLI::App& app, Options& o) {
  examples::KeptOptions kept(app, "gpt");
  o.decay_steps_given = app.count("--decay-steps") > 0;  // before a resume fills the option from the checkpoint
  kept.add("--lr", o.lr).add("--min-lr", o.min_lr).add("--warmup", o.warmup)
      .add("--weight-decay", o.weight_decay).add("--beta2", o.beta2).add("--clip", o.clip).add("--batch", o.batch)
      .add("--accum", o.accum).add("--dropout", o.model.dropout);
  kept.add_overridable("--seed", o.seed);
  // A run resumed past its schedule's end would train at --min-lr: a longer --decay-steps extends
  // the cosine instead (finish_options refuses a shorter one).
  kept.add_overridable("--decay-steps", o.decay_steps);
  // A resumed bf16 run stays bf16 unless told otherwise: the precision is the user's to change, as
  // autocast is not part of a PyTorch checkpoint either.
  kept.add_overridable("--dtype", o.dtype);
  return kept;
}

void write_token_files(const Options& o, const Corpus& corpus) {
  if (o.write_tokens.empty()) return;
  for (const auto& [part, ids] : {std::pair{"train", &corpus.train}, std::pair{"held_out", &corpus.held_out}})
    data::save_npy(fmt::format("{}.{}.npy", o.write_tokens, part), tensor(*ids, {static_cast<int64_t>(ids->size())}));
}

data::DataLoader training_loader(const Options& o, const Corpus& corpus, int64_t rank_batch, int world_size, int rank) {
  auto windows = std::make_shared<data::TextDataset>(corpus.train, o.window, /*stride=*/1);
  CPPGRAD_CHECK(windows->size() >= o.batch, "--data: '{}' gives {} training windows of --seq-len {}, fewer than one "
                "--batch of {}", excerpt(o.data), windows->size(), o.window, o.batch);
  auto sampler = std::make_shared<data::DistributedSampler>(windows->size(), world_size, rank, /*shuffle=*/true,
                                                            o.seed + 1, /*drop_last=*/true);
  return data::DataLoader(windows, data::DataLoaderOptions(rank_batch).drop_last(true).seed(o.seed),
                          data::stack_collate, sampler);
}

std::string schedule_line(const Options& o, int64_t step) {
  std::string line = fmt::format("schedule: warm-up {} steps to --lr {}, then cosine to --min-lr {} at step {} ({}); "
                                 "resumed at step {}", o.warmup, o.lr, o.min_lr, o.decay_steps,
                                 o.decay_steps_given ? "--decay-steps" : "the checkpoint's --decay-steps", step);
  if (o.steps > o.decay_steps)
    line += fmt::format("; steps {}-{} run at --min-lr (a larger --decay-steps extends the cosine)",
                        std::max(step, o.decay_steps) + 1, o.steps);
  return line;
}

void print_run_line(const Options& o, const Corpus& corpus, int64_t parameters, int64_t rank_batch, int world_size) {
  const ModelConfig& m = o.model;
  fmt::print("{}: {} bytes, {} tokens ({} tokenizer, vocabulary {}) · {} {} · {} parameters · {} · d_model {} · "
             "{}{} · ff {} · batch {} × {}{}{} · {}{}{}\n",
             o.data, corpus.bytes, corpus.train.size() + corpus.held_out.size(), o.tokenizer,
             corpus.tokenizer.vocab_size(), o.arch, o.size, parameters, examples::counted(m.layers, "layer"), m.d_model,
             examples::counted(m.heads, "head"),
             m.kv_heads != m.heads ? fmt::format(" ({} key/value)", m.kv_heads) : "", m.ff, o.batch, o.window,
             o.accum > 1 ? fmt::format(" × {} accumulated", o.accum) : "",
             world_size > 1 ? fmt::format(" ({} a process)", rank_batch) : "", examples::counted(get_num_threads(), "thread"),
             world_size > 1 ? fmt::format(" · {} processes", world_size) : "",
             o.dtype == "bf16" ? fmt::format(" · bf16 autocast ({})", autocast::kernel_name(autocast::kernel())) : "");
}

}  // namespace gpt
