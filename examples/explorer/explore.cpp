#include "explorer/explore.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include "cppgrad.h"
#include "common/cli.h"
#include "nn/hf/model.h"
#include "seq2seq/model.h"
#include "seq2seq/tasks.h"
#include "tools/attention_maps.h"

using namespace cppgrad;
namespace F = cppgrad::nn::functional;

namespace explorer {

namespace {

// Every MultiheadAttention of `model` on one forward, as layers of the page. `sequences_of` names
// the sequences along a layer's sides and tops from its module name; `name_of` heads its row.
Exploration run_forward(nn::Module& model, const std::function<void()>& forward,
                        const std::function<std::pair<std::string, std::string>(const std::string&)>& sequences_of,
                        const std::function<std::pair<std::string, std::string>(const std::string&)>& name_of) {
  std::map<std::string, int64_t> kv_heads;
  for (auto& [name, module] : model.named_modules())
    if (auto attention = std::dynamic_pointer_cast<nn::MultiheadAttention>(module))
      kv_heads[name] = attention->options.num_kv_heads();
  const plot::AttentionGrid grid = plot::attention_grid(model, forward, "");
  Exploration e;
  for (const plot::AttentionRow& row : grid.rows) {  // heading: the module's dotted name
    auto [queries, keys] = sequences_of(row.heading);
    auto [name, kind] = name_of(row.heading);
    e.layers.push_back({name, kind, row.heading, queries, keys, kv_heads.at(row.heading), row.heads});
  }
  return e;
}

// "transformer.decoder.layers.1.multihead_attn" -> "1"
std::string layer_number(const std::string& module) {
  const size_t at = module.find("layers.") + 7;
  return module.substr(at, module.find('.', at) - at);
}

// ---- seq2seq: the encoder-decoder of examples/seq2seq on a synthetic task ------------------------

// Symbols are written as seq2seq prints them, counted from 0: "3 1 4" or, below 10, "314".
std::vector<int64_t> read_symbols(const std::string& text, int64_t vocab) {
  std::vector<int64_t> symbols;
  const bool spaced = text.find(' ') != std::string::npos;
  std::string number;
  auto take = [&] {
    if (number.empty()) return;
    CPPGRAD_CHECK(number.size() < 6 && std::all_of(number.begin(), number.end(), ::isdigit),
                  "'{}' in --text is not a symbol (seq2seq reads symbols 0 to {})", number,
                  vocab - seq2seq::FIRST_SYMBOL - 1);
    const int64_t s = std::stoll(number);
    CPPGRAD_CHECK(s < vocab - seq2seq::FIRST_SYMBOL, "symbol {} in --text is past the model's last, {}", s,
                  vocab - seq2seq::FIRST_SYMBOL - 1);
    symbols.push_back(seq2seq::FIRST_SYMBOL + s);
    number.clear();
  };
  for (char c : text) {
    if (c == ' ') take();
    else number += c;
    if (!spaced) take();
  }
  take();
  return symbols;
}

// The encoder's input for --text (a default when empty): its symbols and </s>, at most max_len
// positions with the decoder's <s> and </s>.
std::vector<int64_t> source_symbols(const std::string& text, int64_t vocab, int64_t max_len) {
  std::vector<int64_t> src = read_symbols(text.empty() ? "31415926" : text, vocab);
  CPPGRAD_CHECK(!src.empty() && static_cast<int64_t>(src.size()) <= max_len - 2,
                "--text holds {} symbols; seq2seq reads 1 to {}", src.size(), max_len - 2);
  src.push_back(seq2seq::EOS);
  return src;
}

// Said before the first step: the user waits seconds for it, and a refusal of the arguments
// comes before this line, never after training.
void say_training(const std::string& model, int64_t steps) {
  fmt::print("training {} for {} steps...\n", model, steps);
  std::fflush(stdout);
}

std::string symbol_label(int64_t token) {
  if (token == seq2seq::BOS) return "<s>";
  if (token == seq2seq::EOS) return "</s>";
  if (token == seq2seq::PAD) return "pad";
  return std::to_string(token - seq2seq::FIRST_SYMBOL);
}

// The model's sizes and task from a `seq2seq --save` checkpoint, and the weights it decodes with.
std::shared_ptr<seq2seq::Seq2SeqModel> load_seq2seq(const std::string& path, std::string& task) {
  auto file = nn::load_safetensors(path);
  examples::require_writer(file.metadata, "seq2seq", path);
  auto number = [&](const std::string& key) { return examples::metadata_count(file.metadata, key, path, "seq2seq --save", 1); };
  task = file.metadata.count("task") ? file.metadata.at("task") : "copy";
  seq2seq::ModelConfig c;
  c.d_model = number("d_model"), c.heads = number("heads"), c.layers = number("layers");
  c.vocab = file.at("model.embed.weight").size(0);
  c.ff = file.at("model.transformer.encoder.layers.0.linear1.weight").size(0);
  c.dropout = 0.0;
  auto model = std::make_shared<seq2seq::Seq2SeqModel>(c);
  model->load_state_dict(under_prefix("model.", file.tensors));
  // seq2seq decodes with the moving average of the weights (its --attention picture too): those.
  const nn::NamedTensors averaged = under_prefix("average.", file.tensors);
  if (!averaged.empty()) {
    optim::ExponentialMovingAverage average(model->parameters(), 0.0);
    average.load_state_dict(averaged);
    average.swap();  // the parameters now hold the averages
  }
  return model;
}

Exploration explore_seq2seq(const Options& o) {
  using namespace seq2seq;
  std::string task_text = o.task;
  std::shared_ptr<Seq2SeqModel> model;
  const int64_t seq_len = 8;  // the longest source the model trains on
  std::string trained;
  if (!o.checkpoint.empty()) {
    model = load_seq2seq(o.checkpoint, task_text);
    trained = fmt::format("read from {}", o.checkpoint);
  } else {
    // The lessons' small model with two layers, trained with the recipe of examples/seq2seq (Adam,
    // the paper's warm-up then 1/√n schedule).
    ModelConfig c;
    c.vocab = FIRST_SYMBOL + 10, c.d_model = 32, c.heads = o.heads > 0 ? o.heads : 4, c.layers = 2, c.ff = 64;
    c.dropout = 0.0, c.max_len = 32;
    CPPGRAD_CHECK(c.d_model % c.heads == 0, "--heads {} must divide d_model {}", c.heads, c.d_model);
    source_symbols(o.text, c.vocab, c.max_len);  // refused before training, not after
    manual_seed(o.seed);
    model = std::make_shared<Seq2SeqModel>(c);
    const int64_t steps = o.steps > 0 ? o.steps : 600;
    const Task task = parse_task(task_text);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1.0).beta1(0.9).beta2(0.98).eps(1e-9));
    optim::NoamLR schedule(opt, c.d_model, 100);
    Generator data(o.seed + 1000);
    model->train();
    say_training("the seq2seq model", steps);
    for (int64_t step = 0; step < steps; ++step) {
      Batch b = make_batch(task, 64, seq_len, c.vocab, data);
      Tensor loss = F::cross_entropy(model->forward(b.src, b.tgt_in, b.src_pad, b.tgt_pad).reshape({-1, c.vocab}),
                                     b.tgt_out.reshape({-1}), F::CrossEntropyOptions().ignore_index(PAD));
      opt.zero_grad();
      loss.backward();
      opt.step();
      schedule.step();
    }
    trained = fmt::format("trained here: {} steps of 64 sequences of 1 to {} symbols, seed {}", steps, seq_len, o.seed);
  }
  model->eval();
  const Task task = parse_task(task_text);
  const int64_t vocab = model->config.vocab;

