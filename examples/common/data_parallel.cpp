#include "data_parallel.h"

namespace examples {

using namespace cppgrad;

Tensor my_rows(const Tensor& global_batch) {
  const distributed::Range rows =
      distributed::shard_range(global_batch.size(0), distributed::rank(), distributed::world_size());
  return global_batch.narrow(0, rows.begin, rows.end - rows.begin);
}

// (bool tensors travel as int64: the collectives move numbers, not flags)
NamedTensors gather_generator_states(const Generator& gen) {
  NamedTensors gathered;
  for (const auto& [name, t] : generator_state(gen)) {
    Tensor as_number = t.dtype() == kBool ? t.to(kInt64) : t;
    gathered.emplace_back(name, distributed::all_gather(as_number));
  }
  return gathered;
}

void set_generator_state_of_rank(Generator& gen, const NamedTensors& gathered) {
  NamedTensors mine;
  for (const auto& [name, t] : gathered) {
    CPPGRAD_CHECK(t.dim() >= 1 && t.size(0) == distributed::world_size(),
                  "checkpoint: '{}' holds the generator states of {} processes, and this run has {}; resume on the "
                  "same number of processes",
                  name, t.dim() >= 1 ? t.size(0) : 0, distributed::world_size());
    Tensor row = t.select(0, distributed::rank()).contiguous();
    mine.emplace_back(name, name == "has_cached_normal" ? row.to(kBool) : row);
  }
  set_generator_state(gen, mine);
}

}  // namespace examples
