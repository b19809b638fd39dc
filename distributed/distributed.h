// cppgrad's distributed floor, in one header: the process group, collectives on tensors and
// DistributedDataParallel. Link cppgrad::distributed (which brings MPI); the core library,
// cppgrad::cppgrad, never links MPI.
#pragma once

#include "process_group.h"
#include "collectives.h"
#include "ddp.h"