  // How well it does: held-out sequences decoded exactly.
  Generator held_gen(o.seed + 2000);
  const Batch held = make_batch(task, 200, seq_len, vocab, held_gen);
  Tensor decoded_held = model->greedy_decode(held.src, held.src_pad, seq_len + 1);
  int64_t right = 0;
  for (int64_t b = 0; b < held.src.size(0); ++b) {
    bool same = true;
    for (int64_t t = 0; t < held.tgt_out.size(1) && same; ++t) {
      same = decoded_held.at<int64_t>({b, t}) == held.tgt_out.at<int64_t>({b, t});
      if (held.tgt_out.at<int64_t>({b, t}) == EOS) break;
    }
    right += same;
  }

  // The text: its symbols and </s> into the encoder; the decoder reads back what it decoded
  // itself, so the maps are those of the greedy decoding that produced the answer.
  std::vector<int64_t> src = source_symbols(o.text, vocab, model->config.max_len);
  const auto S = static_cast<int64_t>(src.size());
  Tensor src_t = tensor(src, Shape{1, S}), src_pad = zeros({1, S}, kBool);
  // Two tokens past the source's length, but no more than the decoder's positions hold with the
  // start token before them.
  Tensor decoded = model->greedy_decode(src_t, src_pad, std::min(S + 2, model->config.max_len - 1));
  std::vector<int64_t> tgt_in = {BOS};
  for (int64_t t = 0; t < decoded.size(1) && decoded.at<int64_t>({0, t}) != EOS; ++t)
    tgt_in.push_back(decoded.at<int64_t>({0, t}));
  const auto T = static_cast<int64_t>(tgt_in.size());
  Tensor tgt_t = tensor(tgt_in, Shape{1, T}), tgt_pad = zeros({1, T}, kBool);

