// char_lm: a decoder-only Transformer that learns to continue a text, one character at a time.
//
//   char_lm                                  # the GPL text every Debian machine has, about a minute
//   char_lm --data book.txt --steps 5000 --plot loss.svg --prompt "Chapter 1"
//   char_lm --save run.safetensors           # ...later: char_lm --resume run.safetensors --steps 2000
//   char_lm --resume run.safetensors --steps 0 --prompt "You may"   # sample only
//   scripts/mpirun 2 char_lm --threads 1       # data-parallel: 2 processes, 8 of the 16 windows each
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <fmt/core.h>
#include <fstream>
#include <iterator>
#include <limits>

#include "common/checkpoint.h"
#include "common/data_parallel.h"
#include "common/progress.h"
#include "common/svg.h"
#include "cppgrad.h"

using namespace cppgrad;
using cppgrad::nn::NamedTensors;
namespace F = cppgrad::nn::functional;
namespace dist = cppgrad::distributed;

struct Options {
  std::string data = "/usr/share/common-licenses/GPL-3";
  int64_t steps = 1000, batch = 16, seq_len = 64;
  int64_t d_model = 128, heads = 4, layers = 2, ff = 512;
  // Without dropout the held-out loss falls a little faster at first (2.01 against 2.05 at 500
  // steps), then the model memorises the 31k training characters: 2.03 against 1.96 at 1000.
  double dropout = 0.1;
  double lr = 5e-3, weight_decay = 0.1, clip = 1.0;
  int64_t warmup = 50;
  uint64_t seed = 0;
  int threads = 0;  // 0: all cores
  std::string save, resume, plot;
  int64_t eval_every = 100;
  int64_t sample_len = 400, top_k = 0;
  double temperature = 0.8;
  std::string prompt;
};

// ---- the vocabulary: the distinct bytes of the text ------------------------------------------

struct Vocab {
  std::vector<unsigned char> chars;  // token id -> byte, in byte order
  std::array<int64_t, 256> id{};     // byte -> token id, -1 when the text lacks it

  explicit Vocab(const std::vector<unsigned char>& present) : chars(present) {
    id.fill(-1);
    for (size_t i = 0; i < chars.size(); ++i) id[chars[i]] = static_cast<int64_t>(i);
  }
  int64_t size() const { return static_cast<int64_t>(chars.size()); }
};

static Vocab vocab_of(const std::string& text) {
  std::array<bool, 256> seen{};
  for (unsigned char c : text) seen[c] = true;
  std::vector<unsigned char> present;
  for (int c = 0; c < 256; ++c)
    if (seen[c]) present.push_back(static_cast<unsigned char>(c));
  return Vocab(present);
}

// ---- the model ---------------------------------------------------------------------------------

// Token embedding plus sinusoidal positions, N Transformer layers with causal self-attention, a
// final LayerNorm, and scores over the vocabulary from the embedding matrix itself.
//
// An encoder layer under a causal mask is exactly a decoder-only block: a decoder layer would
// add a cross-attention over an encoder's output, which a language model does not have.
class CharLM : public nn::Module {
 public:
  CharLM(int64_t vocab, const Options& o) : d_model(o.d_model) {
    embed = register_module("embed", std::make_shared<nn::Embedding>(vocab, o.d_model));
    // N(0, 1/(4·d_model)): scaled by √d_model on the way in, a token vector's entries are half
    // the size of the positions'. Larger, the residual stream is mostly the current character,
    // and the tied output scores that character far above the rest: the first loss is near 8.5,
    // not ln(vocab), and training is slower (held-out 2.38 against 2.23 after 300 steps).
    nn::init::normal_(embed->weight, 0.0, 0.5 / std::sqrt(static_cast<double>(o.d_model)));
    positions = register_module("positions", std::make_shared<nn::PositionalEncoding>(o.d_model, o.dropout, o.seq_len));
    // Pre-norm (norm_first) with the encoder's final LayerNorm, as GPT-2 has it: the residual path
    // stays a plain sum from the embedding to the last norm. Post-norm, the paper's, does a little
    // better at the default settings (1.90 against 1.96 after 1000 steps) but not when they change:
    // after 300 steps, 2.34 against 2.22 with 4 layers, 2.79 against 2.26 at --lr 1e-2.
    // ReLU, not GELU: the two learn alike (2.22 and 2.23 after 300 steps), but GELU's erf,
    // forward and backward, makes a step 1.4 to 1.6 times as long.
    const auto layer =
        nn::TransformerLayerOptions(o.d_model, o.heads).dim_feedforward(o.ff).dropout(o.dropout).norm_first(true);
    auto stack = std::make_shared<nn::TransformerEncoder>(layer, o.layers, /*final_norm=*/true);
    transformer = register_module("transformer", stack);
  }

