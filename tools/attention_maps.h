// Pictures of attention: every head of every MultiheadAttention in a model, on one example, as
// the grid tools/plot/attention_grid.h draws. One call gives the picture:
//
//   plot::attention_grid(*model, [&] { model->forward(tokens); }, "my model on one sentence")
//       .write("attention.svg");       // plot::draw_attention_grid(...).write(...) in full
//
// It switches each layer's `store_attention` on for that one forward (MultiheadAttention keeps
// its weights, detached, in `last_attention`), then off again.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "../nn/module.h"
#include "plot/attention_grid.h"

namespace cppgrad::plot {

// What a row of the grid says: its heading, kind and detail beside the maps, and the tokens on
// the maps' axes. The maps are cut to queries.size() × keys.size() (leaving padding out).
struct AttentionRowLabels {
  std::string heading, kind, detail;
  std::vector<std::string> queries, keys;
};

// Labels a row from the module's dotted name ("encoder.layers.0.self_attn") and its map's size.
using AttentionLabeller =
    std::function<AttentionRowLabels(const std::string& module, int64_t queries, int64_t keys)>;

// Runs `forward` once, in eval mode and without a graph (the model's mode is restored), with
// every MultiheadAttention inside `model` keeping its weights; returns the grid of batch row 0:
// a row per layer that ran, in named_modules() order, a column per head. By default a row is
// headed by the module's name and its positions are numbered from 0. Throws cppgrad::Error when
// `forward` ran no MultiheadAttention of `model`.
AttentionGrid attention_grid(nn::Module& model, const std::function<void()>& forward, const std::string& title,
                                   const AttentionLabeller& label = {});

}  // namespace cppgrad::plot