  Exploration e = run_forward(
      *model, [&] { model->forward(src_t, tgt_t, src_pad, tgt_pad); },
      [](const std::string& module) -> std::pair<std::string, std::string> {
        if (module.find("encoder") != std::string::npos) return {"source", "source"};
        if (module.find("multihead_attn") != std::string::npos) return {"target", "source"};
        return {"target", "target"};
      },
      [](const std::string& module) -> std::pair<std::string, std::string> {
        const bool encoder = module.find("encoder") != std::string::npos;
        return {fmt::format("{} · layer {}", encoder ? "encoder" : "decoder", layer_number(module)),
                encoder ? "self-attention"
                : module.find("multihead_attn") != std::string::npos ? "cross-attention: target → source"
                                                                     : "self-attention, causal"};
      });
  std::vector<std::string> source_labels, target_labels;
  for (int64_t t : src) source_labels.push_back(symbol_label(t));
  for (int64_t t : tgt_in) target_labels.push_back(symbol_label(t));
  e.sequences = {{"source", source_labels}, {"target", target_labels}};
  std::string answer;
  for (size_t t = 1; t < tgt_in.size(); ++t) answer += (answer.empty() ? "" : " ") + symbol_label(tgt_in[t]);
  e.title = fmt::format("seq2seq on the {} task: every attention head", task_name(task));
  e.notes = {fmt::format("An encoder-decoder Transformer (examples/seq2seq): d_model {}, {} heads, {} + {} layers; {}.",
                         model->config.d_model, model->config.heads, model->config.layers, model->config.layers, trained),
             fmt::format("It decodes {:.1f}% of 200 held-out sequences exactly. On this source it answered: {}.",
                         100.0 * static_cast<double>(right) / 200.0, answer.empty() ? "(nothing)" : answer),
             "The decoder reads back its own answer, so its maps are the ones that produced it: a target token's row "
             "is where the decoder looks to write the next token."};
  return e;
}

// ---- gpt and gqa: decoder-only language models on characters of a text ---------------------------

