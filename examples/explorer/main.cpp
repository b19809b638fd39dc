// explorer: one self-contained HTML page of every attention head of a small trained model on a
// text. Tokens along the top and the side of every map, a map per layer and head; hover a token
// to see where each head looks from it, click a head to enlarge it. The page needs no network:
// its script, style and numbers are all inside it.
//
//   explorer --model gpt --text "you can redistribute it" --out gpt.html     # a GPT on characters
//   explorer --model gqa --heads 8 --kv-heads 2 --out gqa.html               # grouped heads, drawn as groups
//   explorer --model rope --text 27182818 --out rope.html                    # RoPE, reversing 8 digits
//   explorer --model seq2seq --task mirror-sum --out mirror.html             # lesson 8's task
//   explorer --model seq2seq --checkpoint run.safetensors --text "3 1 4"     # a `seq2seq --save` run
//
// Each model trains here in a few seconds (the seq2seq model can instead be read from a
// checkpoint); the weights drawn are those of the model's own forward on the text
// (MultiheadAttention::store_attention, through plot::attention_grid).
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>

#include "common/cli.h"
#include "cppgrad.h"
#include "explorer/explore.h"
#include "explorer/page.h"
#include "runtime/files.h"

int main(int argc, char** argv) {
  explorer::Options o;
  CLI::App app{"Write one HTML page of every attention head of a small trained model on a text."};
  app.add_option("--model", o.model, "seq2seq (an encoder-decoder on a synthetic task), gpt (GPT-2 on characters), "
                                     "gqa (Llama's grouped-query attention on characters) or rope (rotary positions)")
      ->check(CLI::IsMember({"seq2seq", "gpt", "gqa", "rope"}))
      ->capture_default_str();
  app.add_option("--text", o.text, "the input: characters for gpt and gqa, 8 digits for rope, symbols for seq2seq "
                                   "(\"31415926\", or \"3 1 4\" when spaced); default: an example");
  app.add_option("--task", o.task, "seq2seq's task")
      ->check(CLI::IsMember({"copy", "reverse", "sort", "mirror-sum"}))
      ->capture_default_str();
  app.add_option("--checkpoint", o.checkpoint, "seq2seq: read the model from a `seq2seq --save` file, not train one")
      ->check(CLI::ExistingFile);
  app.add_option("--data", o.data, "gpt and gqa: the text they learn from, plain or .gz")->capture_default_str();
  app.add_option("--steps", o.steps, "training steps (default: seq2seq, gpt and gqa 600, rope 2000)")
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--heads", o.heads, "attention heads, query heads for gqa (default: 4, gqa 8)")->check(CLI::Range(1, 64));
  app.add_option("--kv-heads", o.kv_heads, "gqa: key/value heads, each shared by a group of query heads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "random seed (weights, data; with --checkpoint, the held-out sequences it is scored on)")->check(examples::digits_only())->capture_default_str();
  app.add_option("--out", o.out, "the HTML page to write")->capture_default_str();
  app.add_option("--numbers", o.numbers, "also write the page's numbers (every head's weights) as JSON here")
      ->check(examples::names_a_path());
  if (auto code = examples::parse_options(app, argc, argv, "explorer")) return *code;
  return examples::run_main("explorer", [&] {
    // An option the chosen model does not read is refused, never ignored.
    auto only_for = [&](const std::string& option, std::initializer_list<std::string> models, const std::string& why) {
      if (app.count(option) > 0 && std::find(models.begin(), models.end(), o.model) == models.end())
        throw cppgrad::Error(fmt::format("{} is not read by --model {}: {}", option, o.model, why));
    };
    only_for("--task", {"seq2seq"}, "only seq2seq has tasks");
    only_for("--checkpoint", {"seq2seq"}, "only seq2seq reads a checkpoint");
    only_for("--data", {"gpt", "gqa"}, "only gpt and gqa learn from a text");
    only_for("--kv-heads", {"gqa"}, "only gqa shares key/value heads");
    if (!o.checkpoint.empty())
      for (const char* option : {"--task", "--steps", "--heads"})
        if (app.count(option) > 0)
          throw cppgrad::Error(fmt::format("{} is the checkpoint's; it cannot be given with --checkpoint", option));
    examples::check_writable("--out", o.out);
    if (!o.numbers.empty()) examples::check_writable("--numbers", o.numbers);
    const explorer::Exploration e = explorer::explore(o);
    const nlohmann::json data = explorer::page_data(e);
    cppgrad::files::write_file_atomically(o.out, explorer::page_html(data), "the explorer's page");
    for (const std::string& note : e.notes) fmt::print("{}\n", note);
    fmt::print("{}: {} layers of attention, {} maps, written to {}\n", e.title, e.layers.size(),
               [&] {
                 size_t maps = 0;
                 for (const auto& l : e.layers) maps += l.heads.size();
                 return maps;
               }(),
               o.out);
    if (!o.numbers.empty()) {
      cppgrad::files::write_file_atomically(o.numbers, data.dump(1) + "\n", "the explorer's numbers");
      fmt::print("their numbers written to {}\n", o.numbers);
    }
    return 0;
  });
}
