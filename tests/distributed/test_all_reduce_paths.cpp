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

// From 64 KiB up, between 2 or 3 ranks, all_reduce runs cppgrad's own ring. Several in flight at
// once, each waited for in another order than it was started (as DDP's buckets may be): every
// message must still meet its own all-reduce's, which the per-call tags guarantee.
TEST_CASE("collectives: ring all-reduces in flight together finish in any order with their own sums") {
  if (world_size() == 1) return;
  std::vector<Tensor> tensors, expected;
  std::vector<Work> works;
  for (int64_t n : {40000, 65537, 16385, 100003}) {  // all >= 64 KiB in float32, none a multiple of 2 or 3
    tensors.push_back(rank_values(n, kFloat32));
    expected.push_back(in_place_reference(tensors.back(), ReduceOp::Sum));
  }
  for (const Tensor& t : tensors) works.push_back(all_reduce_async(t));
  for (int i : {2, 0, 3, 1}) {
    if (rank() == 0) works[static_cast<size_t>(i)].is_completed();  // one rank moves some rounds on early
    works[static_cast<size_t>(3 - i)].wait();
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    CHECK((tensors[i].to(kFloat64) - expected[i].to(kFloat64)).abs().max().item<double>() == 0.0);
}

// With arbitrary floats the order of a sum matters; the ring adds each chunk once, on one rank,
// and sends that rank's bits to the others: every rank ends with identical bits, and between
// 2 ranks they are a + b exactly (IEEE addition is commutative), the sum one process computes.
TEST_CASE("collectives: the ring's float sums are identical on every rank, and a + b between 2 ranks") {
  if (world_size() == 1) return;
  manual_seed(7 + static_cast<uint64_t>(rank()));
  Tensor mine = randn({3, 50000}).transpose(0, 1);  // non-contiguous: reduced in a copy, written back
  Tensor gathered = all_gather(mine.contiguous());   // [N, 50000, 3], every rank's input
  Tensor storage = mine.transpose(0, 1).clone();  // [3, 50000]
  Tensor reduced = storage.transpose(0, 1);        // [50000, 3], a non-contiguous view of it
  all_reduce(reduced);
  Tensor everyone = all_gather(reduced.contiguous());
  auto differ = [](const Tensor& a, const Tensor& b) { return (a - b).abs().max().item<double>(); };
  for (int r = 1; r < world_size(); ++r) CHECK(differ(everyone.select(0, r), everyone.select(0, 0)) == 0.0);
  if (world_size() == 2) CHECK(differ(reduced, gathered.select(0, 0) + gathered.select(0, 1)) == 0.0);
  CHECK(differ(reduced, gathered.sum(0)) < 1e-5);  // any rank count: the sum, to float32 rounding of 3 terms ~ 5
}