// A character as a label: spaces and line breaks made visible.
std::string char_label(unsigned char c) {
  if (c == ' ') return "␣";
  if (c == '\n') return "↵";
  if (c == '\t') return "⇥";
  if (c < 32 || c > 126) return fmt::format("\\x{:02x}", c);
  return std::string(1, static_cast<char>(c));
}

Exploration explore_language_model(const Options& o, hf::Arch arch) {
  const std::string text = examples::read_data_file("--data", o.data, 64 << 20, "");
  const data::CharVocabulary vocab = data::CharVocabulary::of(text);
  const std::vector<int64_t> ids = vocab.encode(text);
  hf::ModelConfig c;
  c.arch = arch, c.vocab = vocab.size(), c.layers = 2, c.d_model = 64, c.ff = 256, c.seq_len = 64;
  c.heads = o.heads > 0 ? o.heads : arch == hf::Arch::GPT2 ? 4 : 8;
  c.kv_heads = arch == hf::Arch::Llama ? o.kv_heads : 0;
  CPPGRAD_CHECK(c.d_model % c.heads == 0, "--heads {} must divide d_model {}", c.heads, c.d_model);
  CPPGRAD_CHECK(arch != hf::Arch::Llama || (c.kv_heads >= 1 && c.heads % c.kv_heads == 0),
                "--kv-heads {} must divide --heads {}", c.kv_heads, c.heads);
  const int64_t n = static_cast<int64_t>(ids.size()), split = n * 9 / 10, T = c.seq_len, B = 16;
  CPPGRAD_CHECK(split > 4 * T, "{} holds {} characters; the model learns from at least {}", o.data, n,
                5 * T);
  const std::string input = o.text.empty() ? "you can redistribute it" : o.text;
  CPPGRAD_CHECK(static_cast<int64_t>(input.size()) <= T, "--text has {} characters; the model reads {} at most",
                input.size(), T);
  for (unsigned char ch : input)
    CPPGRAD_CHECK(vocab.contains(ch), "'{}' in --text is not among the characters of {}", char_label(ch), o.data);
  manual_seed(o.seed);
  std::shared_ptr<hf::LanguageModel> model = hf::make_model(c);
  const int64_t steps = o.steps > 0 ? o.steps : 600;
  Tensor all = tensor(ids, Shape{n});
  auto windows = [&](const std::vector<int64_t>& starts) {  // (B, T) inputs and the next characters
    std::vector<Tensor> xs, ys;
    for (int64_t s : starts) xs.push_back(all.narrow(0, s, T)), ys.push_back(all.narrow(0, s + 1, T));
    return std::pair{stack(xs), stack(ys)};
  };
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  Generator data(o.seed + 1000);
  model->train();
  say_training(arch == hf::Arch::Llama ? "the GQA model" : "the GPT", steps);
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<int64_t> starts;
    for (int64_t b = 0; b < B; ++b) starts.push_back(data.randint(0, split - T - 1));
    auto [x, y] = windows(starts);
    Tensor loss = F::cross_entropy(model->forward(x).reshape({-1, c.vocab}), y.reshape({-1}));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  model->eval();
  double held_loss = 0.0;
  {
    NoGradGuard no_grad;
    std::vector<int64_t> starts;
    for (int64_t s = split; s + T + 1 < n && starts.size() < 64; s += T) starts.push_back(s);
    auto [x, y] = windows(starts);
    held_loss = F::cross_entropy(model->forward(x).reshape({-1, c.vocab}), y.reshape({-1})).item<double>();
  }

  const std::vector<int64_t> tokens = vocab.encode(input);
  Tensor x = tensor(tokens, Shape{1, static_cast<int64_t>(tokens.size())});
  const bool gpt = arch == hf::Arch::GPT2;
  Exploration e = run_forward(
      *model, [&] { model->forward(x); },
      [](const std::string&) { return std::pair<std::string, std::string>{"text", "text"}; },
      [&](const std::string& module) {
        return std::pair<std::string, std::string>{fmt::format("layer {}", layer_number(module)),
                                                   "self-attention, causal"};
      });
  std::vector<std::string> labels;
  for (unsigned char ch : input) labels.push_back(char_label(ch));
  e.sequences = {{"text", labels}};
  const std::string trained =
      fmt::format("trained here on the characters of {}: {} steps of {} windows of {}, seed {}", o.data, steps, B, T, o.seed);
  if (gpt) {
    e.title = "A GPT on text: every attention head";
    e.notes = {fmt::format("GPT-2's architecture (nn/hf/model.h), {} layers, d_model {}, {} heads, learned positions; {}.",
                           c.layers, c.d_model, c.heads, trained)};
  } else {
    e.title = "Grouped-query attention on text: every head, grouped by the keys and values it shares";
    e.notes = {fmt::format("Llama's architecture (nn::Decoder): {} layers, d_model {}, {} query heads sharing {} key/value "
                           "heads ({} query heads each), rotary positions; {}.",
                           c.layers, c.d_model, c.heads, c.kv_heads, c.heads / c.kv_heads, trained)};
  }
  e.notes.push_back(fmt::format("Held-out loss {:.3f} nats per character (a uniform guess over the {} characters: {:.3f}).",
                                held_loss, c.vocab, std::log(static_cast<double>(c.vocab))));
  e.notes.push_back("Causal: a character sees itself and the ones before it, never the ones after.");
  return e;
}

