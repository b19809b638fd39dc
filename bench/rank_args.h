// The command line of the benchmarks run under scripts/mpirun (bench_ddp_step, bench_zero):
// `--threads N` and `--steps N`, each a positive count. Anything else ends the process with a
// usage line and exit 2 (on every rank, so none waits in a collective for the others).
#pragma once

#include <fmt/core.h>

#include <charconv>
#include <cstdlib>
#include <string_view>

namespace bench {

struct RankArgs {
  int threads = 1;
  int steps = 0;
};

inline RankArgs parse_rank_args(int argc, char** argv, int default_steps) {
  RankArgs args{1, default_steps};
  const auto refuse = [&](std::string_view why) {
    fmt::print(stderr, "{}: {}\nusage: scripts/mpirun N {} [--threads N] [--steps N]\n", argv[0], why, argv[0]);
    std::exit(2);
  };
  for (int i = 1; i < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag != "--threads" && flag != "--steps") refuse(fmt::format("unknown option '{}'", flag));
    if (i + 1 >= argc) refuse(fmt::format("{} needs a count", flag));
    const std::string_view text = argv[i + 1];
    int value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || value < 1)
      refuse(fmt::format("{} expects a positive count, got '{}'", flag, text));
    (flag == "--threads" ? args.threads : args.steps) = value;
  }
  return args;
}

}  // namespace bench
