// The graph-free kernels: tensors in, tensors out, no autograd.
//
// autograd/ wraps each of these in a differentiable op; users normally call the Tensor methods
// instead. Every kernel checks its arguments and throws cppgrad::Error naming itself. The fast
// forms (fused or vectorised kernels) are declared in kernels/fast/*.h: skip them on a first
// reading; reference mode (runtime/reference_mode.h) runs without them.
#pragma once

#include <algorithm>
#include <array>
#include <vector>

#include "tensor.h"

namespace cppgrad::kernels {

// ---- views (tensor/kernels/views.cpp): new TensorImpl, same Storage ------------------------
Tensor as_strided(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset);
Tensor alias(const Tensor& t);  // a new handle on the same data, with no autograd state
Tensor view(const Tensor& t, const Shape& shape);
Tensor reshape(const Tensor& t, const Shape& shape);
Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& t, const std::vector<int64_t>& dims);
Tensor squeeze(const Tensor& t);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step);
// The end that gives slice() `count` elements from `start` by `step`: one past the last, which
// start + count * step would overflow for a huge step. The last must be a valid index.
inline int64_t slice_end(int64_t start, int64_t count, int64_t step) {
  return count == 0 ? start : start + (count - 1) * step + 1;
}
Tensor select(const Tensor& t, int64_t dim, int64_t index);
Tensor expand(const Tensor& t, const Shape& shape);
// Resolves one -1 in a requested shape and checks the element count ("reshape"/"view" name it).
Shape infer_shape(const Shape& requested, int64_t numel, std::string_view op);
// The strides that view `t` as `shape` without copying, in `out`; false when impossible.
bool view_strides(const Tensor& t, const Shape& shape, Strides& out);

// ---- copies and conversions (tensor/kernels/copy.cpp) --------------------------------------
void copy_(const Tensor& dst, const Tensor& src);  // broadcasts src, converts dtype
Tensor contiguous(const Tensor& t);
Tensor clone(const Tensor& t);
Tensor to(const Tensor& t, DType dtype);
void fill_(const Tensor& t, double value);
// A number as a 0-d tensor of `dtype`, an op's other operand (x * 2.0, clamp's bounds, x < 1e300):
// converted as PyTorch converts a scalar operand, to ±inf past float32's range, where full()
// refuses such a value, as torch.full does.
Tensor scalar_operand(double value, DType dtype);

// ---- elementwise (tensor/kernels/elementwise.cpp) ------------------------------------------
// One enumerator per row of CPPGRAD_UNARY_OPS (tensor/op_tables.h): Unary::Neg, ..., Unary::Sin;
// unary_name gives the row's name ("sin"), from the rows in the enum's order (likewise below).
#define CPPGRAD_ROW_ENUM(name, Enum, ...) Enum,
#define CPPGRAD_ROW_NAME(name, ...) #name,
enum class Unary { CPPGRAD_UNARY_OPS(CPPGRAD_ROW_ENUM) };
inline const char* unary_name(Unary op) { return std::array{CPPGRAD_UNARY_OPS(CPPGRAD_ROW_NAME)}.at(size_t(op)); }
Tensor unary(Unary op, const Tensor& t);
Tensor pow(const Tensor& t, double exponent);

// One enumerator per row of CPPGRAD_BINARY_OPS: Binary::Add, ..., Binary::Minimum.
enum class Binary { CPPGRAD_BINARY_OPS(CPPGRAD_ROW_ENUM) };
inline const char* binary_name(Binary op) { return std::array{CPPGRAD_BINARY_OPS(CPPGRAD_ROW_NAME)}.at(size_t(op)); }
Tensor binary(Binary op, const Tensor& a, const Tensor& b);
// In place: a = a (op) b, with b broadcast to a's shape; a keeps its dtype.
void binary_(Binary op, const Tensor& a, const Tensor& b);

// The fast form of a unary row's backward where the row has one (relu: 0 where C <= 0, else dC, in one
// pass; tanh and sigmoid likewise; erf, silu and the GELUs vectorised in float32), given what the
// row saves; undefined for the other rows (tensor/kernels/fast/elementwise.cpp).
Tensor unary_backward_fast(Unary op, const Tensor& grad, const Tensor& saved);

// One enumerator per row of CPPGRAD_COMPARE_OPS: Compare::Eq, ..., Compare::Ge.
enum class Compare { CPPGRAD_COMPARE_OPS(CPPGRAD_ROW_ENUM) };
inline const char* compare_name(Compare op) { return std::array{CPPGRAD_COMPARE_OPS(CPPGRAD_ROW_NAME)}.at(size_t(op)); }
Tensor compare(Compare op, const Tensor& a, const Tensor& b);  // bool
Tensor logical_not(const Tensor& t);

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& t, const Tensor& mask, double value);
void masked_fill_(const Tensor& t, const Tensor& mask, double value);

// ---- reductions (tensor/kernels/reduce.cpp); an empty dim list means every dim -------------
// One enumerator per row of CPPGRAD_REDUCTION_OPS (tensor/reduction_table.h): Reduction::Sum, ...
enum class Reduction { CPPGRAD_REDUCTION_OPS(CPPGRAD_ROW_ENUM) };
inline const char* reduction_name(Reduction op) {
  return std::array{CPPGRAD_REDUCTION_OPS(CPPGRAD_ROW_NAME)}.at(size_t(op));
}
#undef CPPGRAD_ROW_NAME
#undef CPPGRAD_ROW_ENUM
Tensor reduce(Reduction op, const Tensor& t, const std::vector<int64_t>& dims, bool keepdim);
inline Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(Reduction::Sum, t, dims, keepdim);
}
inline Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(Reduction::Mean, t, dims, keepdim);
}
Tensor var(const Tensor& t, const std::vector<int64_t>& dims, int64_t correction, bool keepdim);
// var's divisor for n values, as PyTorch's max(0, n - correction): a correction >= n divides by 0
// (inf, or nan for 0/0). Taken in double, as n - correction overflows int64 for a correction near
// INT64_MIN (where PyTorch's own int64 difference wraps, and it returns inf).
inline double var_divisor(int64_t n, int64_t correction) {
  return std::max(0.0, static_cast<double>(n) - static_cast<double>(correction));
}
Tensor sum_to(const Tensor& t, const Shape& shape);
enum class Extremum { Max, Min };
ValuesIndices extremum(Extremum which, const Tensor& t, int64_t dim, bool keepdim);
ValuesIndices extremum_all(Extremum which, const Tensor& t);  // over the flattened tensor