// ---- rope: an encoder with rotary positions on the reverse task ------------------------------------

// Lesson 11's order model with RoPE: token embeddings (no position vector), pre-norm blocks
//   h = x + Attention(LayerNorm(x)),  y = h + W2·relu(W1·LayerNorm(h)),
// whose attention rotates each head's queries and keys by their positions.
class RotaryEncoder : public nn::Module {
 public:
  RotaryEncoder(int64_t vocab, int64_t d_model, int64_t heads, int64_t layers) {
    embed = register_module("embed", std::make_shared<nn::Embedding>(vocab, d_model));
    for (int64_t l = 0; l < layers; ++l) {
      const std::string i = std::to_string(l);
      norm1.push_back(register_module("norm1_" + i, std::make_shared<nn::LayerNorm>(Shape{d_model})));
      attention.push_back(register_module(
          "attention_" + i,
          std::make_shared<nn::MultiheadAttention>(nn::MultiheadAttentionOptions(d_model, heads).rotary(true))));
      norm2.push_back(register_module("norm2_" + i, std::make_shared<nn::LayerNorm>(Shape{d_model})));
      up.push_back(register_module("up_" + i, std::make_shared<nn::Linear>(d_model, 2 * d_model)));
      down.push_back(register_module("down_" + i, std::make_shared<nn::Linear>(2 * d_model, d_model)));
    }
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(Shape{d_model}));
    out = register_module("out", std::make_shared<nn::Linear>(d_model, vocab));
  }

  Tensor forward(const Tensor& tokens) {  // (B, T) -> logits (B, T, vocab)
    Tensor x = embed->forward(tokens);
    for (size_t l = 0; l < attention.size(); ++l) {
      Tensor normed = norm1[l]->forward(x);
      x = x + attention[l]->forward(normed, normed, normed, {.need_weights = false}).output;
      x = x + down[l]->forward(up[l]->forward(norm2[l]->forward(x)).relu());
    }
    return out->forward(norm->forward(x));
  }
  std::string type_name() const override { return "RotaryEncoder"; }

  std::shared_ptr<nn::Embedding> embed;
  std::vector<std::shared_ptr<nn::LayerNorm>> norm1, norm2;
  std::vector<std::shared_ptr<nn::MultiheadAttention>> attention;
  std::vector<std::shared_ptr<nn::Linear>> up, down;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> out;
};

