#include "seq2seq/show.h"

#include <fmt/core.h>

using namespace cppgrad;

namespace seq2seq {

// The tokens of row `b` up to and including the first <end>.
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
    s += fmt::format("{}{}", s.empty() ? "" : " ", t - FIRST_SYMBOL);
  }
  return s;
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

}  // namespace

// The held-out example to draw: the one asked for, or the first of the longest.
int64_t attention_example(const Batch& data, int64_t asked) {
  if (asked >= 0) return asked;
  int64_t longest = 0;
  size_t longest_length = 0;
  for (int64_t b = 0; b < data.src.size(0); ++b)
    if (until_end(data.src, b).size() > longest_length) longest = b, longest_length = until_end(data.src, b).size();
  return longest;
}

// Every head of every attention layer on one held-out example, as a grid: a row per layer and
// kind of attention, a column per head.
examples::AttentionGrid attention_grid(Seq2SeqModel& model, const Batch& data, int64_t example,
                                              const std::string& title, const std::string& how_chosen) {
  auto one_row = [&](const Tensor& t) { return t.narrow(0, example, 1); };
  const Batch one{one_row(data.src), one_row(data.tgt_in), one_row(data.tgt_out), one_row(data.src_pad),
                  one_row(data.tgt_pad)};
  const int64_t src_len = static_cast<int64_t>(until_end(one.src, 0).size());  // symbols and </s>
  const int64_t tgt_len = static_cast<int64_t>(until_end(one.tgt_out, 0).size());  // <s> and the answer
  std::vector<std::pair<std::string, std::shared_ptr<nn::MultiheadAttention>>> layers;
  for (auto& [name, module] : model.named_modules())
    if (auto attention = std::dynamic_pointer_cast<nn::MultiheadAttention>(module)) {
      attention->store_attention = true;
      layers.emplace_back(name, attention);
    }
  Tensor decoded;
  {
    NoGradGuard no_grad;
    model.eval();
    model.forward(one.src, one.tgt_in, one.src_pad, one.tgt_pad);
    for (auto& [name, attention] : layers) attention->store_attention = false;
    decoded = model.greedy_decode(one.src, one.src_pad, model.config.max_len - 1);
  }
  examples::AttentionGrid grid{
      title,
      {fmt::format("held-out example {} ({} symbols, {}): source {} · expected {} · decoded {}", example, src_len - 1,
                   how_chosen, show_tokens(until_end(one.src, 0)), show_tokens(until_end(one.tgt_out, 0)),
                   show_tokens(until_end(decoded, 0))),
       "rows: queries, the positions that look; columns: keys, the positions looked at; each row of a map sums to 1"},
      static_cast<int>(model.config.heads),
      {}};
  const auto src_labels = token_labels(one.src, src_len), tgt_labels = token_labels(one.tgt_in, tgt_len);
  for (auto& [name, attention] : layers) {
    const std::string where = name.substr(name.find("coder.") - 2);  // "encoder.layers.0.self_attn"
    const bool encoder = where.starts_with("encoder"), cross = where.find("multihead_attn") != std::string::npos;
    const size_t at = where.find("layers.") + 7;
    const std::string layer = where.substr(at, where.find('.', at) - at);  // "0"
    examples::AttentionRow row{fmt::format("{} · layer {}", encoder ? "encoder" : "decoder", layer),
                               encoder ? "self-attention" : cross ? "cross-attention" : "self-attention (causal)",
                               where,
                               encoder ? src_labels : tgt_labels,
                               encoder || cross ? src_labels : tgt_labels,
                               {}};
    Tensor w = attention->last_attention.select(0, 0);  // (H, T, S)
    for (int64_t h = 0; h < w.size(0); ++h)
      row.heads.push_back(w.select(0, h)
                              .narrow(0, 0, static_cast<int64_t>(row.queries.size()))
                              .narrow(1, 0, static_cast<int64_t>(row.keys.size()))
                              .to(kFloat64)
                              .contiguous()
                              .to_vector<double>());
    grid.rows.push_back(std::move(row));
    attention->last_attention = Tensor();
  }
  return grid;
}

}  // namespace seq2seq
