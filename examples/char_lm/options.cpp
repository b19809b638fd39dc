#include "char_lm/options.h"

#include <cctype>

#include "common/checkpoints.h"
#include "common/cli_app.h"
#include "common/data_parallel.h"
#include "common/observe.h"

using namespace cppgrad;

namespace char_lm {

namespace {

// The sizes that shape the weights: a checkpoint resumes only into a model of the same ones.
std::vector<std::pair<std::string, int64_t>> sizes(const Options& o) {
  return {{"d_model", o.model.d_model}, {"heads", o.model.heads}, {"layers", o.model.layers}, {"ff", o.model.ff}};
}

}  // namespace

void add_options(CLI::App& app, Options& o) {
  app.add_option("--data", o.data, "the text to learn, plain or .gz (its last 10% is held out)")->check(CLI::ExistingFile);
  app.add_option("--max-data-mb", o.max_data_mb, "largest --data read, in MB uncompressed (each byte takes 9 in memory)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--steps", o.steps, "training steps in all (a resumed run continues up to this); 0: train nothing, "
                                     "print the run's figures and sample the model as it starts (--resume's or "
                                     "untrained)")
      ->check(CLI::Range(0, 100'000'000));
  app.add_option("--batch", o.batch, "windows per step, over all processes")->check(CLI::Range(1, 65536));
  app.add_option("--seq-len", o.model.seq_len, "characters per window, and the longest context")->check(CLI::Range(1, 4096));
  examples::add_size_options(app, o.model, "Transformer layers");
  app.add_option("--lr", o.lr, "peak learning rate of AdamW, reached after the warm-up, then decaying as 1/√step")
      ->check(examples::number_in(1e-6, 1.0));
  app.add_option("--warmup", o.warmup, "warm-up steps (the rate rises linearly to --lr)")
      ->check(CLI::Range(1, 100'000'000));
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decay of the weight matrices")->check(examples::number_in(0.0, 1.0));
  app.add_option("--clip", o.clip, "largest gradient norm (larger ones are scaled down to it)")
      ->check(examples::number_in(1e-6, 1e6));
  app.add_flag("--zero", o.zero, "each process keeps and updates 1/N of AdamW's state (ZeRO-1, "
               "distributed::ZeroRedundancyOptimizer); the same steps, and checkpoints that load either way");
  app.add_option("--seed", o.seed, "random seed (weights, windows, dropout, sampling)")->check(examples::digits_only());
  app.add_option("--threads", o.threads, "threads for BLAS and cppgrad's loops (default: all cores)")
      ->check(CLI::Range(1, 256));
  app.add_option("--save", o.save, "write a checkpoint (model, optimizer, schedule, step, RNG, vocabulary) at the end")
      ->check(examples::names_a_path());
  app.add_option("--resume", o.resume, "continue from a checkpoint written by --save, or by --save-every: latest (the newest in --save-dir; none yet: a new run) or a directory (its newest)")
      ->check(examples::resume_target());
  examples::add_checkpoint_options(app, o.checkpoints);
  app.add_option("--eval-every", o.eval_every, "steps between held-out evaluations")
      ->check(CLI::Range(1, 100'000'000));
  app.add_option("--plot", o.plot, "write the train and held-out loss curves as SVG")->check(examples::names_a_path());
  examples::add_trace_option(app, o.trace);
  examples::add_log_dir_option(app, o.log_dir);
  app.add_option("--sample-len", o.sample.length, "characters to sample after training")
      ->check(CLI::Range(0, 10'000'000));
  app.add_option("--temperature", o.sample.temperature, "sampling temperature (0: always the most likely character)")
      ->check(examples::number_in(0.0, 100.0));
  app.add_option("--top-k", o.sample.top_k, "sample among the k most likely characters only (0: all)")
      ->check(CLI::Range(0, 256));
  app.add_option("--top-p", o.sample.top_p, "sample among the nucleus only: the fewest most likely characters whose "
                                            "probabilities reach p (1: all)")
      ->check(examples::number_in(0.0, 1.0));
  app.add_option("--prompt", o.prompt, "text the sample continues (default: one character of the text, at random)");
}

int64_t check_options(const Options& o) {
  if (!o.save.empty()) examples::check_writable("--save", o.save);
  if (!o.plot.empty()) examples::check_writable("--plot", o.plot);
  // Parameters: 4 d² + 2 d·ff per layer and the embedding (at most 256 rows); each float is kept
  // 4 times (weights, gradient, AdamW's two moments).
  const double d = static_cast<double>(o.model.d_model), ff = static_cast<double>(o.model.ff);
  examples::check_memory("the model", 4.0 * (256.0 * d + static_cast<double>(o.model.layers) * (4.0 * d * d + 2.0 * d * ff)));
  examples::check_sizes(o.model);
  const int64_t rank_batch = examples::per_rank_batch("--batch", o.batch);
  if (o.threads > 0) set_num_threads(o.threads);
  return rank_batch;
}

Tensor Text::vocab_tensor() const {
  return tensor(std::vector<int64_t>(vocab.chars.begin(), vocab.chars.end()), {vocab.size()});
}

Text read_text(const Options& o) {
  const std::string text = examples::read_data_file("--data", o.data, o.max_data_mb * 1'000'000);
  Text t{data::CharVocabulary::of(text), {}, 0, {}};
  t.ids = t.vocab.encode(text);
  const auto n = static_cast<int64_t>(t.ids.size());
  t.split = n - n / 10;
  CPPGRAD_CHECK(n - t.split > o.model.seq_len, "--data: '{}' has {} characters; its held-out 10% must be longer than "
                "--seq-len {}", o.data, n, o.model.seq_len);
  for (unsigned char c : o.prompt) {
    CPPGRAD_CHECK(t.vocab.contains(c), "--prompt: the character {} does not occur in the text",
                  std::isprint(c) ? fmt::format("'{}'", static_cast<char>(c)) : fmt::format("byte {}", int{c}));
    t.prompt.push_back(t.vocab.ids[c]);
  }
  return t;
}

nn::NamedTensors checkpoint_of_this_model(nn::SafetensorsContents ckpt, const Options& o, const Text& text) {
  // A model only makes sense with the vocabulary it was trained on: token ids are its rows.
  const Tensor vocab = text.vocab_tensor();
  CPPGRAD_CHECK(ckpt.contains("data.vocab") && ckpt.at("data.vocab").dtype() == kInt64 &&
                    ckpt.at("data.vocab").shape() == vocab.shape() &&
                    ckpt.at("data.vocab").to_vector<int64_t>() == vocab.to_vector<int64_t>(),
                "--resume: the checkpoint was trained on a text with other characters than '{}'", excerpt(o.data));
  for (const auto& [name, value] : sizes(o)) {
    auto saved_size = ckpt.metadata.find(name);
    CPPGRAD_CHECK(saved_size != ckpt.metadata.end() && saved_size->second == std::to_string(value),
                  "--resume: the checkpoint's model has {} {}, not {}", name,
                  saved_size != ckpt.metadata.end() ? excerpt(saved_size->second) : "?", value);
  }
  return std::move(ckpt.tensors);
}

nn::Metadata checkpoint_metadata(const Options& o, const examples::KeptOptions& kept, double held_out_loss) {
  nn::Metadata metadata = {{"data", o.data},
                           {"held_out_loss", fmt::format("{:.4f}", held_out_loss)},
                           {"processes", std::to_string(distributed::world_size())}};
  for (const auto& [name, value] : sizes(o)) metadata[name] = std::to_string(value);
  kept.save_into(metadata);  // the options a resume takes from the file
  return metadata;
}


examples::KeptOptions kept_options(CLI::App& app, Options& o) {
  examples::KeptOptions kept(app, "char_lm");
  kept.add("--d-model", o.model.d_model).add("--heads", o.model.heads).add("--layers", o.model.layers)
      .add("--ff", o.model.ff).add("--dropout", o.model.dropout).add("--seq-len", o.model.seq_len).add("--batch", o.batch)
      .add("--lr", o.lr).add("--warmup", o.warmup).add("--weight-decay", o.weight_decay).add("--clip", o.clip);
  kept.add_overridable("--seed", o.seed);
  return kept;
}

data::DataLoader training_loader(const Options& o, const Text& text, int64_t rank_batch, int world_size, int rank) {
  auto windows = std::make_shared<data::TextDataset>(
      std::vector<int64_t>(text.ids.begin(), text.ids.begin() + text.split), o.model.seq_len, /*stride=*/1);
  CPPGRAD_CHECK(windows->size() >= o.batch, "--data: '{}' gives {} training windows of --seq-len {}, fewer than one "
                "--batch of {}", excerpt(o.data), windows->size(), o.model.seq_len, o.batch);
  auto sampler = std::make_shared<data::DistributedSampler>(windows->size(), world_size, rank, /*shuffle=*/true,
                                                            o.seed + 1, /*drop_last=*/true);
  return data::DataLoader(windows, data::DataLoaderOptions(rank_batch).drop_last(true).seed(o.seed),
                          data::stack_collate, sampler);
}

void print_run_line(const Options& o, const Text& text, int64_t parameters, int64_t rank_batch, int world_size) {
  fmt::print("{}: {} characters, vocabulary {} · {} parameters · d_model {} · {} · {} · batch {} × {}{} · {}{}\n",
             o.data, text.ids.size(), text.vocab.size(), parameters, o.model.d_model,
             examples::counted(o.model.heads, "head"), examples::counted(o.model.layers, "layer"), o.batch,
             o.model.seq_len, world_size > 1 ? fmt::format(" ({} a process)", rank_batch) : "",
             examples::counted(get_num_threads(), "thread"), world_size > 1 ? fmt::format(" · {} processes", world_size) : "");
}
}  // namespace char_lm
