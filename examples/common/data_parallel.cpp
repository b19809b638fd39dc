#include "data_parallel.h"

#include <fmt/core.h>

#include "cli.h"

using namespace cppgrad;

namespace examples {

int exit_job(int code) {
  if (code != 0 && distributed::world_size() > 1) distributed::abort(code);
  return code;
}

std::string name_in_job(const std::string& program) {
  return distributed::world_size() > 1 ? fmt::format("{} (rank {})", program, distributed::rank()) : program;
}

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, const std::string& program) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return distributed::rank() == 0 ? app.exit(e) : 0;  // --help
    fmt::print(stderr, "{}: {}\n", name_in_job(program), excerpt(e.what(), 400));
    return exit_job(kExitRefused);
  }
}

TrainingLog resume_run(const std::string& path, const NamedTensors& checkpoint, const Run& run,
                       const std::set<std::string>& extra_keys) {
  try {
    check_same_processes(checkpoint);
    TrainingLog log = load_run(checkpoint, run, extra_keys, {"rng.ranks."});
    restore_dropout_stream(checkpoint);
    return log;
  } catch (const Error& e) {
    throw Error(fmt::format("--resume: {}: {}", excerpt(path), e.what()));
  }
}

int64_t per_rank_batch(const std::string& option, int64_t global_batch) {
  const int world = distributed::world_size();
  CPPGRAD_CHECK(global_batch % world == 0, "{} {} does not divide among {} processes: give a multiple of {}", option,
                global_batch, world, world);
  return global_batch / world;
}

NamedTensors gather_dropout_streams() {
  if (distributed::world_size() == 1) return {};
  NamedTensors gathered;
  for (const auto& [name, t] : generator_state(default_generator())) {
    // (bool travels as int64: the collectives move numbers, not flags)
    Tensor as_number = t.dtype() == kBool ? t.to(kInt64) : t;
    gathered.emplace_back("rng.ranks." + name, distributed::all_gather(as_number));  // (world, ...)
  }
  return gathered;
}

void check_same_processes(const NamedTensors& checkpoint) {
  const Tensor* words = nullptr;
  for (const auto& [name, t] : checkpoint)
    if (name == "rng.ranks.words") words = &t;
  const int64_t saved_world = words == nullptr ? 1 : words->dim() >= 1 ? words->size(0) : -1;
  CPPGRAD_CHECK(saved_world == distributed::world_size(),
                "checkpoint: it was written by a run of {} processes, and this one has {}; resume on as many "
                "(the batches and dropout streams are each rank's)",
                saved_world < 0 ? "?" : std::to_string(saved_world), distributed::world_size());
}

void restore_dropout_stream(const NamedTensors& checkpoint) {
  check_same_processes(checkpoint);
  const int world = distributed::world_size(), rank = distributed::rank();
  if (world == 1) return;  // rng.default. is the stream, set by load_run
  NamedTensors mine;
  const NamedTensors ranks = under_prefix("rng.ranks.", checkpoint);
  for (const auto& [name, t] : ranks) {
    CPPGRAD_CHECK(t.dim() >= 1 && t.size(0) == world, "checkpoint: rng.ranks.{} must have a row per process ({}), got "
                  "shape {}", excerpt(name), world, shape_str(t.shape()));
    Tensor row = t.select(0, rank).contiguous();
    mine.emplace_back(name, name == "has_cached_normal" ? row.to(kBool) : row);
  }
  set_generator_state(default_generator(), mine, "rng.ranks.");
}

std::vector<double> sum_over_ranks(std::vector<double> values) {
  if (distributed::world_size() == 1 || values.empty()) return values;
  Tensor t = tensor(values, {static_cast<int64_t>(values.size())});
  distributed::all_reduce(t, distributed::ReduceOp::Sum);
  return t.to_vector<double>();
}

bool decided_by_rank0(bool decision) {
  if (distributed::world_size() == 1) return decision;
  Tensor t = scalar_tensor(decision ? 1 : 0, kInt64);
  distributed::broadcast(t, 0);
  return t.item<int64_t>() != 0;
}

}  // namespace examples
