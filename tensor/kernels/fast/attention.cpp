// The fast form of attention (skip it on a first reading: its reference, the materialising
// softmax(scale · Q·Kᵀ + mask) · V of nn/functional.cpp, computes the same numbers).
//
// Memory-efficient attention: softmax(scale · Q·Kᵀ + mask) · V computed block by block, the
// recipe of FlashAttention (Dao et al. 2022), on the CPU with BLAS for the block products.
//
// For one query row the output is Σ_j p_j v_j / Σ_j p_j with p_j = exp(s_j − m), m the row's
// max. Scanning the keys a block at a time, a running max m and sum l are kept; when a new
// block raises the max to m', what was summed so far is rescaled by exp(m − m'):
//
//   l' = l · exp(m − m') + Σ_block exp(s_j − m'),   O' = O · exp(m − m') + Σ_block exp(s_j − m') v_j
//
// so the (T × S) matrix of weights never exists: memory is O(T·d) plus one block per thread.
// The forward keeps each row's log-sum-exp L = m + log l; the backward rebuilds each block's
// weights from it, p_ij = exp(s_ij − L_i), and with D_i = Σ_c dO_ic·O_ic (= Σ_j p_ij dp_ij):
//
//   dV = Pᵀ·dO,   dP = dO·Vᵀ,   dS = P ⊙ (dP − D),   dQ = scale · dS·K,   dK = scale · dSᵀ·Q
//
// Dropout on the weights uses the counter-based stream of kernels::dropout_mask with one key,
// so element (n, i, j) of the weights gets the very mask dropout_mask would give it, and the
// backward regenerates it instead of storing it. A row's words are consecutive, so its factors
// come from dropout's vectorised row (fast/dropout.h): drawn one at a time, they took as long
// as the rest of the tile's work outside the products.
//
// Grouped key/value heads (GQA, MQA): query slice n reads key/value slice n / r, r = h / g the
// query heads per key/value head, through a pointer: nothing is repeated. In the backward one
// item owns a key/value slice and runs its r query slices one after the other, so the gradient
// of a shared key, Σ over its r query heads of scale·dSᵀ·Q, accumulates in place without a race
// (the backward's parallelism is batch × g items).
//
// Windows, ALiBi and a decoding offset are computed per tile as the causal mask is: a query
// block scans only the keys its window may see, and a key block only the queries that may see
// it, so tiles a window excludes are skipped like the tiles above the diagonal.
//
// Where the time goes: the seven block products per tile (two forward, five backward: the
// materialising path does six, it keeps S) are BLAS calls on 128 × 256 tiles, which run near
// sgemm's peak; the exp of each tile is the vectorised float exp of softmax (exp_rows.h); a
// causal forward stops each query block at its last visible key, and a causal backward starts
// each key block's queries at its first key and stops each query block's keys at its last
// query's, so no tile, nor any part of a tile, above the diagonal is computed. The block loops
// are compiled once per vector unit (runtime/simd_clones.h), alike in each: their row loops are
// elementwise, a max, or sums in a fixed order (row_sum.h). (A row's sum of exps is exp_rows.h's,
// added in the order of the vector unit's width, as softmax's is.)
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/profile.h"
#include "runtime/simd_clones.h"
#include "tensor/autocast.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/kernels/bf16_hardware.h"
#include "tensor/kernels/counter_rng.h"
#include "tensor/kernels/fast/attention.h"
#include "tensor/kernels/fast/bf16_round.h"
#include "tensor/kernels/fast/dropout.h"
#include "tensor/kernels/fast/exp_rows.h"
#include "tensor/kernels/fast/row_sum.h"
#include "tensor/kernels/gemm.h"
#include "tensor/kernels/traced.h"

