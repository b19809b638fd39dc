// Collectives against results worked out by hand, for every world size the tests run at.
// Rank r holds base * (r + 1), where base holds 1, 2, 3, ... in storage order; so over W ranks
//   sum = base · W(W+1)/2,   average = base · (W+1)/2,   max = base · W,
// and every value is a small integer (or half of one), exact in float32 too.
#include <doctest/doctest.h>

#include <vector>

#include "cppgrad.h"
#include "distributed/distributed.h"

using namespace cppgrad;
using namespace cppgrad::distributed;

namespace {
// factor · (1, 2, 3, ...) laid out in `shape`, in `dtype`; transposed (a non-contiguous view)
// when asked.
Tensor base(const Shape& shape, DType dtype, bool transposed = false, double factor = 1) {
  Tensor counting = arange(1, static_cast<double>(numel(shape)) + 1, 1, kFloat64) * factor;
  if (!transposed) return counting.reshape(shape).to(dtype);
  Shape swapped = shape;
  std::swap(swapped[0], swapped[1]);
  return counting.reshape(swapped).to(dtype).transpose(0, 1);
}

std::vector<double> values(const Tensor& t) { return t.to(kFloat64).contiguous().to_vector<double>(); }
std::vector<double> scaled(const Tensor& t, double factor) {
  std::vector<double> v = values(t);
  for (double& x : v) x *= factor;
  return v;
}

struct Case {
  Shape shape;
  bool transposed;
};
// Odd sizes (not divisible by 2 or 3 ranks), a scalar, empty tensors, non-contiguous views.
const std::vector<Case> kCases = {{{7}, false}, {{1001}, false}, {{}, false},     {{0}, false},
                                  {{3, 0}, false}, {{3, 5}, false}, {{4, 3}, true}, {{5, 2, 3}, false}};
const std::vector<DType> kDTypes = {kFloat32, kFloat64, kInt64};
}  // namespace

TEST_CASE("collectives: world") {
  CHECK(world_size() >= 1);
  CHECK(rank() >= 0);
  CHECK(rank() < world_size());
  barrier();
  // Every rank reports its rank; the gathered list is 0, 1, ..., W-1.
  Tensor gathered = all_gather(full({}, static_cast<double>(rank()), kInt64));
  std::vector<double> expected;
  for (int r = 0; r < world_size(); ++r) expected.push_back(r);
  CHECK(values(gathered) == expected);
}

TEST_CASE("collectives: all_reduce sum, average and max, every dtype and shape, blocking and not") {
  const double w = world_size(), mine = rank() + 1;
  for (DType dtype : kDTypes) {
    for (const Case& c : kCases) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(c.shape));
      CAPTURE(c.transposed);
      Tensor expected_base = base(c.shape, dtype, c.transposed);

      Tensor x = base(c.shape, dtype, c.transposed, mine);
      if (x.numel() > 0) CHECK(x.is_contiguous() == !c.transposed);  // (an empty [3,0] reports non-contiguous)
      const uint64_t version = x.version();
      all_reduce(x, ReduceOp::Sum);
      CHECK(values(x) == scaled(expected_base, w * (w + 1) / 2));
      if (is_initialized() && x.numel() > 0) CHECK(x.version() > version);

      x = base(c.shape, dtype, c.transposed, mine);
      all_reduce(x, ReduceOp::Max);
      CHECK(values(x) == scaled(expected_base, w));

      if (dtype != kInt64) {
        x = base(c.shape, dtype, c.transposed, mine);
        Work work = all_reduce_async(x, ReduceOp::Average);
        work.wait();
        work.wait();  // a second wait is harmless
        CHECK(values(x) == scaled(expected_base, (w + 1) / 2));
      }
    }
  }
}

TEST_CASE("collectives: several non-blocking all-reduces in flight, waited in reverse") {
  const double w = world_size(), mine = rank() + 1;
  std::vector<Tensor> xs;
  std::vector<Work> works;
  for (int i = 0; i < 4; ++i) {
    xs.push_back(base({100 + i}, kFloat64, false, mine * (i + 1)));
    works.push_back(all_reduce_async(xs.back(), ReduceOp::Sum));
  }
  for (int i = 3; i >= 0; --i) works[i].wait();
  for (int i = 0; i < 4; ++i) CHECK(values(xs[i]) == scaled(base({100 + i}, kFloat64), (i + 1) * w * (w + 1) / 2));
  // A Work dropped unwaited waits in its destructor, so the result is there afterwards.
  Tensor y = base({9}, kFloat32, false, mine);
  { Work dropped = all_reduce_async(y); }
  CHECK(values(y) == scaled(base({9}, kFloat32), w * (w + 1) / 2));
}

