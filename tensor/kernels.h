// The graph-free kernels: tensors in, tensors out, no autograd.
//
// autograd/ wraps each of these in a differentiable op; users normally call the Tensor methods
// instead. Every kernel checks its arguments and throws cppgrad::Error naming itself.
#pragma once

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
Tensor select(const Tensor& t, int64_t dim, int64_t index);
Tensor expand(const Tensor& t, const Shape& shape);
// Resolves one -1 in a requested shape and checks the element count ("reshape"/"view" name it).
Shape infer_shape(const Shape& requested, int64_t numel, std::string_view op);
// The strides that view `t` as `shape` without copying, or an empty result when impossible.
bool view_strides(const Tensor& t, const Shape& shape, Strides& out);

// ---- copies and conversions (tensor/kernels/copy.cpp) --------------------------------------
void copy_(const Tensor& dst, const Tensor& src);  // broadcasts src, converts dtype
Tensor contiguous(const Tensor& t);
Tensor clone(const Tensor& t);
Tensor to(const Tensor& t, DType dtype);
void fill_(const Tensor& t, double value);

// ---- elementwise (tensor/kernels/elementwise.cpp) ------------------------------------------
// One enumerator per row of CPPGRAD_UNARY_OPS (tensor/op_tables.h): Unary::Neg, ..., Unary::Sin.
#define CPPGRAD_UNARY_ENUM(name, Enum, ...) Enum,
enum class Unary { CPPGRAD_UNARY_OPS(CPPGRAD_UNARY_ENUM) };
#undef CPPGRAD_UNARY_ENUM
const char* unary_name(Unary op);  // the row's name: "sin"
Tensor unary(Unary op, const Tensor& t);
Tensor pow(const Tensor& t, double exponent);

// One enumerator per row of CPPGRAD_BINARY_OPS: Binary::Add, ..., Binary::Minimum.
#define CPPGRAD_BINARY_ENUM(name, Enum, ...) Enum,
enum class Binary { CPPGRAD_BINARY_OPS(CPPGRAD_BINARY_ENUM) };
#undef CPPGRAD_BINARY_ENUM
const char* binary_name(Binary op);  // the row's name: "add"
Tensor binary(Binary op, const Tensor& a, const Tensor& b);
// In place: a = a (op) b, with b broadcast to a's shape; a keeps its dtype.
void binary_(Binary op, const Tensor& a, const Tensor& b);

// The fast form of a unary row's backward where the row has one (relu: dC where C > 0, in one
// pass), given what the row saves; undefined for the other rows (tensor/kernels/fast/elementwise.cpp).
Tensor unary_backward_fast(Unary op, const Tensor& grad, const Tensor& saved);

// One enumerator per row of CPPGRAD_COMPARE_OPS: Compare::Eq, ..., Compare::Ge.
#define CPPGRAD_COMPARE_ENUM(name, Enum, ...) Enum,
enum class Compare { CPPGRAD_COMPARE_OPS(CPPGRAD_COMPARE_ENUM) };
#undef CPPGRAD_COMPARE_ENUM
const char* compare_name(Compare op);  // the row's name: "lt"
Tensor compare(Compare op, const Tensor& a, const Tensor& b);  // bool
Tensor logical_not(const Tensor& t);

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& t, const Tensor& mask, double value);
void masked_fill_(const Tensor& t, const Tensor& mask, double value);

// ---- reductions (tensor/kernels/reduce.cpp); an empty dim list means every dim -------------
Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim);
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim);
Tensor var(const Tensor& t, const std::vector<int64_t>& dims, int64_t correction, bool keepdim);
Tensor sum_to(const Tensor& t, const Shape& shape);
enum class Extremum { Max, Min };
ValuesIndices extremum(Extremum which, const Tensor& t, int64_t dim, bool keepdim);
ValuesIndices extremum_all(Extremum which, const Tensor& t);  // over the flattened tensor

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

// ---- fused attention (tensor/kernels/attention.cpp): never builds the (T, S) weights ----------
// Dropout on the attention weights: probability p, and the key of its counter-based stream
// (the same stream dropout_mask draws, so the weights (..., T, S) get dropout_mask's mask).
struct FusedDropout {
  double p = 0.0;
  uint64_t key = 0;
};
struct FusedAttention {
  Tensor output;  // softmax(scale·q·kᵀ + mask) · v: (..., T, dv)
  Tensor lse;     // each row's log-sum-exp of the masked scores (..., T); -inf for a fully hidden row
};
// q (..., T, d), k (..., S, d), v (..., S, dv) with the same leading dims; mask bool (true =
// hidden) or float (added), broadcastable to (..., T, S), or undefined; causal hides key j > i.
FusedAttention fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                               double scale, const FusedDropout& dropout = {});
struct FusedAttentionGrads {
  Tensor dq, dk, dv;
};
FusedAttentionGrads fused_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& mask, const Tensor& output, const Tensor& lse, bool causal,
                                             double scale, const FusedDropout& dropout = {});

// ---- layer norm (tensor/kernels/norm.cpp): rows of the last N elements ---------------------
struct LayerNormResult {
  Tensor y, mean, rstd;  // mean and 1/std per row, kept for the backward
};
LayerNormResult layer_norm(const Tensor& x, int64_t normalized_numel, const Tensor& weight, const Tensor& bias,
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

// ---- random masks (tensor/factory.cpp) -------------------------------------------------------
// Each element 0 with probability p, else 1/(1-p): dropout's mask, made in one pass. It takes
// one draw from gen and hashes it with each element's index, so any thread count gives the same mask.
Tensor dropout_mask(const Shape& shape, DType dtype, double p, Generator& gen);
// x ⊙ mask and the mask (the same mask dropout_mask would make from the same generator state).
struct DropoutResult {
  Tensor output, mask;
};
DropoutResult dropout(const Tensor& x, double p, Generator& gen);
// The mask of the stream `key` (dropout_mask above draws its key with gen.next_u64()), and x ⊙
// that mask without keeping it: dropout's forward, and on the gradient its backward.
Tensor dropout_mask(const Shape& shape, DType dtype, double p, uint64_t key);
Tensor dropout(const Tensor& x, double p, uint64_t key);
// dropout(relu(x)) in one pass, the mask that of the stream `key`; and its gradient, dy ⊙ mask
// where x > 0, else 0, the mask made again from the key rather than kept.
Tensor relu_dropout(const Tensor& x, double p, uint64_t key);
Tensor relu_dropout_backward(const Tensor& grad, const Tensor& x, double p, uint64_t key);

// ---- joining and indexing (tensor/kernels/index.cpp) ----------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index);
// out = base; out.select(dim, index[i]) += src.select(dim, i) for every i
Tensor index_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);
Tensor gather(const Tensor& t, int64_t dim, const Tensor& index);
// out = base; out[... index[i,j,k] ...] += src[i,j,k] along dim
Tensor scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);
// zeros(shape) with `src` written at positions start, start+step, ... of `dim` (slice's inverse)
Tensor slice_scatter(const Tensor& src, const Shape& shape, int64_t dim, int64_t start, int64_t step);

}  // namespace cppgrad::kernels
