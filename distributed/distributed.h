// cppgrad's distributed floor, in one header: the process group, collectives on tensors,
// DistributedDataParallel, ZeroRedundancyOptimizer and the collectives' watchdog
// (set_collective_timeout). Link cppgrad::distributed (which brings MPI); the core library,
// cppgrad::cppgrad, never links MPI.
#pragma once

#include "process_group.h"
#include "collectives.h"
#include "ddp.h"
#include "watchdog.h"
#include "zero.h"