namespace cppgrad::kernels::fast {

namespace {

// The tile: 128 queries by 256 keys. Small tiles spend their time in BLAS's per-call packing,
// large ones fall out of the cache (the sizes tried: results/2026-11-23-attention.md).
constexpr int64_t kQueryBlock = 128, kKeyBlock = 256;

// A block's scratch tiles, from the caching allocator: a heap block this large would be mapped
// fresh from the kernel at every block and its pages faulted in.
template <class T>
class Scratch {
 public:
  explicit Scratch(int64_t count) : bytes_(static_cast<size_t>(count) * sizeof(T)) {
    data_ = static_cast<T*>(allocate_bytes(bytes_));
  }
  ~Scratch() { deallocate_bytes(data_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* data() { return data_; }

 private:
  size_t bytes_;
  T* data_;
};

// A tensor's (..., T, d) slices as rows: row i of slice n (the leading dims flattened) starts at
// base + slice[n] + i·ld. The rows are read where they are, at any stride: the heads of a
// (B, T, H·d) projection seen as (B, H, T, d) are not copied, nor is the output gathered back.
template <class T>
struct Rows {
  T* base = nullptr;
  std::vector<int64_t> slice;
  int64_t ld = 0;
  T* row(int64_t n, int64_t i) const { return base + slice[static_cast<size_t>(n)] + i * ld; }
};

// Each leading index's offset from t's element [0, ..., 0], in row-major order of the leading
// dims (all but the last two): the elementwise kernels' odometer (tensor/iterate.h) walks them.
std::vector<int64_t> slice_offsets(const Tensor& t) {
  const Shape lead(t.shape().begin(), t.shape().end() - 2);
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(numel(lead)));
  StridedLoop<1>(lead, {Strides(t.strides().begin(), t.strides().end() - 2)})
      .for_each_run([&](const auto& start, int64_t n, const auto& inner) {
        for (int64_t i = 0; i < n; ++i) offsets.push_back(start[0] + i * inner[0]);
      });
  return offsets;
}

// t's rows in place when BLAS can read them so (the last dim contiguous, rows at least a row
// apart), else those of a contiguous copy, which `t` then holds.
template <class T>
Rows<T> rows_of(Tensor& t) {
  const bool readable = t.size(-1) <= 1 || t.stride(-1) == 1;
  if (!readable || t.stride(-2) < std::max<int64_t>(1, t.size(-1))) t = contiguous(t);
  return {t.data<std::remove_const_t<T>>(), slice_offsets(t), t.stride(-2)};
}

// A new (..., H, T, d) tensor laid out in memory as `like` is: heads inside positions, as
// (..., T, H, d), when like's are (a projection's heads), else contiguous. So an output or a
// gradient goes back to its projection's layout without a copy.
Tensor new_laid_out_as(const Tensor& like, Shape shape, bool zeroed) {
  const auto nd = static_cast<int64_t>(shape.size());
  const bool heads_inside = nd >= 3 && like.size(-3) > 1 && like.size(-2) > 1 && like.stride(-3) < like.stride(-2);
  if (heads_inside) std::swap(shape[nd - 3], shape[nd - 2]);
  Tensor t = zeroed ? zeros(shape, like.dtype()) : empty(shape, like.dtype());
  return heads_inside ? transpose(t, nd - 3, nd - 2) : t;
}

// ---- the tiles' products, in autocast too -------------------------------------------------------
// Inside an autocast region (tensor/autocast.h) every float32 product multiplies its operands
// rounded to bfloat16, these too. Operands held as H: T itself, or bfloat16 for the hardware
// kernel; `rounds` says whether they were rounded (as float32 values for Kernel::RoundedFloat32).
// q, k, v and the output's gradient are rounded once a call, each computed tile (the weights P,
// and dS) once for the products that read it: not every operand at every product, which rounded
// K and V again for every query block, and Q and dO again for every key block.
template <class H, class T>
void tile_product(bool rounds, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const H* a, int64_t lda, const H* b,
                  int64_t ldb, T* c, int64_t ldc, T beta) {
  profile::Scope scope(detail::product_name(rounds, m, n, k));
  if constexpr (std::is_same_v<H, bfloat16>)
    hardware_bfloat16_gemm()->gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta);
  else
    detail::blas_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta);
  if (rounds) detail::count_autocast(1, 0, 0);
}

// A computed rows × cols tile as the products read it: itself, or rounded into `held`.
template <class H, class T>
const H* tile_operand(bool rounds, const T* tile, int64_t rows, int64_t cols, H* held) {
  if constexpr (std::is_same_v<H, T>)
    if (!rounds) return tile;
  if constexpr (std::is_same_v<T, float>) {
    round_rows(tile, rows, cols, cols, held);
    detail::count_autocast(0, 1, rows * cols * static_cast<int64_t>(sizeof(H)));
  }
  return held;
}

// t's rows as the products read them: in place, or (rounds) rounded once into a dense copy that
// `copy` keeps; or `earlier`, when it is such a copy of t made before (the forward's, given back
// to the backward).
template <class H, class T>
Rows<const H> held_rows(Tensor& t, bool rounds, Tensor& copy, const Tensor& earlier = {}) {
  const Rows<const T> rows = rows_of<const T>(t);
  if constexpr (std::is_same_v<H, T>)
    if (!rounds) return rows;
  Rows<const H> held;
  if constexpr (std::is_same_v<T, float>) {
    const int64_t slices = static_cast<int64_t>(rows.slice.size()), r = t.size(-2), c = t.size(-1);
    const DType as = std::is_same_v<H, bfloat16> ? kBFloat16 : kFloat32;
    if (earlier.defined() && earlier.dtype() == as && earlier.numel() == slices * r * c) {
      copy = earlier;
    } else {
      CPPGRAD_PROFILE_SCOPE("bf16 rounding");  // as autocast's products' (bf16_gemm.cpp)
      copy = empty({slices * r * c}, as);
      H* to = copy.data<H>();
      parallel_for(slices, r * c, [&](int64_t n) { round_rows(rows.row(n, 0), r, c, rows.ld, to + n * r * c); });
      detail::count_autocast(0, 1, slices * r * c * static_cast<int64_t>(sizeof(H)));
    }
    held = {copy.data<H>(), {}, std::max<int64_t>(c, 1)};
    for (int64_t n = 0; n < slices; ++n) held.slice.push_back(n * r * c);
  }
  return held;
}

// Everything a block needs to know about the problem, flattened to N = Π leading dims of q.
template <class T, class H>
struct Problem {
  int64_t N, Tq, S, d, dv;
  int64_t group = 1;    // r: query slices per key/value slice (query slice n reads slice n / r)
  int64_t heads = 1;    // h, the query heads (dim −3 of q): slice n is head n % h, for ALiBi
  Rows<const H> q, k, v;  // (N, Tq, d), (N / r, S, d), (N / r, S, dv), as the products read them
  bool rounds = false;    // autocast: rounded to bfloat16 (tile_product)
  Tensor q_copy, k_copy, v_copy;  // their rounded copies
  // The mask as an additive float or a bool (true = hidden), read through strides so that a
  // broadcast (T, S) mask is never expanded in memory. mask_offset[n] is slice n's base.
  Tensor mask;  // holds the (expanded, converted) mask's storage while the pointers below are used
  const T* add_mask = nullptr;
  const bool* bool_mask = nullptr;
  std::vector<int64_t> mask_offset;
  int64_t mask_stride_t = 0, mask_stride_s = 0;
  bool causal = false;
  T scale = 1;
  int64_t offset = 0;          // query i stands at key position i + offset
  int64_t window = 0;          // > 0: keys with |i + offset − j| ≥ window hidden
  std::vector<double> alibi;   // one slope per head, or empty
  // Dropout on the weights: keep with probability 1 − p, scaled by 1/(1 − p).
  bool dropout = false;
  uint64_t key = 0, threshold = 0;
  std::vector<uint64_t> by_example;  // not empty: a key per example of slices_per_example slices
  int64_t slices_per_example = 1;
  T keep_scale = 1;

