#include "char_lm/evaluate.h"

#include <cmath>

#include "common/run_state.h"
#include "tools/progress.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace char_lm {

data::Batch held_out_windows(const Text& text, int64_t seq_len) {
  return examples::spread_windows(std::vector<int64_t>(text.ids.begin() + text.split, text.ids.end()), seq_len, 64);
}

double loss_on(CharLM& model, const data::Batch& b) {
  NoGradGuard no_grad;
  model.eval();
  Tensor logits = model.forward(b["input"]);
  model.train();
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), b["target"].reshape({-1})).item();
}

double report_held_out(double held_out_loss, int64_t step, double train_seconds) {
  fmt::print("held-out loss {:.4f} nats/char ({:.3f} bits/char) after {} steps, {} of training\n", held_out_loss,
             held_out_loss / std::log(2.0), step, format_duration(train_seconds));
  return held_out_loss;
}

void print_sample(CharLM& model, const Text& text, const Options& o) {
  Generator gen(o.seed + 2);
  std::vector<int64_t> prompt = text.prompt;
  if (prompt.empty()) prompt.push_back(text.ids[static_cast<size_t>(gen.randint(0, text.split))]);
  if (o.sample.length <= 0) return;
  fmt::print("\nsample (temperature {}, top-k {}, top-p {}):\n", o.sample.temperature, o.sample.top_k, o.sample.top_p);
  fmt::print("{}{}\n", text.vocab.decode(prompt), sample(model, text.vocab, prompt, o.model.seq_len, o.sample, gen));
}

plot::Canvas training_curves(const Options& o, const Text& text, int64_t step, double held_out_loss,
                             int64_t held_out_windows, const plot::Points& train, const plot::Points& held_out) {
  const auto& m = o.model;
  plot::LossCurves figure;
  figure.title = fmt::format("char_lm on {}: training curves", o.data.substr(o.data.find_last_of('/') + 1));
  figure.notes = {fmt::format("{} characters, {} distinct, the last tenth held out · d_model {} · {} heads · {} layers "
                              "· batch {} × {}", text.ids.size(), text.vocab.size(), m.d_model, m.heads, m.layers,
                              o.batch, m.seq_len),
                  fmt::format("held-out loss after {} steps: {:.3f} nats = {:.3f} bits per character", step,
                              held_out_loss, held_out_loss / std::log(2.0))};
  figure.train = train, figure.held_out = held_out;
  figure.train_name = m.dropout > 0 ? fmt::format("train, dropout {}", m.dropout) : "train";
  figure.held_out_name = fmt::format("held-out ({} windows)", held_out_windows);
  figure.loss_title = "cross-entropy loss", figure.y_label = "nats per character";
  figure.right_scale = 1 / std::log(2.0), figure.right_label = "bits per character";
  return plot::draw_loss_curves(figure);
}

}  // namespace char_lm
