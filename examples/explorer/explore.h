// The attention explorer's models and what it draws of them (examples/explorer/main.cpp).
//
// A model is trained here in seconds (or, for seq2seq, read from a `seq2seq --save` checkpoint),
// then runs one forward on the student's text with every MultiheadAttention keeping its weights
// (plot::attention_grid, tools/attention_maps.h). The page (page.h) draws those weights.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace explorer {

struct Options {
  std::string model = "gpt";  // seq2seq, gpt, gqa or rope
  std::string text;           // the input; empty: the model's example
  std::string task = "copy";  // seq2seq's: copy, reverse, sort or mirror-sum
  std::string checkpoint;     // seq2seq: a `seq2seq --save` file instead of training
  std::string data = "/usr/share/common-licenses/GPL-3";  // gpt and gqa: the text they learn from
  int64_t steps = 0;          // 0: the model's default
  int64_t heads = 0;          // 0: the model's default
  int64_t kv_heads = 2;       // gqa: key/value heads, each shared by heads / kv_heads query heads
  uint64_t seed = 1;
  std::string out = "attention.html";
  std::string numbers;  // also write the page's data (the weights) as JSON here
};

// One attention layer on the text: a map per query head, queries.size() × keys.size() weights
// in [0, 1], row by row (each row sums to 1).
struct Layer {
  std::string name;    // "decoder · layer 1"
  std::string kind;    // "cross-attention"
  std::string module;  // "transformer.decoder.layers.1.multihead_attn"
  std::string queries, keys;  // the sequences (Exploration::sequences) along the maps' sides and tops
  int64_t kv_heads = 0;       // query heads i·H/kv_heads .. (i+1)·H/kv_heads - 1 share key/value head i
  std::vector<std::vector<double>> heads;
};

struct Exploration {
  std::string title;
  std::vector<std::string> notes;  // how the model was trained, how well it does
  std::vector<std::pair<std::string, std::vector<std::string>>> sequences;  // name -> token labels
  std::vector<Layer> layers;
};

// Builds, trains (or loads) and runs the model `o.model` on `o.text`. Throws cppgrad::Error on a
// text the model cannot read (a character outside its vocabulary, a text too long).
Exploration explore(const Options& o);

}  // namespace explorer
