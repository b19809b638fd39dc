// Pairwise summation, the sums of reduce.cpp (and of its fast form, fast/reduce.cpp). A first
// reading skips this file.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace cppgrad::kernels {

// Pairwise summation of a stream, `width` sums side by side. Values are added in order into
// blocks of kBlock = 16; each finished block is merged with the earlier ones as a binary counter
// carries (block 2 joins block 1, block 4 joins the pair 3+(1+2)... ), so every partial sum
// adds two parts of about equal size. The rounding error then grows with log2(n / kBlock)
// instead of n: a float64 sum of 10^6 × 0.1 is off by 3e-16 relative, not 1.3e-11 (blocks of 128
// would leave 2.3e-15: a block of equal values rounds the same way at every step). The order
// of additions depends only on n, so the same bits on any thread count and any layout.
class PairwiseSum {
 public:
  static constexpr int64_t kBlock = 16;
  explicit PairwiseSum(int64_t width) : width_(width), block_(static_cast<size_t>(width), 0.0) {}

  void reset() {  // back to empty, keeping the memory
    std::fill(block_.begin(), block_.end(), 0.0);
    in_block_ = 0;
    blocks_done_ = 0;
  }
  double* block() { return block_.data(); }  // add the next value of column j into block()[j]
  void end_value() {                         // one value of every column has been added
    if (++in_block_ == kBlock) carry();
  }
  // Adds rows of a (rows, width) matrix, each row one value of every column, in order; row i
  // starts at x + i·ld (ld = width: the rows one after the other; more: columns of a wider one).
  // add_rows_into(x, n, width, ld, acc) adds n such rows into the accumulators acc[0..width): the
  // reference's loop over a contiguous run (reduce.cpp), the fast form's vectorised one
  // (fast/reduce.cpp), the same additions either way.
  template <class T, class AddRows>
  void add_rows(const T* x, int64_t rows, int64_t ld, AddRows add_rows_into) {
    while (rows > 0) {
      const int64_t take = std::min(rows, kBlock - in_block_);
      add_rows_into(x, take, width_, ld, block_.data());
      x += take * ld;
      rows -= take;
      in_block_ += take;
      if (in_block_ == kBlock) carry();
    }
  }
  void totals(double* out) {  // the sums so far, column by column
    for (int64_t j = 0; j < width_; ++j) out[j] = block_[j];
    for (size_t level = 0; level < levels_.size(); ++level)
      if (blocks_done_ >> level & 1)
        for (int64_t j = 0; j < width_; ++j) out[j] = levels_[level][j] + out[j];
  }

 private:
  void carry() {
    size_t level = 0;
    for (uint64_t done = blocks_done_; done & 1; done >>= 1, ++level)
      for (int64_t j = 0; j < width_; ++j) block_[j] = levels_[level][j] + block_[j];
    if (level == levels_.size()) levels_.emplace_back(static_cast<size_t>(width_));
    std::swap(levels_[level], block_);
    std::fill(block_.begin(), block_.end(), 0.0);
    in_block_ = 0;
    ++blocks_done_;
  }

  int64_t width_;
  std::vector<double> block_;
  int64_t in_block_ = 0;
  uint64_t blocks_done_ = 0;               // bit l set: levels_[l] holds the sum of 2^l blocks
  std::vector<std::vector<double>> levels_;
};

}  // namespace cppgrad::kernels
