#include "gpt/evaluate.h"

#include <cmath>

#include "nn/onnx/export.h"
#include "tools/progress.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace gpt {

double loss_on(LanguageModel& model, const data::Batch& b) {
  NoGradGuard no_grad;
  model.eval();
  const Tensor& input = b["input"];
  const Tensor& target = b["target"];
  const int64_t n = input.size(0);
  double total = 0;
  for (int64_t from = 0; from < n; from += 8) {  // a few windows at a time: the logits of all at once can be large
    const int64_t to = std::min(n, from + 8);
    Tensor logits = model.forward(input.slice(0, from, to));  // (b, T, vocab)
    total += F::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.slice(0, from, to).reshape({-1})).item() *
             static_cast<double>(to - from);
  }
  model.train();
  return total / static_cast<double>(n);
}

double report_held_out(double held_out_loss, const Corpus& corpus, int64_t step, int64_t steps_taken, double seconds) {
  // The held-out windows' tokens cover about this many bytes each.
  const double bytes_per_token = static_cast<double>(corpus.held_out_bytes) / static_cast<double>(corpus.held_out.size());
  fmt::print("held-out loss {:.4f} nats/token ({:.3f} bits/byte) after {} steps, {} of training{}\n", held_out_loss,
             held_out_loss / std::log(2.0) / bytes_per_token, step, format_duration(seconds),
             steps_taken > 0 ? fmt::format(" ({:.0f} ms a step)", 1e3 * seconds / static_cast<double>(steps_taken)) : "");
  return held_out_loss;
}

void print_sample(LanguageModel& model, const Corpus& corpus, const Options& o) {
  Generator gen(o.seed + 2);
  std::vector<std::vector<int64_t>> prompts = corpus.prompts;
  if (prompts.empty() || prompts[0].empty())
    prompts = {{corpus.held_out[static_cast<size_t>(gen.randint(0, static_cast<int64_t>(corpus.held_out.size())))]}};
  if (o.sample.length <= 0) return;
  fmt::print("\nsample{} (temperature {}, top-k {}, top-p {}, seed {}):\n", prompts.size() > 1 ? "s" : "",
             o.sample.temperature, o.sample.top_k, o.sample.top_p, o.seed);
  SampleOptions options = o.sample;
  options.vocab = corpus.tokenizer.vocab_size();  // a pretrained model may have more rows than tokens
  if (prompts.size() == 1) {
    const std::vector<int64_t> written = generate(model, prompts[0], o.model.seq_len, options, gen);
    fmt::print("{}{}\n", corpus.tokenizer.decode(prompts[0]), corpus.tokenizer.decode(written));
    return;
  }
  const auto written = generate_batch(model, prompts, o.model.seq_len, options, gen);
  for (size_t i = 0; i < prompts.size(); ++i)
    fmt::print("[{}] {}{}\n", i + 1, corpus.tokenizer.decode(prompts[i]), corpus.tokenizer.decode(written[i]));
}

plot::Canvas training_curves(const Options& o, const Corpus& corpus, int64_t step, double held_out_loss,
                             int64_t held_out_windows, const plot::Points& train, const plot::Points& held_out) {
  const auto& m = o.model;
  plot::LossCurves figure;
  figure.title = fmt::format("gpt ({}) on {}: training curves", o.arch, o.data.substr(o.data.find_last_of('/') + 1));
  figure.notes = {fmt::format("{} bytes, {} tokens ({}, vocabulary {}), the last tenth held out · d_model {} · {} heads "
                              "· {} layers · batch {} × {}{}", corpus.bytes, corpus.train.size() + corpus.held_out.size(),
                              o.tokenizer, corpus.tokenizer.vocab_size(), m.d_model, m.heads, m.layers, o.batch,
                              o.window, o.accum > 1 ? fmt::format(" × {} accumulated", o.accum) : ""),
                  fmt::format("held-out loss after {} steps: {:.3f} nats per token", step, held_out_loss)};
  figure.train = train, figure.held_out = held_out;
  figure.train_name = m.dropout > 0 ? fmt::format("train, dropout {}", m.dropout) : "train";
  figure.held_out_name = fmt::format("held-out ({} windows)", held_out_windows);
  figure.loss_title = "cross-entropy loss", figure.y_label = "nats per token";
  return plot::draw_loss_curves(figure);
}

void export_onnx_file(LanguageModel& model, const std::string& path) {
  model.eval();
  // Batch 1 and length 3 (the trace's second run: 2 and 2), within the positions the model has learnt.
  onnx::export_module(model, {zeros({1, std::min<int64_t>(3, model.config.seq_len)}, kInt64)}, path,
                      {.input_names = {"tokens"},
                       .output_names = {"logits"},
                       .dynamic_axes = {{"tokens", {{0, "batch"}, {1, "sequence"}}}}});
}

}  // namespace gpt
