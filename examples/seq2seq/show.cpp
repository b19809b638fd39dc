#include "seq2seq/show.h"

#include <fmt/core.h>

#include "distributed/distributed.h"

using namespace cppgrad;

namespace seq2seq {

std::vector<int64_t> until_end(const Tensor& tokens, int64_t b) {
  std::vector<int64_t> out;
  for (int64_t t = 0; t < tokens.size(1); ++t) {
    int64_t tok = tokens.at<int64_t>({b, t});
    out.push_back(tok);
    if (tok == EOS) break;
  }
  return out;
}

std::string show_tokens(const std::vector<int64_t>& tokens) {
  std::string s;
  for (int64_t t : tokens) {
    if (t == EOS || t == PAD) break;
    // A model may decode the start token too: by name (as token_labels below), not as the symbol -2.
    s += fmt::format("{}{}", s.empty() ? "" : " ", t == BOS ? "<s>" : std::to_string(t - FIRST_SYMBOL));
  }
  return s;
}

plot::Canvas training_curves(const Options& o, int64_t step, double accuracy, const plot::Points& train,
                             const plot::Points& held_out, const plot::Points& held_out_accuracy) {
  plot::LossCurves figure;
  figure.title = fmt::format("{} task: training curves", o.task);
  figure.notes = {fmt::format("d_model {} · {} heads · {}+{} layers · batch {} · length ≤ {} · lr factor {} · seed {}",
                              o.model.d_model, o.model.heads, o.model.layers, o.model.layers, o.batch, o.seq_len, o.lr,
                              o.seed),
                  fmt::format("after {} steps, {:.1f}% of the {} held-out sequences decoded right", step, accuracy,
                              o.eval_size)};
  figure.train = train, figure.held_out = held_out;
  // The training loss is measured with dropout on, the held-out one without: it can lie lower.
  figure.train_name = o.model.dropout > 0 ? fmt::format("train, dropout {}", o.model.dropout) : "train";
  figure.held_out_name = fmt::format("held-out ({} sequences)", o.eval_size);
  figure.loss_title = "cross-entropy loss", figure.y_label = "nats per token";
  plot::Panel right;
  right.title = "held-out sequence accuracy", right.y_label = "% of sequences right";
  right.range = std::pair{0.0, 100.0};
  right.curves = {{"held-out, averaged weights of that step", held_out_accuracy, "#d62728", plot::CurveStyle::Dots},
                  {fmt::format("at the end, averaged weights: {:.1f}%", accuracy),
                   {{static_cast<double>(step), accuracy}}, "#2ca02c", plot::CurveStyle::Ring}};
  figure.more = {right};
  return plot::draw_loss_curves(figure);
}

void StepProfile::before(int64_t step) {
  if (!on_ || step != step_) return;
  profile::set_enabled(true);
  profile::reset();
}

void StepProfile::after(int64_t step, Progress& progress, int64_t batch) {
  if (!on_ || step != step_) return;
  profile::set_enabled(false);
  if (distributed::rank() != 0) return;
  progress.finish();
  fmt::print("\nprofile of step {} (batch {}, {} threads):\n{}\n", step, batch, get_num_threads(), profile::report());
}

namespace {

std::vector<std::string> token_labels(const Tensor& tokens, int64_t length) {
  std::vector<std::string> out;
  for (int64_t t = 0; t < length; ++t) {
    int64_t tok = tokens.at<int64_t>({0, t});
    out.push_back(tok == BOS ? "<s>" : tok == EOS ? "</s>" : std::to_string(tok - FIRST_SYMBOL));
  }
  return out;
}

// The held-out example to draw: `asked`, or (when -1) the first of the longest.
int64_t attention_example(const Batch& data, int64_t asked) {
  if (asked >= 0) return asked;
  int64_t longest = 0;
  size_t longest_length = 0;
  for (int64_t b = 0; b < data.src.size(0); ++b)
    if (until_end(data.src, b).size() > longest_length) longest = b, longest_length = until_end(data.src, b).size();
  return longest;
}

}  // namespace

plot::AttentionGrid attention_grid(Seq2SeqModel& model, const Batch& data, const Options& o, int64_t step) {
  const int64_t example = attention_example(data, o.attention_example);
  const std::string title = fmt::format("{} task: attention of every head after {} steps", o.task, step);
  const std::string how_chosen = o.attention_example >= 0 ? "chosen" : "the longest held out";
  auto one_row = [&](const Tensor& t) { return t.narrow(0, example, 1); };
  const Batch one{one_row(data.src), one_row(data.tgt_in), one_row(data.tgt_out), one_row(data.src_pad),
                  one_row(data.tgt_pad)};
  const int64_t src_len = static_cast<int64_t>(until_end(one.src, 0).size());      // symbols and </s>
  const int64_t tgt_len = static_cast<int64_t>(until_end(one.tgt_out, 0).size());  // <s> and the answer
  const auto src_labels = token_labels(one.src, src_len), tgt_labels = token_labels(one.tgt_in, tgt_len);
  // "transformer.decoder.layers.0.multihead_attn": the decoder's layer 0, cross-attention.
  auto label = [&](const std::string& name, int64_t, int64_t) {
    const std::string where = name.substr(name.find("coder.") - 2);  // "decoder.layers.0.multihead_attn"
    const bool encoder = where.starts_with("encoder"), cross = where.find("multihead_attn") != std::string::npos;
    const size_t at = where.find("layers.") + 7;
    const std::string layer = where.substr(at, where.find('.', at) - at);  // "0"
    return plot::AttentionRowLabels{fmt::format("{} · layer {}", encoder ? "encoder" : "decoder", layer),
                                  encoder ? "self-attention" : cross ? "cross-attention" : "self-attention (causal)",
                                  where, encoder ? src_labels : tgt_labels,
                                  encoder || cross ? src_labels : tgt_labels};
  };
  plot::AttentionGrid grid = plot::attention_grid(
      model, [&] { model.forward(one.src, one.tgt_in, one.src_pad, one.tgt_pad); }, title, label);
  Tensor decoded;
  {
    NoGradGuard no_grad;
    model.eval();
    decoded = model.greedy_decode(one.src, one.src_pad, model.config.max_len - 1);
  }
  grid.notes = {fmt::format("held-out example {} ({} symbols, {}): source {} · expected {} · decoded {}", example,
                            src_len - 1, how_chosen, show_tokens(until_end(one.src, 0)),
                            show_tokens(until_end(one.tgt_out, 0)), show_tokens(until_end(decoded, 0))),
                "rows: queries, the positions that look; columns: keys, the positions looked at; each row of a map "
                "sums to 1"};
  return grid;
}


void write_attention_grid(Seq2SeqModel& model, optim::ExponentialMovingAverage& average, const Batch& held_out,
                          const Options& o, int64_t step) {
  average.swap();
  plot::draw_attention_grid(attention_grid(model, held_out, o, step)).write(o.attention);
  average.swap();
  fmt::print("attention grid written to {}\n", o.attention);
}
}  // namespace seq2seq