  // tokens (B, T) int64 -> logits (B, T, vocab): position t's scores for the character at t + 1.
  Tensor forward(const Tensor& tokens) {
    Tensor x = positions->forward(embed->forward(tokens) * std::sqrt(static_cast<double>(d_model)));  // (B, T, d)
    Tensor h = transformer->forward(x, {}, {}, /*is_causal=*/true);                                  // (B, T, d)
    // Tied output (Press & Wolf 2017): logits = h · Eᵀ with the embedding's own tensor, so its
    // gradient is the sum of both uses and the optimizer holds it once.
    return F::linear(h, embed->weight);  // (B, T, d) · (vocab, d)ᵀ -> (B, T, vocab)
  }
  std::string type_name() const override { return "CharLM"; }

  int64_t d_model;
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::PositionalEncoding> positions;
  std::shared_ptr<nn::TransformerEncoder> transformer;
};

// ---- data -------------------------------------------------------------------------------------

struct Batch {
  Tensor inputs, targets;  // (B, T) int64 each; targets are the inputs shifted by one
};

// The windows text[start, start + T] for each start: inputs are the first T, targets the last T.
static Batch windows(const std::vector<int64_t>& ids, const std::vector<int64_t>& starts, int64_t T) {
  std::vector<int64_t> x, y;
  for (int64_t s : starts) {
    x.insert(x.end(), ids.begin() + s, ids.begin() + s + T);
    y.insert(y.end(), ids.begin() + s + 1, ids.begin() + s + T + 1);
  }
  const int64_t B = static_cast<int64_t>(starts.size());
  return {tensor(x, {B, T}), tensor(y, {B, T})};
}

static double loss_on(CharLM& model, const Batch& b) {
  NoGradGuard no_grad;
  model.eval();
  Tensor logits = model.forward(b.inputs);
  model.train();
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), b.targets.reshape({-1})).item();
}

// ---- sampling ---------------------------------------------------------------------------------

// Draws the next token from the scores: the top_k highest kept (0: all), softmax at the given
// temperature; temperature 0 takes the highest.
static int64_t pick(std::vector<double> scores, double temperature, int64_t top_k, Generator& gen) {
  const auto n = static_cast<int64_t>(scores.size());
  if (temperature == 0.0) return std::max_element(scores.begin(), scores.end()) - scores.begin();
  if (top_k > 0 && top_k < n) {
    std::vector<double> sorted = scores;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[top_k - 1];
    for (double& s : scores)
      if (s < kth) s = -std::numeric_limits<double>::infinity();
  }
  const double top = *std::max_element(scores.begin(), scores.end());
  double total = 0;
  for (double& s : scores) total += (s = std::exp((s - top) / temperature));  // exp(-inf) = 0
  double u = gen.uniform() * total;
  for (int64_t i = 0; i < n; ++i)
    if ((u -= scores[i]) < 0) return i;
  return n - 1;  // only when rounding leaves u a hair above zero
}

