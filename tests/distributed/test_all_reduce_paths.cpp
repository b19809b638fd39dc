// all_reduce calls MPI out of place (so that Open MPI may pick a bandwidth-optimal algorithm
// where it has one); its results must be those of the in-place MPI_Iallreduce it replaced.
// The values are small integers, so every summation order gives the same exact sum and the
// two paths (tree or reduce-scatter + all-gather) must agree bit for bit.
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cppgrad.h"
#include "distributed/distributed.h"
#include "distributed/internal/collectives_tuning.h"

using namespace cppgrad;
using namespace cppgrad::distributed;
using namespace cppgrad::distributed::tuning;

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
  const RingPipeline before = get_ring_pipeline();
  // The default segments, then segments of 4 KiB two at a time: dozens of segments of the four
  // all-reduces on the way between the same two ranks at once.
  for (RingPipeline pipeline : {before, RingPipeline{4096, 2}}) {
    set_ring_pipeline(pipeline);
    std::vector<Tensor> tensors, expected;
    std::vector<Work> works;
    for (int64_t n : {40000, 65537, 16385, 100003}) {  // all >= 64 KiB in float32, none a multiple of 2 or 3
      tensors.push_back(rank_values(n, kFloat32));
      expected.push_back(in_place_reference(tensors.back(), ReduceOp::Sum));
    }
    for (const Tensor& t : tensors) works.push_back(all_reduce_async(t));
    for (int i : {2, 0, 3, 1}) {
      if (rank() == 0) works[static_cast<size_t>(i)].is_completed();  // one rank moves some segments on early
      works[static_cast<size_t>(3 - i)].wait();
    }
    for (size_t i = 0; i < tensors.size(); ++i)
      CHECK((tensors[i].to(kFloat64) - expected[i].to(kFloat64)).abs().max().item<double>() == 0.0);
  }
  reset_ring_pipeline();
}

// The pipelined ring at its segment boundaries: segment sizes that do and do not divide the
// chunks (a chunk of k segments and one element: a last segment of one element; chunks that
// differ by one element and so by one segment), one segment on the way or several, and one
// segment per chunk. Small integers (exact in every order) must give the MPI reference's
// sum; random floats must give every rank the same bits, and a + b between 2 ranks.
TEST_CASE("collectives: the pipelined ring at segment boundaries, float32 and float64") {
  if (world_size() == 1) return;
  const int n = world_size();
  auto differ = [](const Tensor& a, const Tensor& b) { return (a.to(kFloat64) - b.to(kFloat64)).abs().max().item<double>(); };
  for (DType dtype : {kFloat32, kFloat64}) {
    const int64_t element = dtype == kFloat32 ? 4 : 8;
    for (int64_t segment_bytes : {int64_t{4096}, int64_t{6000}, int64_t{0}}) {
      // 6000 bytes: 1500 float32 or 750 float64, dividing neither the chunks nor 4 KiB pages
      const int64_t segment = segment_bytes > 0 ? segment_bytes / element : 1024;
      const int64_t k = (64 << 10) / (n * segment * element) + 1;  // chunks of k segments: >= 64 KiB in all
      for (int in_flight : {1, 3}) {
        set_ring_pipeline({segment_bytes, in_flight});
        for (int64_t count : {n * k * segment, n * k * segment + 1, n * (k * segment + 1), n * k * segment + n - 1,
                              n * k * segment + segment / 2}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(segment_bytes);
          CAPTURE(in_flight);
          CAPTURE(count);
          REQUIRE(all_reduce_algorithm(count * element, n) == AllReduceAlgorithm::Ring);
          Tensor exact = rank_values(count, dtype);
          Tensor expected = in_place_reference(exact, ReduceOp::Sum);
          all_reduce(exact);
          CHECK(differ(exact, expected) == 0.0);

          manual_seed(11 + static_cast<uint64_t>(rank()));
          Tensor mine = randn({count}).to(dtype);
          Tensor gathered = all_gather(mine);  // [N, count]: every rank's input
          Tensor reduced = mine.clone();
          all_reduce(reduced);
          Tensor everyone = all_gather(reduced);
          for (int r = 1; r < n; ++r) CHECK(differ(everyone.select(0, r), everyone.select(0, 0)) == 0.0);
          if (n == 2) CHECK(differ(reduced, gathered.select(0, 0) + gathered.select(0, 1)) == 0.0);
          // any rank count: the sum, to the rounding of 3 terms of size ~ 5 (float32) or less
          CHECK(differ(reduced, gathered.sum(0)) < (dtype == kFloat32 ? 1e-5 : 1e-13));
        }
      }
    }
  }
  reset_ring_pipeline();
}

// A chunk of at most whole_chunk_bytes moves as one segment, a larger one in segments: the
// sums are exact on both sides of the bound (chunks of exactly 96 KiB, and one element more).
TEST_CASE("collectives: the ring's whole-chunk bound") {
  if (world_size() == 1) return;
  const int n = world_size();
  for (DType dtype : {kFloat32, kFloat64}) {
    const int64_t element = dtype == kFloat32 ? 4 : 8;
    const int64_t bound = 96 << 10;
    set_ring_pipeline({4096, 3, bound});
    for (int64_t count : {n * bound / element, n * bound / element + 1, n * (bound / element + 1)}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(count);
      Tensor exact = rank_values(count, dtype);
      Tensor expected = in_place_reference(exact, ReduceOp::Sum);
      all_reduce(exact);
      CHECK((exact.to(kFloat64) - expected.to(kFloat64)).abs().max().item<double>() == 0.0);
    }
  }
  reset_ring_pipeline();
}

// The transport is read from how the job was started: scripts/mpirun allows Open MPI shared
// memory (btl self,vader), scripts/netns only TCP (btl tcp,self), on one namespace or two.
// The ring's default segments follow it, and set_ring_pipeline overrides them until reset.
TEST_CASE("collectives: the ranks' transport and the ring's default segments") {
  if (world_size() == 1) {
    CHECK(transport() == Transport::SharedMemory);
    return;
  }
  const char* btl = std::getenv("OMPI_MCA_btl");
  REQUIRE_MESSAGE(btl != nullptr, "run through scripts/mpirun or scripts/netns, which set OMPI_MCA_btl");
  const bool tcp_only = std::string(btl).find("vader") == std::string::npos;
  CHECK(transport() == (tcp_only ? Transport::Network : Transport::SharedMemory));
  const RingPipeline pipeline = get_ring_pipeline();
  if (tcp_only) {
    CHECK(network_eager_limit() == 64 << 10);  // Open MPI's default: the scripts do not change it
    CHECK(pipeline.segment_bytes == 32 << 10);
    CHECK(pipeline.in_flight == 8);
    CHECK(pipeline.whole_chunk_bytes == 0);
  } else {
    CHECK(pipeline.segment_bytes == 256 << 10);
    CHECK(pipeline.in_flight == 4);
    CHECK(pipeline.whole_chunk_bytes == 1 << 20);
  }
  set_ring_pipeline({4096, 2});
  CHECK(get_ring_pipeline().segment_bytes == 4096);
  reset_ring_pipeline();
  CHECK(get_ring_pipeline().segment_bytes == pipeline.segment_bytes);
  CHECK(get_ring_pipeline().in_flight == pipeline.in_flight);
}

TEST_CASE("collectives: set_ring_pipeline refuses no segment on the way") {
  CHECK_THROWS_WITH_AS(set_ring_pipeline({4096, 0}), doctest::Contains("in_flight 0"), cppgrad::Error);
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
