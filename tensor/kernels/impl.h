// The kernels' bodies. Each kernel of tensor/kernels.h that does work is defined in dispatch.cpp:
// there it opens the op's profile span (runtime/profile.h), once per op, and runs the body here,
// or, for the elementwise rows outside reference mode, the fast form (fast/elementwise.h). The
// bodies are defined in the kernel files (impl::unary in elementwise.cpp, ...) and carry no
// runtime code of their own. Only the kernel files include this header.
#pragma once

#include <string_view>
#include <vector>

#include "tensor/kernels.h"

namespace cppgrad::kernels {

// A binary op's operands in the result's dtype, expanded to its shape (elementwise.cpp).
struct Operands {
  Tensor a, b;
  Shape shape;
  DType dtype;
};
DType result_type(const Tensor& a, const Tensor& b);  // PyTorch's rule (torch.result_type)
Operands broadcast_operands(const Tensor& a, const Tensor& b, DType dtype, std::string_view op);
Operands binary_operands(Binary op, const Tensor& a, const Tensor& b);    // Div of integers: float32
Operands in_place_operands(Binary op, const Tensor& a, const Tensor& b);  // b to a's shape and dtype

namespace impl {
void copy_(const Tensor& dst, const Tensor& src);
void fill_(const Tensor& t, double value);

Tensor unary(Unary op, const Tensor& t);
Tensor pow(const Tensor& t, double exponent);
Tensor binary(Binary op, const Tensor& a, const Tensor& b);
void binary_(Binary op, const Tensor& a, const Tensor& b);
Tensor compare(Compare op, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& t, const Tensor& mask, double value);
void masked_fill_(const Tensor& t, const Tensor& mask, double value);

Tensor reduce(Reduction op, const Tensor& t, const std::vector<int64_t>& dims, bool keepdim);
ValuesIndices extremum(Extremum which, const Tensor& t, int64_t dim, bool keepdim);

ValuesIndices sort(const Tensor& t, int64_t dim, bool descending);
ValuesIndices topk(const Tensor& t, int64_t k, int64_t dim, bool largest);
Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement, Generator& gen);

Tensor softmax(const Tensor& t, int64_t dim);
Tensor log_softmax(const Tensor& t, int64_t dim);
Tensor masked_softmax(const Tensor& scores, const Tensor& mask, bool causal, double scale);
Tensor softmax_backward(const Tensor& output, const Tensor& grad, int64_t dim);
Tensor log_softmax_backward(const Tensor& output, const Tensor& grad, int64_t dim);

LayerNormResult layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight, const Tensor& bias,
                           double eps);
LayerNormGrads layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool need_input, bool need_weight, bool need_bias);

Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index);
Tensor index_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);
void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
Tensor gather(const Tensor& t, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);
Tensor slice_scatter(const Tensor& src, const Shape& shape, int64_t dim, int64_t start, int64_t step);
}  // namespace impl

// ---- the rows' forward as loops ----------------------------------------------------------------
// One case of a switch over the rows of CPPGRAD_UNARY_OPS (tensor/op_tables.h): out = forward(x)
// for each element x of t, in the dtypes the row allows. `map_into` is the expanding file's: one
// element at a time in the reference (elementwise.cpp), unit-stride loops in the fast form
// (fast/elementwise.cpp), so both run the same rows.
#define CPPGRAD_UNARY_LOOP(name, Enum, dtypes, forward, ...)                   \
    case Unary::Enum:                                                          \
      dispatch_##dtypes(t.dtype(), #name, [&](auto tag) {                      \
        using namespace op_constants;                                          \
        using T = decltype(tag);                                               \
        map_into<T, T>(out, t, [](T x) { return static_cast<T>(forward); });  \
      });                                                                      \
      break;
// Likewise out = forward(x, y) for each pair of elements of a and b (of type T), by `zip_into`.
#define CPPGRAD_BINARY_LOOP(name, Enum, forward, ...) \
    case Binary::Enum: zip_into<T, T>(out, a, b, [](T x, T y) { return static_cast<T>(forward); }); break;

namespace fast {
// The elementwise rows in loops the compiler vectorises (fast/elementwise.cpp).
Tensor unary(Unary op, const Tensor& t);
Tensor binary(Binary op, const Tensor& a, const Tensor& b);
void binary_(Binary op, const Tensor& a, const Tensor& b);
// A reduction over leading dims of a contiguous floating tensor, vectorised (fast/reduce.cpp), for
// the rows that add their elements as they are (sum and mean); undefined for another row, layout
// or dtype.
Tensor reduce_leading_dims(Reduction op, const Tensor& t, const std::vector<int64_t>& dims, bool keepdim);
}  // namespace fast

}  // namespace cppgrad::kernels
