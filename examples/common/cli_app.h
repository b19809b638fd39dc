// What a file that adds options to a CLI11 App includes: CLI11 itself, the examples' checks
// (cli.h) and the size options every example's Transformer takes.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "common/cli.h"
#include "runtime/error.h"

namespace examples {

// The sizes every example's Transformer takes, into the fields of the same names of `model`:
// --d-model, --heads, --layers (described by `layers_help`), --ff and --dropout.
template <class ModelConfig>
void add_size_options(CLI::App& app, ModelConfig& model, const std::string& layers_help) {
  app.add_option("--d-model", model.d_model, "model width d_model")->check(CLI::Range(1, 65536));
  app.add_option("--heads", model.heads, "attention heads (must divide d_model)")->check(CLI::Range(1, 1024));
  app.add_option("--layers", model.layers, layers_help)->check(CLI::Range(1, 1000));
  app.add_option("--ff", model.ff, "feed-forward width")->check(CLI::Range(1, 1 << 20));
  app.add_option("--dropout", model.dropout, "dropout probability")->check(number_in(0.0, 0.99));
}

// The rule between those sizes, checked once they are parsed: the program's words, not the layer's.
template <class ModelConfig>
void check_sizes(const ModelConfig& model) {
  CPPGRAD_CHECK(model.d_model % model.heads == 0, "--d-model {} is not divisible by --heads {}", model.d_model,
                model.heads);
}

}  // namespace examples