  const H* keys(int64_t n, int64_t j0) const { return k.row(n / group, j0); }
  const H* values(int64_t n, int64_t j0) const { return v.row(n / group, j0); }

  // Turns a tile of raw products q_i·k_j (queries i0.., keys j0..; `rows` × `cols`, row-major)
  // into masked scores: scale · q·k + the float mask − ALiBi's slope · distance, -inf where
  // hidden (bool mask, causal: key j > query position i + offset, or outside the window).
  void scores(int64_t n, int64_t i0, int64_t rows, int64_t j0, int64_t cols, T* tile) const {
    constexpr T kMinusInf = -std::numeric_limits<T>::infinity();
    const double slope = alibi.empty() ? 0.0 : alibi[static_cast<size_t>(n % heads)];
    for (int64_t r = 0; r < rows; ++r) {
      T* row = tile + r * cols;
      const int64_t i = i0 + r, position = i + offset;
      if (add_mask) {
        const T* m = add_mask + mask_offset[n] + i * mask_stride_t + j0 * mask_stride_s;
        for (int64_t c = 0; c < cols; ++c) row[c] = row[c] * scale + m[c * mask_stride_s];
      } else {
        for (int64_t c = 0; c < cols; ++c) row[c] *= scale;
      }
      if (!alibi.empty())
        for (int64_t c = 0; c < cols; ++c)
          row[c] -= static_cast<T>(slope * static_cast<double>(std::abs(position - (j0 + c))));
      if (bool_mask) {
        const bool* hidden = bool_mask + mask_offset[n] + i * mask_stride_t + j0 * mask_stride_s;
        for (int64_t c = 0; c < cols; ++c)
          if (hidden[c * mask_stride_s]) row[c] = kMinusInf;
      }
      const auto [visible_first, visible_last] = visible_keys(i);
      const int64_t first = std::max(j0, visible_first), last = std::max(first, std::min(j0 + cols, visible_last));
      for (int64_t c = 0; c < std::min(cols, first - j0); ++c) row[c] = kMinusInf;
      for (int64_t c = std::max<int64_t>(0, last - j0); c < cols; ++c) row[c] = kMinusInf;
    }
  }
  // The keys query i may see by position, first ≤ j < last (none where last ≤ first): causal,
  // j ≤ i + offset; a window, |i + offset − j| < window (a mask or ALiBi then hides or weighs keys
  // inside it). Both bounds grow with i.
  std::pair<int64_t, int64_t> visible_keys(int64_t i) const {
    const int64_t position = i + offset;
    int64_t first = 0, last = S;
    if (causal) last = std::min(last, position + 1);
    if (window > 0) first = std::max(first, position - window + 1), last = std::min(last, position + window);
    return {first, last};
  }
  // How many of a tile row's keys j0, …, j0 + cols − 1 come before the last one query i may see:
  // the rest of the row is hidden (-inf), so its weights are 0 without an exp or a dropout draw.
  int64_t visible_prefix(int64_t i, int64_t j0, int64_t cols) const {
    return std::clamp<int64_t>(visible_keys(i).second - j0, 0, cols);
  }
  // The dropout factors of weights (n, i, j0), …, (n, i, j0 + cols − 1) into `factors`: 0 or
  // 1/(1 − p), as dropout_mask on (N, Tq, S), or keyed by example, as example_dropout_mask: words
  // (n mod slices_per_example, i, j) of example n / slices_per_example's stream. Either way the
  // row's words are consecutive, so one vectorised call draws them (fast/dropout.h).
  void dropout_row(int64_t n, int64_t i, int64_t j0, int64_t cols, T* factors) const {
    if (!by_example.empty()) {
      const int64_t b = n / slices_per_example;
      dropout_factors(cols, example_word(n - b * slices_per_example, i, j0), by_example[static_cast<size_t>(b)],
                      threshold, keep_scale, factors);
      return;
    }
    dropout_factors(cols, static_cast<uint64_t>((n * Tq + i) * S + j0), key, threshold, keep_scale, factors);
  }
  // The keys queries i0..i1 − 1 may see, [begin, end): the tiles above the diagonal (causal) and
  // outside the window are skipped.
  std::pair<int64_t, int64_t> key_range(int64_t i0, int64_t i1) const {
    const int64_t begin = visible_keys(i0).first;
    return {begin, std::max(begin, visible_keys(i1 - 1).second)};
  }
  // The queries that may see some key of j0..j1 − 1, [begin, end).
  std::pair<int64_t, int64_t> query_range(int64_t j0, int64_t j1) const {
    int64_t begin = 0, end = Tq;
    if (causal) begin = std::max<int64_t>(begin, j0 - offset);
    if (window > 0) begin = std::max(begin, j0 - offset - window + 1), end = std::min(end, j1 - 1 - offset + window);
    begin = std::min(begin, Tq);
    return {begin, std::max(begin, end)};
  }
};

template <class T>
bool has_nan(const T* row, int64_t n) {
  for (int64_t c = 0; c < n; ++c)
    if (row[c] != row[c]) return true;
  return false;
}

// Queries i0..i1 of slice n against every key they may see, a key block at a time.
template <class T, class H>
CPPGRAD_SIMD_CLONES void forward_block(const Problem<T, H>& P, int64_t n, int64_t i0, int64_t i1, const Rows<T>& out,
                                       T* lse) {
  constexpr T kMinusInf = -std::numeric_limits<T>::infinity();
  const int64_t rows = i1 - i0, kb = kKeyBlock;
  Scratch<T> s(rows * kb);
  Scratch<H> held(P.rounds ? rows * kb : 1);
  std::vector<T> factors(P.dropout ? static_cast<size_t>(kb) : 0);
  std::vector<T> m(static_cast<size_t>(rows), kMinusInf);
  std::vector<double> l(static_cast<size_t>(rows), 0.0);
  T* o = out.row(n, i0);  // this block's output rows, used as the accumulator
  const int64_t ldo = out.ld;
  for (int64_t r = 0; r < rows; ++r) std::fill(o + r * ldo, o + r * ldo + P.dv, T(0));
  const H* q = P.q.row(n, i0);
  const auto [key_begin, key_end] = P.key_range(i0, i1);
  for (int64_t j0 = key_begin; j0 < key_end; j0 += kb) {
    const int64_t cols = std::min(kb, key_end - j0);
    tile_product(P.rounds, false, true, rows, cols, P.d, q, P.q.ld, P.keys(n, j0), P.k.ld, s.data(), cols,
                 T(0));  // Q_i·K_jᵀ
    P.scores(n, i0, rows, j0, cols, s.data());
    for (int64_t r = 0; r < rows; ++r) {
      T* row = s.data() + r * cols;
      T new_max = std::max(m[r], contiguous_row_max(row, cols));  // NaN skipped: looked for apart
      if (m[r] != m[r]) new_max = m[r];
      if (new_max == kMinusInf) {
        if (!has_nan(row, cols)) {  // every key so far hidden
          std::fill(row, row + cols, T(0));
          continue;
        }
        new_max = std::numeric_limits<T>::quiet_NaN();  // a NaN score makes the whole row NaN
      }
      const T rescale = std::exp(m[r] - new_max);  // exp(-inf) = 0 on the first visible block
      const int64_t live = P.visible_prefix(i0 + r, j0, cols);
      const double block_sum = exp_shifted_row(row, cols, new_max, live);
      if (P.dropout) {  // the normaliser counts dropped weights too
        P.dropout_row(n, i0 + r, j0, live, factors.data());
        for (int64_t c = 0; c < live; ++c) row[c] *= factors[c];
      }
      l[r] = l[r] * rescale + block_sum;
      m[r] = new_max;
      if (rescale != T(1))
        for (int64_t c = 0; c < P.dv; ++c) o[r * ldo + c] *= rescale;
    }
    const H* weights = tile_operand(P.rounds, s.data(), rows, cols, held.data());
    tile_product(P.rounds, false, false, rows, P.dv, cols, weights, cols, P.values(n, j0), P.v.ld, o, ldo,
                 T(1));  // O_i += P·V_j
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (l[r] == 0) {  // a fully hidden row: zeros, and a log-sum-exp of -inf that the backward knows
      std::fill(o + r * ldo, o + r * ldo + P.dv, T(0));
      lse[n * P.Tq + i0 + r] = kMinusInf;
      continue;
    }
    const T inv = static_cast<T>(1.0 / l[r]);
    for (int64_t c = 0; c < P.dv; ++c) o[r * ldo + c] *= inv;
    lse[n * P.Tq + i0 + r] = static_cast<T>(m[r] + std::log(l[r]));
  }
}

// Key/value slice m of the backward and the r query slices that read it, one after the other:
// each query slice runs every key block against every query block that sees it, as a slice of
// multi-head attention would, its dQ its own, while dK and dV of the shared slice sum the r
// contributions in place without a race. (A query slice at a time keeps its Q, dO and dQ in
// the cache across key blocks, which running the r slices inside each key block did not:
// results/2026-11-26-gqa.md.)
// dout: the output's gradient as read for D; dout_held: as the products read it.
template <class T, class H>
CPPGRAD_SIMD_CLONES void backward_group(const Problem<T, H>& P, int64_t m, const Rows<const T>& out, const T* lse,
                                        const Rows<const T>& dout, const Rows<const H>& dout_held, const Rows<T>& dq,
                                        const Rows<T>& dk, const Rows<T>& dv) {
  const int64_t qb = kQueryBlock, kb = kKeyBlock;
  std::vector<T> D(static_cast<size_t>(P.Tq));
  Scratch<T> p(qb * kb), dp(qb * kb);
  Scratch<H> p_held(P.rounds ? qb * kb : 1), dp_held(P.rounds ? qb * kb : 1);
  std::vector<T> factors(P.dropout ? static_cast<size_t>(kb) : 0);
  for (int64_t n = m * P.group; n < (m + 1) * P.group; ++n) {
    for (int64_t i = 0; i < P.Tq; ++i) {  // D_i = Σ_c dO_ic·O_ic, in double with eight partial sums
      const T *g = dout.row(n, i), *o = out.row(n, i);
      D[static_cast<size_t>(i)] = static_cast<T>(row_sum(P.dv, [&](int64_t c) { return double(g[c]) * o[c]; }));
    }
    for (int64_t j0 = 0; j0 < P.S; j0 += kb) {
      const int64_t block_end = std::min(P.S, j0 + kb);
      // Only the queries that may see these keys: causal, none before j0 (+ offset); a window, a band.
      const auto [query_begin, query_end] = P.query_range(j0, block_end);
      for (int64_t i0 = query_begin; i0 < query_end; i0 += qb) {
        const int64_t rows = std::min(qb, query_end - i0);
        // And of the block, only the keys these queries may see, as in the forward: a causal
        // query block ends at its last query's key, so no tile part above the diagonal is computed.
        const auto [seen_begin, seen_end] = P.key_range(i0, i0 + rows);
        const int64_t jb = std::max(j0, seen_begin), cols = std::min(block_end, seen_end) - jb;
        if (cols <= 0) continue;
        const H* k = P.k.row(m, jb);
        const H* v = P.v.row(m, jb);
        T* dk_j = dk.row(m, jb);
        T* dv_j = dv.row(m, jb);
        const H* q = P.q.row(n, i0);
        const H* g = dout_held.row(n, i0);
        tile_product(P.rounds, false, true, rows, cols, P.d, q, P.q.ld, k, P.k.ld, p.data(), cols,
                     T(0));  // S = Q_i·K_jᵀ
        tile_product(P.rounds, false, true, rows, cols, P.dv, g, dout_held.ld, v, P.v.ld, dp.data(), cols,
                     T(0));  // dP' = dO_i·V_jᵀ
        P.scores(n, i0, rows, jb, cols, p.data());
        for (int64_t r = 0; r < rows; ++r) {
          T* w = p.data() + r * cols;
          T* dw = dp.data() + r * cols;
          const T L = lse[n * P.Tq + i0 + r], Di = D[i0 + r], scale = P.scale;
          if (L == -std::numeric_limits<T>::infinity()) {  // a fully hidden row: no weight, no gradient
            std::fill(w, w + cols, T(0));
            std::fill(dw, dw + cols, T(0));
            continue;
          }
          const int64_t live = P.visible_prefix(i0 + r, jb, cols);  // P and dS are 0 from there on
          exp_shifted_row(w, cols, L, live);                         // P = exp(S − L)
          std::fill(dw + live, dw + cols, T(0));
          if (!P.dropout) {
            for (int64_t c = 0; c < live; ++c) dw[c] = w[c] * (dw[c] - Di) * scale;  // scale · dS = scale · P ⊙ (dP − D)
            continue;
          }
          P.dropout_row(n, i0 + r, jb, live, factors.data());
          for (int64_t c = 0; c < live; ++c) {
            // dP = dP' ⊙ M (dropout's mask), dS = P ⊙ (dP − D); V was multiplied by P ⊙ M
            dw[c] = w[c] * (dw[c] * factors[c] - Di) * scale;
            w[c] *= factors[c];
          }
        }
        const H* weights = tile_operand(P.rounds, p.data(), rows, cols, p_held.data());
        const H* ds = tile_operand(P.rounds, dp.data(), rows, cols, dp_held.data());
        tile_product(P.rounds, true, false, cols, P.dv, rows, weights, cols, g, dout_held.ld, dv_j, dv.ld,
                     T(1));  // dV_j += (P⊙M)ᵀ·dO_i
        tile_product(P.rounds, true, false, cols, P.d, rows, ds, cols, q, P.q.ld, dk_j, dk.ld,
                     T(1));  // dK_j += scale·dSᵀ·Q_i
        tile_product(P.rounds, false, false, rows, P.d, cols, ds, cols, k, P.k.ld, dq.row(n, i0), dq.ld,
                     T(1));  // dQ_i += scale·dS·K_j
      }
    }
  }
}

// Flattens q (..., h, T, d), k (..., g, S, d), v (..., g, S, dv) and the mask into a Problem.
template <class T, class H>
Problem<T, H> make_problem(Tensor& q, Tensor& k, Tensor& v, const Tensor& mask, bool causal, double scale,
                           const FusedDropout& drop, const FusedPositions& positions, bool rounds,
                           const RoundedOperands& earlier = {}) {
  Problem<T, H> P;
  const int64_t nd = q.dim();
  P.Tq = q.size(-2), P.S = k.size(-2), P.d = q.size(-1), P.dv = v.size(-1);
  P.N = numel(Shape(q.shape().begin(), q.shape().end() - 2));
  P.heads = nd >= 3 ? q.size(-3) : 1;
  if (nd >= 3 && k.dim() == nd && k.size(-3) > 0 && k.size(-3) != P.heads) P.group = P.heads / k.size(-3);
  const int64_t kv_slices = numel(Shape(k.shape().begin(), k.shape().end() - 2));
  CPPGRAD_CHECK(k.dim() == nd && v.dim() == nd && kv_slices * P.group == P.N && P.heads % P.group == 0 &&
                    numel(Shape(v.shape().begin(), v.shape().end() - 2)) == kv_slices,
                "fused_attention: q {}, k {}, v {}: k and v must have q's leading dims, or g heads dividing q's h",
                shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  P.rounds = rounds;
  P.q = held_rows<H, T>(q, rounds, P.q_copy, earlier.q);
  P.k = held_rows<H, T>(k, rounds, P.k_copy, earlier.k);
  P.v = held_rows<H, T>(v, rounds, P.v_copy, earlier.v);
  P.causal = causal;
  P.scale = static_cast<T>(scale);
  P.offset = positions.query_offset;
  P.window = positions.window;
  P.alibi = positions.alibi;
  CPPGRAD_CHECK(P.alibi.empty() || static_cast<int64_t>(P.alibi.size()) == P.heads,
                "fused_attention: {} ALiBi slopes for {} query heads", P.alibi.size(), P.heads);
  if (drop.p > 0) {
    P.dropout = true;
    P.key = drop.key;
    if (!drop.by_example.empty()) {  // the caller checked the layout (kernels::example_layout)
      const auto examples = static_cast<int64_t>(drop.by_example.size());
      CPPGRAD_CHECK(P.N % examples == 0, "fused_attention: {} examples do not split the {} slices of q {}", examples,
                    P.N, shape_str(q.shape()));
      P.by_example = drop.by_example;
      P.slices_per_example = P.N / examples;
    }
    P.threshold = dropout_threshold(drop.p);
    P.keep_scale = static_cast<T>(1.0 / (1.0 - drop.p));
  }
  if (mask.defined()) {
    Shape full(q.shape().begin(), q.shape().end() - 1);
    full.push_back(P.S);  // (..., T, S)
    P.mask = expand(mask.dtype() == kBool ? mask : to(mask, q.dtype()), full);
    const Tensor& m = P.mask;
    if (mask.dtype() == kBool) P.bool_mask = m.data<bool>();
    else P.add_mask = m.data<T>();
    P.mask_stride_t = m.strides()[nd - 2], P.mask_stride_s = m.strides()[nd - 1];
    P.mask_offset = slice_offsets(m);
  }
  return P;
}

// Calls body(T{}, H{}, rounds) for q's dtype T and the tiles' operands (tile_product): bfloat16
// under autocast's oneDNN kernel, rounded float32 under Kernel::RoundedFloat32, else T unrounded.
template <class Body>
void with_tile_operands(const Tensor& q, const char* op, Body&& body) {
  dispatch_floating(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      if (autocast::is_enabled() && autocast::kernel() == autocast::Kernel::OneDnn) return body(T{}, bfloat16{}, true);
      if (autocast::is_enabled() && autocast::kernel() == autocast::Kernel::RoundedFloat32) return body(T{}, T{}, true);
    }
    body(T{}, T{}, false);
  });
}

}  // namespace

