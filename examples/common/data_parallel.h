// What the examples need to train on several processes (mpirun -np N ...), with
// distributed::DistributedDataParallel averaging the gradients.
//
// Every rank draws the same global batch from the same data generator and trains on its own
// rows of it, so N processes see, step for step, the examples one process sees, and a
// checkpoint's data generator is every rank's. Each rank's other generator (dropout) differs,
// so the checkpoint keeps all of them.
#pragma once

#include "checkpoint.h"
#include "distributed/distributed.h"

namespace examples {

// This rank's rows of a global batch (dim 0), cut as evenly as they go (distributed::shard_range).
// (A stand-in for data/'s DistributedSampler, which gives each rank its own indices instead.)
cppgrad::Tensor my_rows(const cppgrad::Tensor& global_batch);

// Every rank's state of `gen`, gathered on every rank (a collective): each tensor of
// generator_state with a leading dim of world_size.
NamedTensors gather_generator_states(const cppgrad::Generator& gen);
// Sets `gen` to this rank's row of what gather_generator_states saved; the checkpoint must
// come from a run of the same world size.
void set_generator_state_of_rank(cppgrad::Generator& gen, const NamedTensors& gathered);

}  // namespace examples