TEST_CASE("collectives: broadcast from every root") {
  for (DType dtype : kDTypes) {
    for (const Case& c : kCases) {
      for (int root = 0; root < world_size(); ++root) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(shape_str(c.shape));
        CAPTURE(root);
        Tensor x = base(c.shape, dtype, c.transposed, rank() + 1);
        if (root % 2 == 0) {
          broadcast(x, root);
        } else {
          Work work = broadcast_async(x, root);
          work.wait();
        }
        CHECK(values(x) == scaled(base(c.shape, dtype, c.transposed), root + 1));
      }
    }
  }
}

TEST_CASE("collectives: all_gather stacks every rank's tensor in rank order") {
  for (DType dtype : kDTypes) {
    for (const Case& c : kCases) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(c.shape));
      Tensor mine = base(c.shape, dtype, c.transposed, rank() + 1);
      Tensor gathered = all_gather(mine);
      Shape expected_shape{world_size()};
      expected_shape.insert(expected_shape.end(), c.shape.begin(), c.shape.end());
      REQUIRE(gathered.shape() == expected_shape);
      for (int r = 0; r < world_size(); ++r)
        CHECK(values(gathered.select(0, r)) == scaled(base(c.shape, dtype, c.transposed), r + 1));
      // Into a non-contiguous output, without blocking.
      Shape swapped = expected_shape;
      std::swap(swapped[0], swapped.back());
      if (expected_shape.size() >= 2) {
        std::vector<int64_t> perm(expected_shape.size());
        for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
        std::swap(perm[0], perm.back());
        Tensor out = zeros(swapped, dtype).permute(perm);
        REQUIRE(out.shape() == expected_shape);
        Work work = all_gather_async(out, mine);
        work.wait();
        CHECK(values(out) == values(gathered));
      }
    }
  }
}

TEST_CASE("collectives: reduce_scatter leaves each rank its share of dim 0, uneven shares included") {
  const double w = world_size();
  for (DType dtype : kDTypes) {
    for (Shape shape : {Shape{7}, Shape{5, 3}, Shape{1, 4}, Shape{0, 2}, Shape{6, 2}}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(shape));
      Tensor input = base(shape, dtype, false, rank() + 1);
      const Range mine = shard_range(shape[0], rank(), world_size());
      Tensor expected = base(shape, dtype).narrow(0, mine.begin, mine.end - mine.begin);
      Tensor out = reduce_scatter(input, ReduceOp::Sum);
      CHECK(out.shape()[0] == mine.end - mine.begin);
      CHECK(values(out) == scaled(expected, w * (w + 1) / 2));
      out = reduce_scatter(input, ReduceOp::Max);
      CHECK(values(out) == scaled(expected, w));
      if (dtype != kInt64) {
        Work work = reduce_scatter_async(out, input, ReduceOp::Average);
        work.wait();
        CHECK(values(out) == scaled(expected, (w + 1) / 2));
      }
    }
  }
}

TEST_CASE("collectives: shard_range cuts as evenly as it goes") {
  auto lengths = [](int64_t n, int world) {
    std::vector<int64_t> out;
    int64_t next = 0;
    for (int r = 0; r < world; ++r) {
      Range range = shard_range(n, r, world);
      CHECK(range.begin == next);
      next = range.end;
      out.push_back(range.end - range.begin);
    }
    CHECK(next == n);
    return out;
  };
  CHECK(lengths(10, 4) == std::vector<int64_t>{3, 3, 2, 2});
  CHECK(lengths(2, 3) == std::vector<int64_t>{1, 1, 0});
  CHECK(lengths(0, 2) == std::vector<int64_t>{0, 0});
  CHECK_THROWS_AS(shard_range(5, 2, 2), Error);
}

TEST_CASE("collectives: bad arguments are refused on every rank before any message is sent") {
  Tensor ints = tensor({1.0, 2.0}).to(kInt64);
  CHECK_THROWS_WITH_AS(all_reduce(ints, ReduceOp::Average), doctest::Contains("Average of a int64"), Error);
  CHECK_THROWS_WITH_AS(all_reduce(full({2}, 1.0, kBool)), doctest::Contains("dtype bool"), Error);
  CHECK_THROWS_WITH_AS(broadcast(tensor({1.0}), world_size()), doctest::Contains("root"), Error);
  CHECK_THROWS_WITH_AS(all_gather(zeros({3}), tensor({1.0, 2.0})), doctest::Contains("all_gather: output [3]"), Error);
  CHECK_THROWS_WITH_AS(reduce_scatter(full({}, 1.0)), doctest::Contains("0-dim"), Error);
  CHECK_THROWS_AS(all_reduce(Tensor()), Error);
}
