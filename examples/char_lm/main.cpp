// char_lm: a decoder-only Transformer that learns to continue a text, one character at a time.
//
//   char_lm                                  # the GPL text every Debian machine has, about half a minute
//   char_lm --data book.txt --steps 5000 --plot loss.svg --prompt "Chapter 1"
//   char_lm --save run.safetensors           # ...later: char_lm --resume run.safetensors --steps 2000
//   char_lm --resume run.safetensors --steps 0 --prompt "You may"   # sample only
//   scripts/mpirun 2 build/release/examples/char_lm --threads 1        # data-parallel, 8 windows a rank
//
// The training windows are a data::TextDataset (every start in the first 90% of the text), read
// in a fresh random order each epoch by a data::DataLoader; under mpirun each process reads its
// share of every global batch (DistributedSampler) and DistributedDataParallel averages the
// gradients. Rank 0 alone evaluates, prints, writes files and samples.
//
// Exit codes: 0 done; 2 refused options or input (a checkpoint that does not fit, a path that
// cannot be written, a --data that is not a text file of a sensible size), with one line on
// stderr; 3 out of memory.
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
#include "common/cli.h"
#include "common/curves.h"
#include "common/data_parallel.h"
#include "common/progress.h"
#include "cppgrad.h"

using namespace cppgrad;
using cppgrad::nn::NamedTensors;
namespace F = cppgrad::nn::functional;

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
  // Every character becomes an int64 token id, so a file takes nine times its size in memory.
  int64_t max_data_mb = 100;
};

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

  // The same for the newest tokens (B, T_new) of a sequence whose `cache.size()` earlier ones
  // are cached (one KVCache per layer): their logits (B, T_new, vocab), each step O(length).
  Tensor forward_step(const Tensor& tokens, std::vector<nn::KVCache>& cache) {
    const int64_t start = cache.empty() ? 0 : cache.front().length();
    Tensor x = positions->forward(embed->forward(tokens) * std::sqrt(static_cast<double>(d_model)), start);
    return F::linear(transformer->forward_step(x, cache), embed->weight);
  }
  std::string type_name() const override { return "CharLM"; }

  int64_t d_model;
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::PositionalEncoding> positions;
  std::shared_ptr<nn::TransformerEncoder> transformer;
};

// ---- data -------------------------------------------------------------------------------------

// A batch of windows: "input" (B, T) and "target" (B, T), the input shifted by one character.
static double loss_on(CharLM& model, const data::Batch& b) {
  NoGradGuard no_grad;
  model.eval();
  Tensor logits = model.forward(b["input"]);
  model.train();
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), b["target"].reshape({-1})).item();
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

// Extends `context` by --sample-len characters. Each step feeds the newest character only, the
// earlier ones' keys and values cached per layer (cached decoding: O(length) a character, not
// O(length²)). The model knows --seq-len positions: when the cache is full, it starts again from
// the last half of the context (one pass over those), so every character is drawn given between
// seq_len / 2 and seq_len characters before it.
static std::string sample(CharLM& model, const data::CharVocabulary& vocab, std::vector<int64_t> context,
                          const Options& o, Generator& gen) {
  NoGradGuard no_grad;
  model.eval();
  std::string out;
  std::vector<nn::KVCache> cache;
  const int64_t keep = std::max<int64_t>(1, o.seq_len / 2);
  std::vector<int64_t> feed = context;  // what the model has not read yet
  for (int64_t i = 0; i < o.sample_len; ++i) {
    const int64_t cached = cache.empty() ? 0 : cache.front().length();
    if (cached + static_cast<int64_t>(feed.size()) > o.seq_len) {
      cache.clear();
      const int64_t from = static_cast<int64_t>(context.size()) - std::min<int64_t>(keep, static_cast<int64_t>(context.size()));
      feed.assign(context.begin() + from, context.end());
    }
    const auto T = static_cast<int64_t>(feed.size());
    Tensor logits = model.forward_step(tensor(feed, {1, T}), cache);           // (1, T, vocab)
    auto scores = logits.select(0, 0).select(0, T - 1).to_vector<double>();   // the last position's
    const int64_t next = pick(scores, o.temperature, o.top_k, gen);
    context.push_back(next);
    feed = {next};
    out += static_cast<char>(vocab.chars[static_cast<size_t>(next)]);
  }
  return out;
}