// ---- ordering and sampling (tensor/kernels/sort.cpp) ----------------------------------------
// NaN counts as larger than +inf; equal values keep their input order (ties go to the lower
// index), whichever the direction.
ValuesIndices sort(const Tensor& t, int64_t dim, bool descending);
// The k largest (smallest) along dim, in order, ties to the lower index; k = 0 gives empty rows.
ValuesIndices topk(const Tensor& t, int64_t k, int64_t dim, bool largest);
// num_samples category indices per row of non-negative weights (1-D or 2-D), int64.
Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement, Generator& gen);

// ---- softmax (tensor/kernels/softmax.cpp): max-subtracted ----------------------------------
// A row that is -inf throughout gives zeros (softmax) or -inf (log_softmax); a NaN anywhere in
// a row makes the whole row NaN.
Tensor softmax(const Tensor& t, int64_t dim);
Tensor log_softmax(const Tensor& t, int64_t dim);
// softmax(scale·scores + mask) over the last dim; mask bool (true = hidden) or float (added),
// broadcast to scores; causal hides key j from query i when j > i.
Tensor masked_softmax(const Tensor& scores, const Tensor& mask, bool causal, double scale);
// y ⊙ (g - Σ_dim g ⊙ y): softmax's backward from its output y.
Tensor softmax_backward(const Tensor& output, const Tensor& grad, int64_t dim);
// g - exp(y) ⊙ Σ_dim g: log_softmax's backward from its output y.
Tensor log_softmax_backward(const Tensor& output, const Tensor& grad, int64_t dim);

// ---- layer norm (tensor/kernels/norm.cpp): rows of the last N elements ---------------------
struct LayerNormResult {
  Tensor y, mean, rstd;  // mean and 1/std per row, kept for the backward
};
// Normalises rows of x's last `normalized_dims` dims: layer_norm's fused kernel (its reference is
// the formula as tensor ops, autograd/ops_nn.cpp). Checks x floating, 1 <= normalized_dims <=
// x.dim(), weight and bias undefined or of a row's shape and x's dtype.
LayerNormResult layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight, const Tensor& bias,
                           double eps);
struct LayerNormGrads {
  Tensor dx, dweight, dbias;  // dweight, dbias flat (N)
};
LayerNormGrads layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool need_input, bool need_weight, bool need_bias);

// ---- matmul (tensor/kernels/matmul.cpp): BLAS for float32 / float64 ---------------------------
Tensor matmul(const Tensor& a, const Tensor& b);
// x·Wᵀ + b with the bias added inside the GEMM (b may be undefined).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

// ---- dropout (tensor/kernels/dropout.cpp) ---------------------------------------------------
// Each element 0 with probability p, else 1/(1-p): dropout's mask. Element i's draw is word i
// of the counter-based stream `key` (kernels/counter_rng.h), so any thread count gives the same
// mask, and the backward makes it again from the key instead of keeping it.
Tensor dropout_mask(const Shape& shape, DType dtype, double p, uint64_t key);
// Keyed by example (tensor/keyed_dropout.h): shape's leading dim holds keys.size() examples'
// rows, example-major, and example b's elements take the words of keys[b]'s stream at their
// positions (kernels/counter_rng.h's example_word). An Error naming `op` when the leading dim is
// no multiple of the examples or a position does not fit example_word's fields.
Tensor example_dropout_mask(const char* op, const Shape& shape, DType dtype, double p, const std::vector<uint64_t>& keys);
// An example's elements as rows of `cols`, each `rows` of them under one lead (example_word).
struct ExampleLayout {
  int64_t block = 0, rows = 1, cols = 1;  // block: the elements of one example
};
ExampleLayout example_layout(const char* op, const Shape& shape, int64_t examples);
// The dropout kernels' arguments, checked in this one place for each of them (the fast forms
// too): 0 <= p < 1 (at p = 1 the caller returns zeros) and, when x is given, x floating.
void check_dropout(const char* op, double p, const Tensor& x = {});
Tensor dropout_mask(const Shape& shape, DType dtype, double p, Generator& gen);  // key: gen.next_u64()
// x ⊙ dropout_mask(x's shape, p, key): dropout's forward, and on the gradient its backward.
Tensor dropout(const Tensor& x, double p, uint64_t key);

// ---- joining and indexing (tensor/kernels/index.cpp) ----------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index);
// out = base; out.select(dim, index[i]) += src.select(dim, i) for every i
Tensor index_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);
// The same into `out` itself (an embedding's gradient, made as zeros, filled in place)
void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
Tensor gather(const Tensor& t, int64_t dim, const Tensor& index);
// out = base; out[... index[i,j,k] ...] += src[i,j,k] along dim
Tensor scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);
// zeros(shape) with `src` written at positions start, start+step, ... of `dim` (slice's inverse)
Tensor slice_scatter(const Tensor& src, const Shape& shape, int64_t dim, int64_t start, int64_t step);

}  // namespace cppgrad::kernels