// Extends `context` by --sample-len characters, each drawn given the last --seq-len before it
// (the longest context the model was trained on).
static std::string sample(CharLM& model, const Vocab& vocab, std::vector<int64_t> context, const Options& o,
                          Generator& gen) {
  NoGradGuard no_grad;
  model.eval();
  std::string out;
  for (int64_t i = 0; i < o.sample_len; ++i) {
    const auto T = std::min<int64_t>(static_cast<int64_t>(context.size()), o.seq_len);
    std::vector<int64_t> window(context.end() - T, context.end());
    Tensor logits = model.forward(tensor(window, {1, T}));                       // (1, T, vocab)
    auto scores = logits.select(0, 0).select(0, T - 1).to_vector<double>();      // the last position's
    int64_t next = pick(scores, o.temperature, o.top_k, gen);
    context.push_back(next);
    out += static_cast<char>(vocab.chars[next]);
  }
  return out;
}

static std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  CPPGRAD_CHECK(file.good(), "cannot open '{}'", path);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

int main(int argc, char** argv) {
  // Under mpirun every process runs all of main; rank 0 alone prints, evaluates and writes files.
  dist::ProcessGroup world(argc, argv);
  const bool lead = world.rank() == 0;
  Options o;
  CLI::App app{"Train a decoder-only Transformer on a text file, character by character, then sample from it."};
  app.add_option("--data", o.data, "the text to learn (its last 10% is held out)")->check(CLI::ExistingFile);
  app.add_option("--steps", o.steps, "training steps in all (a resumed run continues up to this; 0 with --resume: "
                                     "only sample)")->check(CLI::Range(0, 100'000'000));
  app.add_option("--batch", o.batch, "windows per step")->check(CLI::Range(1, 65536));
  app.add_option("--seq-len", o.seq_len, "characters per window, and the longest context")->check(CLI::Range(1, 4096));
  app.add_option("--d-model", o.d_model, "model width d_model")->check(CLI::Range(1, 65536));
  app.add_option("--heads", o.heads, "attention heads (must divide d_model)")->check(CLI::Range(1, 1024));
  app.add_option("--layers", o.layers, "Transformer layers")->check(CLI::Range(1, 1000));
  app.add_option("--ff", o.ff, "feed-forward width")->check(CLI::Range(1, 1 << 20));
  app.add_option("--dropout", o.dropout, "dropout probability")->check(CLI::Range(0.0, 0.99));
  app.add_option("--lr", o.lr, "peak learning rate of AdamW, reached after the warm-up, then decaying as 1/√step")
      ->check(CLI::Range(1e-6, 1.0));
  app.add_option("--warmup", o.warmup, "warm-up steps (the rate rises linearly to --lr)")
      ->check(CLI::Range(1, 100'000'000));
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decay of the weight matrices")->check(CLI::Range(0.0, 1.0));
  app.add_option("--clip", o.clip, "largest gradient norm (larger ones are scaled down to it)")
      ->check(CLI::Range(1e-6, 1e6));
  app.add_option("--seed", o.seed, "random seed (weights, windows, dropout, sampling)");
  app.add_option("--threads", o.threads, "threads for BLAS and cppgrad's loops (default: all cores)")
      ->check(CLI::Range(1, 256));
  app.add_option("--save", o.save, "write a checkpoint (model, optimizer, schedule, step, RNG, vocabulary) at the end");
  app.add_option("--resume", o.resume, "continue from a checkpoint written by --save")->check(CLI::ExistingFile);
  app.add_option("--eval-every", o.eval_every, "steps between held-out evaluations")
      ->check(CLI::Range(1, 100'000'000));
  app.add_option("--plot", o.plot, "write the train and held-out loss curves as SVG");
  app.add_option("--sample-len", o.sample_len, "characters to sample after training")
      ->check(CLI::Range(0, 10'000'000));
  app.add_option("--temperature", o.temperature, "sampling temperature (0: always the most likely character)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-k", o.top_k, "sample among the k most likely characters only (0: all)")
      ->check(CLI::Range(0, 256));
  app.add_option("--prompt", o.prompt, "text the sample continues (default: one character of the text, at random)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return lead ? app.exit(e) : 0;  // --help
    if (lead) fmt::print(stderr, "char_lm: {}\n", e.what());
    return 2;
  }

  try {
    if (o.threads > 0) set_num_threads(o.threads);
    const std::string text = read_file(o.data);
    const Vocab vocab = vocab_of(text);
    std::vector<int64_t> ids;
    for (unsigned char c : text) ids.push_back(vocab.id[c]);
    // The last 10% is held out: it measures how well the model continues text it has not seen.
    const auto n = static_cast<int64_t>(ids.size()), split = n - n / 10;
    CPPGRAD_CHECK(n - split > o.seq_len, "--data: '{}' has {} characters; its held-out 10% must be longer than "
                  "--seq-len {}", o.data, n, o.seq_len);
    std::vector<int64_t> prompt;
    for (unsigned char c : o.prompt) {
      CPPGRAD_CHECK(vocab.id[c] >= 0, "--prompt: the character {} does not occur in the text",
                    std::isprint(c) ? fmt::format("'{}'", static_cast<char>(c)) : fmt::format("byte {}", int{c}));
      prompt.push_back(vocab.id[c]);
    }

    CPPGRAD_CHECK(o.batch >= world.world_size(), "--batch {} is smaller than the {} processes", o.batch,
                  world.world_size());
    manual_seed(o.seed);  // weights and dropout
    Generator data_gen(o.seed + 1);  // the same on every rank: each draws the global batch
    auto model = std::make_shared<CharLM>(vocab.size(), o);
    // Rank 0's weights everywhere; the gradients averaged over the ranks in every backward().
    dist::DistributedDataParallel ddp(model);
    if (world.rank() > 0) manual_seed(o.seed + 7919 * world.rank());  // each rank its own dropout
    // Weight decay pulls the weight matrices (and the embedding) towards zero; decaying the
    // LayerNorm gains and the biases would only fight the normalisation.
    std::vector<Tensor> matrices, others;
    for (auto& [name, p] : model->named_parameters()) (p.dim() >= 2 ? matrices : others).push_back(p);
    optim::AdamW opt({{matrices, o.lr, o.weight_decay, "decay"}, {others, o.lr, 0.0, "no_decay"}},
                     optim::AdamOptions(o.lr).beta2(0.99));
    // The paper's schedule, scaled to peak at --lr after the warm-up, then decaying as 1/√step. It
    // has no end point, so a resumed run continues the same curve whatever --steps it is given.
    // (A cosine decay must know the last step in advance; in a 500-step run it ended 0.04 lower.)
    const double factor = o.lr * std::sqrt(static_cast<double>(o.d_model * o.warmup));
    optim::NoamLR schedule(opt, o.d_model, o.warmup, factor);

    // The sizes that shape the weights: a checkpoint resumes only into a model of the same ones.
    const std::vector<std::pair<std::string, int64_t>> sizes = {
        {"d_model", o.d_model}, {"heads", o.heads}, {"layers", o.layers}, {"ff", o.ff}};
    int64_t step = 0;
    std::vector<std::pair<double, double>> train_curve, eval_curve;
    if (!o.resume.empty()) {
      auto ckpt = nn::load_safetensors(o.resume);
      // A model only makes sense with the vocabulary it was trained on: token ids are its rows.
      CPPGRAD_CHECK(ckpt.contains("data.vocab") &&
                        ckpt.at("data.vocab").to_vector<int64_t>() ==
                            std::vector<int64_t>(vocab.chars.begin(), vocab.chars.end()),
                    "--resume: the checkpoint was trained on a text with other characters than '{}'", o.data);
      const std::string saved_world = ckpt.metadata.count("processes") ? ckpt.metadata.at("processes") : "1";
      CPPGRAD_CHECK(saved_world == std::to_string(world.world_size()),
                    "--resume: the checkpoint was written by {} processes and this run has {}; resume on as many",
                    saved_world, world.world_size());
      for (const auto& [name, value] : sizes) {
        auto saved = ckpt.metadata.find(name);
        CPPGRAD_CHECK(saved != ckpt.metadata.end() && saved->second == std::to_string(value),
                      "--resume: the checkpoint's model has {} {}, not {}", name,
                      saved != ckpt.metadata.end() ? saved->second : "?", value);
      }
      model->load_state_dict(examples::under_prefix("model.", ckpt.tensors));
      opt.load_state_dict(examples::under_prefix("optim.", ckpt.tensors));
      schedule.load_state_dict(examples::under_prefix("sched.", ckpt.tensors));
      if (world.world_size() > 1)
        examples::set_generator_state_of_rank(default_generator(), examples::under_prefix("rng.default.", ckpt.tensors));
      else
        examples::set_generator_state(default_generator(), examples::under_prefix("rng.default.", ckpt.tensors));
      examples::set_generator_state(data_gen, examples::under_prefix("rng.data.", ckpt.tensors));
      step = ckpt.at("train.step").item<int64_t>();
      auto curve = [&](const std::string& name, auto& out) {
        if (!ckpt.contains(name)) return;
        auto v = ckpt.at(name).to_vector<double>();
        for (size_t i = 0; i + 1 < v.size(); i += 2) out.emplace_back(v[i], v[i + 1]);
      };
      curve("train.loss_curve", train_curve);
      curve("train.eval_curve", eval_curve);
      if (lead) fmt::print("resumed from {} at step {}\n", o.resume, step);
    }

    // Held out: back-to-back windows over the last 10%, at most 64 of them, spread evenly.
    const int64_t fit = (n - split - 1) / o.seq_len, count = std::min<int64_t>(fit, 64);
    std::vector<int64_t> held_starts;
    for (int64_t k = 0; k < count; ++k) held_starts.push_back(split + k * fit / count * o.seq_len);
    const Batch held_out = windows(ids, held_starts, o.seq_len);

    if (lead)
      fmt::print("{}: {} characters, vocabulary {} · {} parameters · d_model {} · {} heads · {} layers · "
                 "batch {} × {} · {} threads{}\n",
                 o.data, n, vocab.size(), model->parameter_count(), o.d_model, o.heads, o.layers, o.batch, o.seq_len,
                 get_num_threads(), world.world_size() > 1 ? fmt::format(" × {} processes", world.world_size()) : "");

    examples::Progress progress(o.steps, step);
    // This rank's loss sums of the steps not yet reported: one all-reduce every report gives the
    // global batch's losses of all of them.
    std::vector<double> recent_sums;
    std::optional<double> last_eval;
    const std::vector<Tensor> params = model->parameters();
    model->train();
    while (step < o.steps) {
      std::vector<int64_t> starts;
      for (int64_t b = 0; b < o.batch; ++b) starts.push_back(data_gen.randint(0, split - o.seq_len));
      const Batch global = windows(ids, starts, o.seq_len);
      const Batch b{examples::my_rows(global.inputs), examples::my_rows(global.targets)};  // this rank's windows
      Tensor logits = model->forward(b.inputs);  // (B / ranks, T, vocab)
      // The mean over the global batch's characters: each rank sums its own and divides by the
      // global count (times the ranks, which the gradients' average divides out again).
      const double characters = static_cast<double>(global.targets.numel());
      Tensor loss_sum = F::cross_entropy(logits.reshape({-1, vocab.size()}), b.targets.reshape({-1}),
                                         {.reduction = F::Reduction::Sum});
      opt.zero_grad();
      (loss_sum * (world.world_size() / characters)).backward();  // averaged over the ranks on return
      optim::clip_grad_norm_(params, o.clip);
      opt.step();
      schedule.step();
      ++step;

      recent_sums.push_back(loss_sum.item() / characters);
      const bool eval_now = step % o.eval_every == 0 || step == o.steps;
      if (!eval_now && step % 10 != 0) continue;
      Tensor losses = tensor(recent_sums, {static_cast<int64_t>(recent_sums.size())});
      dist::all_reduce(losses);
      double recent_loss = 0;
      const auto count = static_cast<int64_t>(recent_sums.size());
      for (int64_t i = 0; i < count; ++i) {
        recent_loss += losses.at<double>({i});
        train_curve.emplace_back(static_cast<double>(step - count + 1 + i), losses.at<double>({i}));
      }
      recent_sums.clear();
      if (!lead) continue;
      std::optional<double> eval_loss;
      if (eval_now) {
        last_eval = eval_loss = loss_on(*model, held_out);
        eval_curve.emplace_back(static_cast<double>(step), *eval_loss);
      }
      progress.update(step, recent_loss / static_cast<double>(count), opt.lr(), count * global.targets.numel(),
                      eval_now, eval_loss);
    }
    // Each rank's dropout stream, for the checkpoint (a collective: every rank takes part).
    const NamedTensors dropout_rng = world.world_size() > 1 ? examples::gather_generator_states(default_generator())
                                                            : examples::generator_state(default_generator());
    if (!lead) return 0;
    progress.finish();
    const double train_seconds = progress.elapsed_seconds();
    const double held = last_eval ? *last_eval : loss_on(*model, held_out);
    fmt::print("held-out loss {:.4f} nats/char ({:.3f} bits/char) after {} steps, {} of training\n", held,
               held / std::log(2.0), step, examples::format_duration(train_seconds));

    if (!o.save.empty()) {
      NamedTensors state = examples::with_prefix("model.", model->state_dict());
      auto add = [&](const NamedTensors& more) { state.insert(state.end(), more.begin(), more.end()); };
      add(examples::with_prefix("optim.", opt.state_dict()));
      add(examples::with_prefix("sched.", schedule.state_dict()));
      add(examples::with_prefix("rng.default.", dropout_rng));
      add(examples::with_prefix("rng.data.", examples::generator_state(data_gen)));
      auto flatten = [](const std::vector<std::pair<double, double>>& curve) {
        std::vector<double> v;
        for (auto [x, y] : curve) v.insert(v.end(), {x, y});
        return tensor(v, {static_cast<int64_t>(v.size())});
      };
      add({{"data.vocab", tensor(std::vector<int64_t>(vocab.chars.begin(), vocab.chars.end()), {vocab.size()})},
           {"train.step", scalar_tensor(static_cast<double>(step), kInt64)},
           {"train.loss_curve", flatten(train_curve)},
           {"train.eval_curve", flatten(eval_curve)}});
      nn::Metadata metadata = {{"data", o.data},
                               {"held_out_loss", fmt::format("{:.4f}", held)},
                               {"processes", std::to_string(world.world_size())}};
      for (const auto& [name, value] : sizes) metadata[name] = std::to_string(value);
      nn::save_safetensors(o.save, state, metadata);
      fmt::print("checkpoint written to {}\n", o.save);
    }
    if (!o.plot.empty()) {
      examples::write_line_plot(o.plot, "character-level language model: cross-entropy (nats/char)", "step", "loss",
                                {{"train", train_curve, "#1f77b4"}, {"held-out", eval_curve, "#d62728"}});
      fmt::print("loss curve written to {}\n", o.plot);
    }

    // Its own generator, so that sampling draws nothing from the streams a checkpoint resumes.
    Generator sample_gen(o.seed + 2);
    if (prompt.empty()) prompt.push_back(ids[static_cast<size_t>(sample_gen.randint(0, split))]);
    std::string prefix;
    for (int64_t t : prompt) prefix += static_cast<char>(vocab.chars[t]);
    if (o.sample_len > 0) {
      fmt::print("\nsample (temperature {}, top-k {}):\n", o.temperature, o.top_k);
      fmt::print("{}{}\n", prefix, sample(*model, vocab, prompt, o, sample_gen));
    }
    return 0;
  } catch (const Error& e) {
    if (world.world_size() > 1) {
      // The other ranks may be waiting for this one in a collective: end them all.
      fmt::print(stderr, "char_lm: rank {}: {}\n", world.rank(), e.what());
      dist::abort(2);
    }
    fmt::print(stderr, "char_lm: {}\n", e.what());
    return 2;
  }
}