FusedAttention fused_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& mask,
                               bool causal, double scale, const FusedDropout& drop,
                               const FusedPositions& positions) {
  // The block products inside are charged to "blas gemm": this scope keeps the rest (the
  // exponentials, the running max and sum, the masks), which would otherwise be "outside kernels".
  CPPGRAD_PROFILE_KERNEL("fused_attention", query, key, value);
  Tensor q = query, k = key, v = value;
  Shape out_shape(q.shape().begin(), q.shape().end() - 1);
  Shape lse_shape = out_shape;
  out_shape.push_back(v.size(-1));
  // The output in q's layout: from a projection's heads, (B, T, H, dv) in memory, which the
  // merge of the heads then reads without a copy.
  FusedAttention result{new_laid_out_as(q, out_shape, false), empty(lse_shape, q.dtype())};
  with_tile_operands(q, "fused_attention", [&](auto t_tag, auto h_tag, bool rounds) {
    using T = decltype(t_tag);
    using H = decltype(h_tag);
    const Problem<T, H> P = make_problem<T, H>(q, k, v, mask, causal, scale, drop, positions, rounds);
    if (rounds) result.rounded = {P.q_copy, P.k_copy, P.v_copy};
    const int64_t blocks = (P.Tq + kQueryBlock - 1) / kQueryBlock;
    Tensor output = result.output;
    const Rows<T> out = rows_of<T>(output);
    T* lse = result.lse.data<T>();
    parallel_for(P.N * blocks, kQueryBlock * P.S * (P.d + P.dv), [&P, blocks, &out, lse](int64_t item) {
      const int64_t i0 = (item % blocks) * kQueryBlock;
      forward_block(P, item / blocks, i0, std::min(P.Tq, i0 + kQueryBlock), out, lse);
    });
  });
  return result;
}