Exploration explore_rope(const Options& o) {
  const int64_t vocab = 10, length = 8, d_model = 32, layers = 2, heads = o.heads > 0 ? o.heads : 4;
  CPPGRAD_CHECK(d_model % heads == 0, "--heads {} must divide d_model {}", heads, d_model);
  const std::string input = o.text.empty() ? "31415926" : o.text;
  CPPGRAD_CHECK(static_cast<int64_t>(input.size()) == length && std::all_of(input.begin(), input.end(), ::isdigit),
                "the rope model reverses {} digits; --text is '{}'", length, input);
  auto reverse_batch = [&](int64_t batch, Generator& gen) {  // digits, and the same digits back to front
    Tensor x = randint(0, vocab, {batch, length}, gen);
    return std::pair{x, x.index_select(1, arange(static_cast<double>(length - 1), -1.0, -1.0).to(kInt64))};
  };
  manual_seed(o.seed);
  RotaryEncoder model(vocab, d_model, heads, layers);
  const int64_t steps = o.steps > 0 ? o.steps : 2000;
  optim::Adam opt(model.parameters(), optim::AdamOptions(3e-3));
  Generator data(o.seed + 1000);
  model.train();
  say_training("the rotary encoder", steps);
  for (int64_t step = 0; step < steps; ++step) {
    auto [x, y] = reverse_batch(32, data);
    Tensor loss = F::cross_entropy(model.forward(x).reshape({-1, vocab}), y.reshape({-1}));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  model.eval();
  double accuracy = 0.0;
  {
    NoGradGuard no_grad;
    Generator held_gen(o.seed + 2000);
    auto [x, y] = reverse_batch(500, held_gen);
    Tensor all_right = (model.forward(x).argmax(-1) == y).to(kFloat64).sum({1}) == static_cast<double>(length);
    accuracy = 100.0 * all_right.to(kFloat64).mean().item<double>();
  }
  std::vector<int64_t> digits;
  for (char ch : input) digits.push_back(ch - '0');
  Tensor x = tensor(digits, Shape{1, length});
  Exploration e = run_forward(
      model, [&] { model.forward(x); },
      [](const std::string&) { return std::pair<std::string, std::string>{"digits", "digits"}; },
      [](const std::string& module) {
        return std::pair<std::string, std::string>{"layer " + module.substr(module.find('_') + 1),  // "attention_1"
                                                   "self-attention, rotary positions"};
      });
  std::vector<std::string> labels;
  for (int64_t t = 0; t < length; ++t) labels.push_back(fmt::format("{}", digits[static_cast<size_t>(t)]));
  e.sequences = {{"digits", labels}};
  std::string answer;
  {
    NoGradGuard no_grad;
    Tensor out = model.forward(x).argmax(-1);
    for (int64_t t = 0; t < length; ++t) answer += std::to_string(out.at<int64_t>({0, t}));
  }
  e.title = "RoPE on the reverse task: every attention head";
  e.notes = {fmt::format("An encoder whose attention rotates queries and keys by position (RoPE, lesson 11): {} layers, "
                         "d_model {}, {} heads, no position vector; trained here to reverse {} digits: {} steps of 32, "
                         "seed {}.",
                         layers, d_model, heads, length, steps, o.seed),
             fmt::format("It reverses {:.1f}% of 500 held-out sequences exactly; {} → {}.", accuracy, input, answer),
             "Output i is input 7 − i: a head that has learned it looks along the anti-diagonal."};
  return e;
}

}  // namespace

Exploration explore(const Options& o) {
  if (o.model == "seq2seq") return explore_seq2seq(o);
  if (o.model == "gpt") return explore_language_model(o, hf::Arch::GPT2);
  if (o.model == "gqa") return explore_language_model(o, hf::Arch::Llama);
  if (o.model == "rope") return explore_rope(o);
  throw Error(fmt::format("unknown model '{}' (seq2seq, gpt, gqa or rope)", o.model));
}

}  // namespace explorer
