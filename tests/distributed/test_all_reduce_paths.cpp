// all_reduce calls MPI out of place (so that Open MPI may pick a bandwidth-optimal algorithm
// where it has one); its results must be those of the in-place MPI_Iallreduce it replaced.
// The values are small integers, so every summation order gives the same exact sum and the
// two paths (tree or reduce-scatter + all-gather) must agree bit for bit.
#include <doctest/doctest.h>
#include <mpi.h>

#include <vector>

#include "cppgrad.h"
#include "distributed/distributed.h"

using namespace cppgrad;
using namespace cppgrad::distributed;

namespace {
// Rank r's tensor: (i * 7 + r) mod 13 at flat index i, exact in every dtype.
Tensor rank_values(int64_t n, DType dtype) {
  Tensor values = zeros({n}, kFloat64);
  for (int64_t i = 0; i < n; ++i) values.data<double>()[i] = static_cast<double>((i * 7 + rank()) % 13);
  return values.to(dtype);
}

// The former path: MPI_Iallreduce with MPI_IN_PLACE on a copy, waited for at once.
Tensor in_place_reference(const Tensor& input, ReduceOp op) {
  Tensor buffer = input.clone();
  MPI_Datatype type = input.dtype() == kFloat32 ? MPI_FLOAT : input.dtype() == kFloat64 ? MPI_DOUBLE : MPI_INT64_T;
  MPI_Request request;
  MPI_Iallreduce(MPI_IN_PLACE, buffer.raw_data(), static_cast<int>(buffer.numel()), type,
                 op == ReduceOp::Max ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD, &request);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  if (op == ReduceOp::Average) buffer = buffer / static_cast<double>(world_size());
  return buffer;
}
}  // namespace

TEST_CASE("collectives: all_reduce out of place equals the in-place MPI call, below and above 64 KiB") {
  if (world_size() == 1) return;  // no MPI job, nothing to compare with (all_reduce is a copy)
  // 16 KiB to 1 MiB of float32 (and twice that in float64 and int64): on both sides of the
  // 64 KiB where Open MPI 4.1 may leave the binomial tree (with 4 or more ranks).
  for (int64_t n : {4096, 16383, 16384, 65537, 262144}) {
    for (DType dtype : {kFloat32, kFloat64, kInt64}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Max}) {
        if (op == ReduceOp::Average && dtype == kInt64) continue;  // refused: see test_collectives.cpp
        CAPTURE(n);
        CAPTURE(dtype_name(dtype));
        CAPTURE(static_cast<int>(op));
        Tensor mine = rank_values(n, dtype);
        Tensor expected = in_place_reference(mine, op);
        Tensor blocking = mine.clone();
        all_reduce(blocking, op);
        Tensor async = mine.clone();
        Work work = all_reduce_async(async, op);
        work.wait();
        CHECK((blocking.to(kFloat64) - expected.to(kFloat64)).abs().max().item<double>() == 0.0);
        CHECK((async.to(kFloat64) - expected.to(kFloat64)).abs().max().item<double>() == 0.0);
        CHECK((mine.to(kFloat64) - rank_values(n, dtype).to(kFloat64)).abs().max().item<double>() == 0.0);  // untouched
      }
    }
  }
}