FusedAttentionGrads fused_attention_backward(const Tensor& grad, const Tensor& query, const Tensor& key,
                                             const Tensor& value, const Tensor& mask, const Tensor& output,
                                             const Tensor& lse, bool causal, double scale, const FusedDropout& drop,
                                             const FusedPositions& positions, const RoundedOperands& rounded) {
  CPPGRAD_PROFILE_KERNEL("fused_attention_backward", grad, query, key, value);  // as the forward's
  CPPGRAD_CHECK(grad.shape() == output.shape() && grad.dtype() == output.dtype(),
                "fused_attention_backward: grad {} {} differs from the output {} {}", shape_str(grad.shape()),
                dtype_name(grad.dtype()), shape_str(output.shape()), dtype_name(output.dtype()));
  Tensor q = query, k = key, v = value, g = grad, o = output, L = contiguous(lse);
  // Each gradient in its input's layout, so that it flows back into the projection uncopied.
  FusedAttentionGrads grads{new_laid_out_as(q, q.shape(), true), new_laid_out_as(k, k.shape(), true),
                            new_laid_out_as(v, v.shape(), true)};
  with_tile_operands(q, "fused_attention_backward", [&](auto t_tag, auto h_tag, bool rounds) {
    using T = decltype(t_tag);
    using H = decltype(h_tag);
    const Problem<T, H> P = make_problem<T, H>(q, k, v, mask, causal, scale, drop, positions, rounds, rounded);
    const Rows<const T> out = rows_of<const T>(o), dout = rows_of<const T>(g);
    Tensor dout_copy;
    const Rows<const H> dout_held = held_rows<H, T>(g, rounds, dout_copy);
    const T* lse_p = L.data<T>();
    Tensor dq_t = grads.dq, dk_t = grads.dk, dv_t = grads.dv;
    const Rows<T> dq = rows_of<T>(dq_t), dk = rows_of<T>(dk_t), dv = rows_of<T>(dv_t);
    // One key/value slice (batch entry and key/value head) per item, with the r query slices
    // that read it: each item writes only its own dK and dV, and its query slices' dQ.
    parallel_for(P.N / P.group, P.group * P.Tq * P.S * (P.d + P.dv) * 2, [&](int64_t m) {
      backward_group(P, m, out, lse_p, dout, dout_held, dq, dk, dv);
    });
  });
  return grads;
}

}  // namespace cppgrad::kernels::fast