int main(int argc, char** argv) {
  distributed::ProcessGroup world(argc, argv);  // a world of one without mpirun
  const bool lead = world.rank() == 0;          // rank 0 prints, evaluates, writes files and samples
  Options o;
  CLI::App app{"Train a decoder-only Transformer on a text file, character by character, then sample from it."};
  app.add_option("--data", o.data, "the text to learn (its last 10% is held out)")->check(CLI::ExistingFile);
  app.add_option("--max-data-mb", o.max_data_mb, "largest --data file read, in MB (each byte takes 9 in memory)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--steps", o.steps, "training steps in all (a resumed run continues up to this; 0 with --resume: "
                                     "only sample)")->check(CLI::Range(0, 100'000'000));
  app.add_option("--batch", o.batch, "windows per step, over all processes")->check(CLI::Range(1, 65536));
  app.add_option("--seq-len", o.seq_len, "characters per window, and the longest context")->check(CLI::Range(1, 4096));
  app.add_option("--d-model", o.d_model, "model width d_model")->check(CLI::Range(1, 65536));
  app.add_option("--heads", o.heads, "attention heads (must divide d_model)")->check(CLI::Range(1, 1024));
  app.add_option("--layers", o.layers, "Transformer layers")->check(CLI::Range(1, 1000));
  app.add_option("--ff", o.ff, "feed-forward width")->check(CLI::Range(1, 1 << 20));
  app.add_option("--dropout", o.dropout, "dropout probability")->check(examples::number_in(0.0, 0.99));
  app.add_option("--lr", o.lr, "peak learning rate of AdamW, reached after the warm-up, then decaying as 1/√step")
      ->check(examples::number_in(1e-6, 1.0));
  app.add_option("--warmup", o.warmup, "warm-up steps (the rate rises linearly to --lr)")
      ->check(CLI::Range(1, 100'000'000));
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decay of the weight matrices")->check(examples::number_in(0.0, 1.0));
  app.add_option("--clip", o.clip, "largest gradient norm (larger ones are scaled down to it)")
      ->check(examples::number_in(1e-6, 1e6));
  app.add_option("--seed", o.seed, "random seed (weights, windows, dropout, sampling)")->check(examples::digits_only());
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
      ->check(examples::number_in(0.0, 100.0));
  app.add_option("--top-k", o.top_k, "sample among the k most likely characters only (0: all)")
      ->check(CLI::Range(0, 256));
  app.add_option("--prompt", o.prompt, "text the sample continues (default: one character of the text, at random)");
  if (auto code = examples::parse_command_line(app, argc, argv, "char_lm")) return *code;
  const std::string who = examples::name_in_job("char_lm");

  try {
    // Everything that can be refused is refused before training starts.
    if (!o.save.empty()) examples::check_writable("--save", o.save);
    if (!o.plot.empty()) examples::check_writable("--plot", o.plot);
    {
      // Parameters: 4 d² + 2 d·ff per layer and the embedding (at most 256 rows); each float is kept
      // 4 times (weights, gradient, AdamW's two moments).
      const double d = static_cast<double>(o.d_model), ff = static_cast<double>(o.ff);
      examples::check_memory("the model", 4.0 * (256.0 * d + static_cast<double>(o.layers) * (4.0 * d * d + 2.0 * d * ff)));
    }
    const int64_t rank_batch = examples::per_rank_batch("--batch", o.batch);
    if (o.threads > 0) set_num_threads(o.threads);
    const std::string text = examples::read_data_file("--data", o.data, o.max_data_mb * 1'000'000);
    const auto vocab = data::CharVocabulary::of(text);
    const std::vector<int64_t> ids = vocab.encode(text);
    // The last 10% is held out: it measures how well the model continues text it has not seen.
    const auto n = static_cast<int64_t>(ids.size()), split = n - n / 10;
    CPPGRAD_CHECK(n - split > o.seq_len, "--data: '{}' has {} characters; its held-out 10% must be longer than "
                  "--seq-len {}", o.data, n, o.seq_len);
    std::vector<int64_t> prompt;
    for (unsigned char c : o.prompt) {
      CPPGRAD_CHECK(vocab.contains(c), "--prompt: the character {} does not occur in the text",
                    std::isprint(c) ? fmt::format("'{}'", static_cast<char>(c)) : fmt::format("byte {}", int{c}));
      prompt.push_back(vocab.ids[c]);
    }

    manual_seed(o.seed + static_cast<uint64_t>(world.rank()));  // weights (rank 0's are broadcast) and dropout
    auto model = std::make_shared<CharLM>(vocab.size(), o);
    distributed::DistributedDataParallel ddp(model);  // rank 0's weights everywhere; hooks nothing in a world of one
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
    // Training windows: every start in the first 90%, each epoch in a fresh order from the seed;
    // each rank its share of every epoch. No prefetch, as in seq2seq: a batch takes microseconds
    // to make, and a second thread making it competes with the step's own.
    auto train_set = std::make_shared<data::TextDataset>(std::vector<int64_t>(ids.begin(), ids.begin() + split),
                                                         o.seq_len, /*stride=*/1);
    CPPGRAD_CHECK(train_set->size() >= o.batch, "--data: '{}' gives {} training windows of --seq-len {}, fewer than one "
                  "--batch of {}", excerpt(o.data), train_set->size(), o.seq_len, o.batch);
    auto sampler = std::make_shared<data::DistributedSampler>(train_set->size(), world.world_size(), world.rank(),
                                                              /*shuffle=*/true, o.seed + 1, /*drop_last=*/true);
    data::DataLoader loader(train_set, data::DataLoaderOptions(rank_batch).drop_last(true).seed(o.seed),
                            data::stack_collate, sampler);
    examples::Run run{*model, opt, schedule, loader};
    examples::TrainingLog saved;
    const Tensor vocab_tensor = tensor(std::vector<int64_t>(vocab.chars.begin(), vocab.chars.end()), {vocab.size()});
    if (!o.resume.empty()) {
      auto ckpt = nn::load_safetensors(o.resume);
      // A model only makes sense with the vocabulary it was trained on: token ids are its rows.
      CPPGRAD_CHECK(ckpt.contains("data.vocab") && ckpt.at("data.vocab").dtype() == kInt64 &&
                        ckpt.at("data.vocab").shape() == vocab_tensor.shape() &&
                        ckpt.at("data.vocab").to_vector<int64_t>() == vocab_tensor.to_vector<int64_t>(),
                    "--resume: the checkpoint was trained on a text with other characters than '{}'", excerpt(o.data));
      for (const auto& [name, value] : sizes) {
        auto saved_size = ckpt.metadata.find(name);
        CPPGRAD_CHECK(saved_size != ckpt.metadata.end() && saved_size->second == std::to_string(value),
                      "--resume: the checkpoint's model has {} {}, not {}", name,
                      saved_size != ckpt.metadata.end() ? excerpt(saved_size->second) : "?", value);
      }
      saved = examples::resume_run(o.resume, ckpt.tensors, run, {"data.vocab"});
      if (lead) fmt::print("resumed from {} at step {}\n", o.resume, saved.step);
    }
    int64_t step = saved.step;
    std::vector<std::pair<double, double>>& train_curve = saved.train_curve;
    std::vector<std::pair<double, double>>& eval_curve = saved.eval_curve;

    // Held out: back-to-back windows over the last 10%, at most 64 of them, spread evenly.
    const data::TextDataset held_out_windows(std::vector<int64_t>(ids.begin() + split, ids.end()), o.seq_len);
    const int64_t count = std::min<int64_t>(held_out_windows.size(), 64);
    std::vector<data::Example> held_out_examples;
    for (int64_t k = 0; k < count; ++k) held_out_examples.push_back(held_out_windows.get(k * held_out_windows.size() / count));
    const data::Batch held_out = data::stack_collate(held_out_examples);

    if (lead)
      fmt::print("{}: {} characters, vocabulary {} · {} parameters · d_model {} · {} heads · {} layers · "
                 "batch {} × {}{} · {} threads{}\n",
                 o.data, n, vocab.size(), model->parameter_count(), o.d_model, o.heads, o.layers, o.batch, o.seq_len,
                 world.world_size() > 1 ? fmt::format(" ({} a process)", rank_batch) : "", get_num_threads(),
                 world.world_size() > 1 ? fmt::format(" · {} processes", world.world_size()) : "");

    examples::Progress progress(o.steps, step);
    std::vector<double> recent_losses;  // this rank's, since the last report
    std::optional<double> last_eval;
    const std::vector<Tensor> params = model->parameters();
    model->train();
    while (step < o.steps) {
      const data::Batch b = loader.next();
      Tensor logits = model->forward(b["input"]);  // (B, T, vocab)
      Tensor loss = F::cross_entropy(logits.reshape({-1, vocab.size()}), b["target"].reshape({-1}));
      opt.zero_grad();
      loss.backward();  // under mpirun, returns with the gradients averaged over the ranks
      optim::clip_grad_norm_(params, o.clip);
      opt.step();
      schedule.step();
      ++step;

      recent_losses.push_back(loss.item());
      const bool eval_now = step % o.eval_every == 0 || step == o.steps;
      if (eval_now || step % 10 == 0) {
        // The global batch's loss of each step since the last report (a collective): every rank
        // has as many characters, so it is the mean of the ranks' means.
        const std::vector<double> losses = examples::sum_over_ranks(recent_losses);
        double mean = 0;
        for (size_t i = 0; i < losses.size(); ++i) {
          const double global = losses[i] / world.world_size();
          train_curve.emplace_back(static_cast<double>(step - static_cast<int64_t>(losses.size() - 1 - i)), global);
          mean += global / static_cast<double>(losses.size());
        }
        std::optional<double> eval_loss;
        if (eval_now && lead) {
          last_eval = eval_loss = loss_on(*model, held_out);
          eval_curve.emplace_back(static_cast<double>(step), *eval_loss);
        }
        if (lead)
          progress.update(step, mean, opt.lr(), static_cast<int64_t>(losses.size()) * o.batch * o.seq_len, eval_now,
                          eval_loss);
        recent_losses.clear();
      }
    }
    if (lead) progress.finish();
    const double train_seconds = progress.elapsed_seconds();
    double held = 0;
    if (lead) {
      held = last_eval ? *last_eval : loss_on(*model, held_out);
      fmt::print("held-out loss {:.4f} nats/char ({:.3f} bits/char) after {} steps, {} of training\n", held,
                 held / std::log(2.0), step, examples::format_duration(train_seconds));
    }

    if (!o.save.empty()) {
      saved.step = step;
      NamedTensors state = examples::save_run(run, saved);
      state.emplace_back("data.vocab", vocab_tensor);
      const NamedTensors streams = examples::gather_dropout_streams();  // a collective: every rank
      state.insert(state.end(), streams.begin(), streams.end());
      if (lead) {
        nn::Metadata metadata = {{"data", o.data},
                                 {"held_out_loss", fmt::format("{:.4f}", held)},
                                 {"processes", std::to_string(world.world_size())}};
        for (const auto& [name, value] : sizes) metadata[name] = std::to_string(value);
        nn::save_safetensors(o.save, state, metadata);
        fmt::print("checkpoint written to {}\n", o.save);
      }
    }
    if (!lead) return 0;
    if (!o.plot.empty()) {
      const std::string name = o.data.substr(o.data.find_last_of('/') + 1);
      examples::TrainingCurves figure{
          fmt::format("char_lm on {}: training curves", name),
          {fmt::format("{} characters, {} distinct, the last tenth held out · d_model {} · {} heads · {} layers · "
                       "batch {} × {}", n, vocab.size(), o.d_model, o.heads, o.layers, o.batch, o.seq_len),
           fmt::format("held-out loss after {} steps: {:.3f} nats = {:.3f} bits per character", step, held,
                       held / std::log(2.0))},
          "training step",
          {}};
      const int window = examples::smoothing_window(train_curve.size());
      examples::Panel loss;
      loss.title = "cross-entropy loss", loss.y_label = "nats per character";
      loss.right_scale = 1 / std::log(2.0), loss.right_label = "bits per character";
      const std::string train_name = o.dropout > 0 ? fmt::format("train, dropout {}", o.dropout) : "train";
      loss.curves = {{train_name + ", each step", train_curve, "#1f77b4", examples::CurveStyle::Faint},
                     {fmt::format("{}, mean of {} steps", train_name, window), examples::running_mean(train_curve, window),
                      "#1f77b4", examples::CurveStyle::Line},
                     {fmt::format("held-out ({} windows)", held_out["input"].size(0)), eval_curve, "#d62728",
                      examples::CurveStyle::Dots}};
      figure.panels = {loss};
      examples::draw_training_curves(figure).write(o.plot);
      fmt::print("training curves written to {}\n", o.plot);
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
    fmt::print(stderr, "{}: {}\n", who, e.what());
    return examples::exit_job(examples::kExitRefused);
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "{}: out of memory (try a smaller --batch, --d-model, --ff, --layers or --data)\n", who);
    return examples::exit_job(examples::kExitOutOfMemory);
  }
}
