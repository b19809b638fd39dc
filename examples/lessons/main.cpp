// lesson: runs one of the attention lessons (or all) and prints its numbers and explanation.
//
//   lesson 1                 # is the embedding split between the heads, or copied?
//   lesson 4 --checkpoint run.safetensors   # lesson 4 on a model trained by seq2seq --save
//   lesson 7                 # the backward pass of an encoder layer, by hand
//   lesson 11 --positions-seeds 5   # positions: none, sinusoidal, learned, rotary
//   lesson all
#include <CLI/CLI.hpp>
#include <chrono>
#include <fmt/core.h>

#include "common/cli.h"
#include "lessons/lessons.h"
#include "lessons/lesson10_sharing.h"
#include "lessons/lesson11_positions.h"
#include "seq2seq/tasks.h"

int main(int argc, char** argv) {
  std::string which = "all";
  lessons::Lesson4Options lesson4;
  lessons::Lesson8Options lesson8;
  lessons::Lesson11Options lesson11;
  int threads = 1;
  CLI::App app{"The attention lessons: each answers one learner's question with numbers (see README.md)."};
  app.add_option("number", which, "the lesson: 1 to 11, or all")
      ->check(CLI::IsMember({"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "all"}));
  app.add_option("--checkpoint", lesson4.checkpoint,
                 "lesson 4: a seq2seq --save checkpoint to use as the trained model")
      ->check(CLI::ExistingFile);
  app.add_option("--seq-len", lesson4.seq_len, "lesson 4: longest held-out sequence (match the checkpoint's run)")
      ->check(CLI::Range(1, 200));
  app.add_option("--task", lesson4.task, "lesson 4: copy, reverse, sort or mirror-sum")
      ->check(CLI::IsMember({"copy", "reverse", "sort", "mirror-sum"}));
  app.add_option("--steps", lesson4.steps, "lesson 4: training steps")->check(CLI::Range(1, 1'000'000));
  app.add_option("--seed", lesson4.seed, "lesson 4: random seed (weights and data)")->check(examples::digits_only());
  app.add_option("--seeds", lesson4.seeds, "lesson 4: compare identical and random starts on this many seeds")
      ->check(CLI::Range(1, 100));
  app.add_option("--heads-task", lesson8.task, "lesson 8: reverse, sort, copy or mirror-sum")
      ->check(CLI::IsMember({"copy", "reverse", "sort", "mirror-sum"}));
  app.add_option("--heads-steps", lesson8.steps, "lesson 8: training steps per model")->check(CLI::Range(1, 1'000'000));
  app.add_option("--heads-seeds", lesson8.seeds, "lesson 8: seeds per head count")->check(CLI::Range(1, 100));
  int64_t symbols = lesson8.vocab - seq2seq::FIRST_SYMBOL;  // less the special tokens: padding, start, end
  app.add_option("--heads-symbols", symbols, "lesson 8: number of distinct symbols")->check(CLI::Range(2, 1000));
  app.add_option("--heads-d-model", lesson8.d_model, "lesson 8: d_model, a multiple of 8 (every head count divides it)")
      ->check(CLI::Range(8, 1024));
  app.add_option("--positions-steps", lesson11.max_steps, "lesson 11: most training steps per model")
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--positions-seeds", lesson11.seeds, "lesson 11: seeds per position scheme")->check(CLI::Range(1, 100));
  app.add_option("--threads", threads, "threads for BLAS and cppgrad's loops")->check(CLI::Range(1, 256));
  if (auto code = examples::parse_options(app, argc, argv, "lesson")) return *code;
  lesson8.vocab = seq2seq::FIRST_SYMBOL + symbols;
  // Checked on the value CLI11 read (it reads 0x0c as 12), not on the text given.
  if (lesson8.d_model % 8 != 0) {
    fmt::print(stderr, "lesson: --heads-d-model {} is not a multiple of 8: lesson 8 trains 1, 2, 4 and 8 heads of "
               "d_model / h columns each\n", lesson8.d_model);
    return examples::kExitRefused;
  }
  // An option of one lesson given to another would be ignored without a word: refuse it.
  const std::pair<const char*, const char*> owners[] = {
      {"--checkpoint", "4"},   {"--seq-len", "4"},     {"--task", "4"},         {"--steps", "4"},
      {"--seed", "4"},         {"--seeds", "4"},       {"--heads-task", "8"},   {"--heads-steps", "8"},
      {"--heads-seeds", "8"},  {"--heads-symbols", "8"}, {"--heads-d-model", "8"}, {"--positions-steps", "11"},
      {"--positions-seeds", "11"}};
  for (const auto& [option, lesson] : owners)
    if (which != "all" && which != lesson && app.get_option(option)->count() > 0) {
      fmt::print(stderr, "lesson: {} is lesson {}'s option; lesson {} does not take it\n", option, lesson, which);
      return examples::kExitRefused;
    }
  cppgrad::set_num_threads(threads);

  auto timed = [&](const std::string& number, auto run) {
    if (which != "all" && which != number) return;
    auto start = std::chrono::steady_clock::now();
    auto result = run();
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    lessons::print(result);
    fmt::print("(lesson {} took {:.0f} ms)\n\n", number, 1000.0 * took.count());
  };
  return examples::run_main("lesson", [&] {
    timed("1", [] { return lessons::run_lesson1(); });
    timed("2", [] { return lessons::run_lesson2(); });
    timed("3", [] { return lessons::run_lesson3(); });
    timed("4", [&] { return lessons::run_lesson4(lesson4); });
    timed("5", [] { return lessons::run_lesson5(); });
    timed("6", [] { return lessons::run_lesson6(); });
    timed("7", [] { return lessons::run_lesson7(); });
    timed("8", [&] { return lessons::run_lesson8(lesson8); });
    timed("9", [] { return lessons::run_lesson9(); });
    timed("10", [] { return lessons::run_lesson10(); });
    timed("11", [&] { return lessons::run_lesson11(lesson11); });
    return 0;
  });
}
