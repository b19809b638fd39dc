// Tensor: a strided view of a shared Storage, the one type users handle.
//
// A Tensor is a cheap handle (a shared pointer) to a TensorImpl: shape, strides and offset into
// a Storage that views share. `b = a` makes two handles to the same tensor, as in PyTorch.
//
// The graph-free kernels live in tensor/kernels.h. The methods below that compute something
// (reshape, sum, matmul, ...) are the *differentiable* forms: they are declared here so that
// users see one Tensor type, and defined in autograd/, which wraps each kernel and records a
// graph node when gradients are needed. TensorImpl only holds an opaque pointer to autograd's
// state, the way PyTorch's TensorImpl holds its AutogradMeta: tensor/ knows nothing of graphs.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "dtype.h"
#include "../runtime/error.h"
#include "generator.h"
#include "op_tables.h"
#include "reduction_table.h"
#include "shape.h"
#include "storage.h"

namespace cppgrad {

namespace autograd {
struct AutogradMeta;  // requires_grad, grad, grad_fn, hooks: defined in autograd/node.h
struct Node;
}  // namespace autograd

struct TensorImpl {
  TensorImpl(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset, DType dtype);
  ~TensorImpl();
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;

  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;     // in elements
  int64_t offset = 0;  // in elements, into storage
  DType dtype;
  bool is_view = false;  // shares storage with the tensor it was made from
  std::shared_ptr<autograd::AutogradMeta> autograd;  // null until autograd needs it
};

// Counts of live objects, for tests that prove nothing leaks.
int64_t live_tensor_count();

struct TensorOptions {
  TensorOptions(DType d = kFloat32) : dtype_(d) {}  // NOLINT: implicit, so a DType can be passed
  TensorOptions& dtype(DType d) { dtype_ = d; return *this; }
  TensorOptions& requires_grad(bool r = true) { requires_grad_ = r; return *this; }
  DType dtype_;
  bool requires_grad_ = false;
};

class Tensor;
struct ValuesIndices;  // what max(dim) and min(dim) return

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage, defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata --------------------------------------------------------------------------
  const Shape& shape() const { return checked()->shape; }
  const Shape& sizes() const { return shape(); }
  const Strides& strides() const { return checked()->strides; }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t offset() const { return checked()->offset; }
  int64_t numel() const { return cppgrad::numel(shape()); }
  DType dtype() const { return checked()->dtype; }
  bool is_floating_point() const { return is_floating(dtype()); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return checked()->storage; }
  // The storage's version counter: bumped by every in-place write through any view.
  uint64_t version() const { return storage()->version; }
  void bump_version() const { ++storage()->version; }

  // ---- data ------------------------------------------------------------------------------
  // Pointer to element [0,...,0]; T must match the dtype.
  template <class T> T* data() const;
  void* raw_data() const;
  // The value of a one-element tensor.
  template <class T> T item() const;
  double item() const;
  // Checked element access: t.at<float>({i, j}). Writes through it do not bump the version.
  template <class T> T& at(const std::vector<int64_t>& index) const;
  // A row-major copy of the elements.
  template <class T> std::vector<T> to_vector() const;
  std::string str() const;  // as printed by fmt::format("{}", t) and std::cout << t
  // t[i] is t.select(0, i), as in PyTorch: a view of row i (i < 0 counts from the end).
  Tensor operator[](int64_t index) const { return select(0, index); }

  // ---- autograd state (defined in autograd/) ---------------------------------------------
  bool requires_grad() const;
  Tensor& requires_grad_(bool enabled = true);
  Tensor grad() const;           // undefined until a backward reaches this tensor
  void set_grad(const Tensor& g) const;  // g of this tensor's shape and dtype, or undefined
  void zero_grad(bool set_to_none = true) const;
  std::shared_ptr<autograd::Node> grad_fn() const;
  bool is_leaf() const;
  // Backward from this tensor; `gradient` may be omitted only for a one-element tensor.
  void backward(const Tensor& gradient = {}, bool retain_graph = false, bool create_graph = false) const;
  Tensor detach() const;  // same storage, no graph
  void retain_grad() const;
  bool retains_grad() const;
  // A hook sees the gradient flowing into this tensor; returning a defined tensor (of the
  // gradient's shape and dtype) replaces it.
  using Hook = std::function<Tensor(const Tensor&)>;
  void register_hook(Hook hook) const;

  // ---- views: share storage, copy nothing (autograd/ops_view.cpp) ------------------------
  Tensor view(const Shape& shape) const;     // throws if the strides make a view impossible
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;   // 2-D transpose
  Tensor mT() const;  // transpose of the last two dims
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const std::vector<int64_t>& sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;
  Tensor to(DType dtype) const;  // itself when already of that dtype

  // ---- math (autograd/ops_*.cpp) -----------------------------------------------------------
  // One method per row of CPPGRAD_UNARY_OPS (tensor/op_tables.h, which gives each one's formula
  // and derivative): t.neg(), t.abs(), t.sign() (no gradient), t.exp(), t.log(), t.sqrt(),
  // t.rsqrt(), t.tanh(), t.sigmoid(), t.relu(), t.erf(), t.sin(), t.cos(), t.gelu(), ...
#define CPPGRAD_UNARY_METHOD(name, ...) Tensor name() const;
  CPPGRAD_UNARY_OPS(CPPGRAD_UNARY_METHOD)
#undef CPPGRAD_UNARY_METHOD
  // GELU(x) = x·Φ(x) with Φ the normal CDF (approximate = "none", the gelu row), or PyTorch's tanh
  // approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (approximate = "tanh", the gelu_tanh row).
  Tensor gelu(std::string_view approximate) const;
  // Each element limited to [min, max] (either bound may be left out); the gradient passes where
  // min ≤ x ≤ max, as in PyTorch.
  Tensor clamp(std::optional<double> min, std::optional<double> max = std::nullopt) const;
  Tensor pow(double exponent) const;
  Tensor square() const { return pow(2.0); }
  Tensor matmul(const Tensor& other) const;
  // One method per row of CPPGRAD_BINARY_OPS: a.add(b), a.sub(b), a.mul(b), a.div(b),
  // a.maximum(b), a.minimum(b) (the operators +, -, *, / are below).
#define CPPGRAD_BINARY_METHOD(name, ...) Tensor name(const Tensor& other) const;
  CPPGRAD_BINARY_OPS(CPPGRAD_BINARY_METHOD)
#undef CPPGRAD_BINARY_METHOD

  // One set of methods per row of CPPGRAD_REDUCTION_OPS (tensor/reduction_table.h): t.sum(),
  // t.sum({0, 2}), t.sum(1, true); likewise mean, logsumexp (log Σ exp, computed stably, as
  // torch.logsumexp), amax and amin (as torch.amax: ties share the gradient). An empty list means
  // every dim; the template makes t.sum(1) one dim, as in PyTorch, while a braced list, t.sum({})
  // or t.sum({1}), still means the list.
#define CPPGRAD_REDUCTION_METHODS(name, ...)                                    \
  Tensor name(const std::vector<int64_t>& dims, bool keepdim = false) const;   \
  Tensor name() const { return name(std::vector<int64_t>{}, false); }           \
  template <std::integral I>                                                    \
  Tensor name(I dim, bool keepdim = false) const {                              \
    return name(std::vector<int64_t>{static_cast<int64_t>(dim)}, keepdim);      \
  }
  CPPGRAD_REDUCTION_OPS(CPPGRAD_REDUCTION_METHODS)
#undef CPPGRAD_REDUCTION_METHODS
  // Variance with Bessel's correction by default (correction = 1), as torch.var.
  Tensor var(const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor max() const;
  ValuesIndices max(int64_t dim, bool keepdim = false) const;
  Tensor min() const;
  ValuesIndices min(int64_t dim, bool keepdim = false) const;
  Tensor argmax() const;  // of the flattened tensor; no gradient
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  // Ordering along a dim, as torch.sort, argsort and topk (autograd/ops_sort.cpp): NaN sorts
  // as the largest value, and equal values keep their input order (the sort is always stable, so
  // `stable` asks for nothing more); topk orders ties as PyTorch 1.13's CPU topk does, not by
  // index (tensor/kernels/sort.cpp). The values are
  // differentiable, the int64 indices are not. `sorted` may be false, as in PyTorch; the k come
  // sorted anyway.
  ValuesIndices sort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  ValuesIndices topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  // num_samples category indices (int64) drawn from each row of these non-negative weights (1-D
  // or 2-D, rows need not sum to 1), as torch.multinomial; no gradient.
  Tensor multinomial(int64_t num_samples, bool replacement = false, Generator& gen = default_generator()) const;
  // Along `dim`, computed stably (the row max is subtracted first). A row that is -inf
  // throughout (a fully masked row) gives zeros from softmax, with zero gradient, and -inf
  // from log_softmax; PyTorch gives NaN for both. A NaN anywhere in a row makes the whole row
  // NaN, in the values and in the gradient, as in PyTorch.
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  // One method per row of CPPGRAD_COMPARE_OPS: a.eq(b), a.ne(b), a.lt(b), a.le(b), a.gt(b),
  // a.ge(b). Comparisons give bool and have no gradient.
#define CPPGRAD_COMPARE_METHOD(name, ...) Tensor name(const Tensor& other) const;
  CPPGRAD_COMPARE_OPS(CPPGRAD_COMPARE_METHOD)
#undef CPPGRAD_COMPARE_METHOD
  Tensor logical_not() const;

  Tensor masked_fill(const Tensor& mask, double value) const;  // where mask is true
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;

  // ---- in place: bump the version counter (autograd/ops_inplace.cpp) ---------------------
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  Tensor& sub_(const Tensor& other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double value);
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);
  Tensor& masked_fill_(const Tensor& mask, double value);

 private:
  TensorImpl* checked() const {
    if (!impl_) throw Error("tensor: use of an undefined tensor");
    return impl_.get();
  }
  std::shared_ptr<TensorImpl> impl_;
};

struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
};

// ---- arithmetic with NumPy broadcasting (autograd/ops_math.cpp) ----------------------------
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
// One function and three operators per row of CPPGRAD_COMPARE_OPS: lt(a, b), a < b, and against
// a number, `t == 0`, `x > 0.0` (bool results). The number is compared exactly: an integer tensor
// against 0.5 compares in float64.
#define CPPGRAD_COMPARE_FUNCTIONS(name, Enum, symbol) \
  Tensor name(const Tensor& a, const Tensor& b);       \
  Tensor operator symbol(const Tensor& a, const Tensor& b); \
  Tensor operator symbol(const Tensor& a, double b);   \
  Tensor operator symbol(double a, const Tensor& b);
CPPGRAD_COMPARE_OPS(CPPGRAD_COMPARE_FUNCTIONS)
#undef CPPGRAD_COMPARE_FUNCTIONS

// One free function per row of CPPGRAD_BINARY_OPS: add(a, b), ..., maximum(a, b), minimum(a, b).
#define CPPGRAD_BINARY_FUNCTION(name, ...) Tensor name(const Tensor& a, const Tensor& b);
CPPGRAD_BINARY_OPS(CPPGRAD_BINARY_FUNCTION)
#undef CPPGRAD_BINARY_FUNCTION
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// One free function per row of CPPGRAD_UNARY_OPS: sin(t) is t.sin(), as torch.sin.
#define CPPGRAD_UNARY_FUNCTION(name, ...) Tensor name(const Tensor& t);
CPPGRAD_UNARY_OPS(CPPGRAD_UNARY_FUNCTION)
#undef CPPGRAD_UNARY_FUNCTION
Tensor clamp(const Tensor& t, std::optional<double> min, std::optional<double> max = std::nullopt);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor softmax(const Tensor& t, int64_t dim);      // as t.softmax(dim): an all -inf row gives 0
Tensor log_softmax(const Tensor& t, int64_t dim);  // as t.log_softmax(dim): an all -inf row gives -inf
// One free function per row of CPPGRAD_REDUCTION_OPS, as the methods: logsumexp(t, {1}) is
// t.logsumexp(1), as torch.logsumexp; sort(t) is t.sort().
#define CPPGRAD_REDUCTION_FUNCTIONS(name, ...)                                                   \
  inline Tensor name(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false) { \
    return t.name(dims, keepdim);                                                               \
  }                                                                                             \
  template <std::integral I>                                                                    \
  Tensor name(const Tensor& t, I dim, bool keepdim = false) {                                   \
    return t.name(dim, keepdim);                                                                \
  }
CPPGRAD_REDUCTION_OPS(CPPGRAD_REDUCTION_FUNCTIONS)
#undef CPPGRAD_REDUCTION_FUNCTIONS
ValuesIndices sort(const Tensor& t, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& t, int64_t dim = -1, bool descending = false, bool stable = false);
ValuesIndices topk(const Tensor& t, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// Without replacement, each draw picks among the categories not drawn yet, in proportion to
// their weights (weight-0 categories come last, when more samples are asked for than there are
// positive weights); with replacement, every draw is independent. Refuses weights that are
// negative, infinite or NaN, a row that sums to 0, and more samples than categories without
// replacement, as PyTorch does. The same generator state gives the same draws.
Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement = false,
                   Generator& gen = default_generator());
// Sums `t` down to `shape` (the inverse of broadcasting `shape` up to t's shape).
Tensor sum_to(const Tensor& t, const Shape& shape);

// ---- factories -------------------------------------------------------------------------------
// Two forms of each, as ATen's at::zeros and libtorch's torch::zeros: the graph-free one takes a
// DType (tensor/factory.cpp; what kernels call), and the one a user calls takes TensorOptions,
// which may ask for a leaf that requires grad (autograd/factory.cpp, on the floor that knows what
// requires_grad means). zeros({2, 3}, kFloat64) picks the first; zeros({2, 3}) and
// zeros({2, 3}, TensorOptions().requires_grad()) the second.
Tensor empty(const Shape& shape, DType dtype);
Tensor zeros(const Shape& shape, DType dtype);
Tensor ones(const Shape& shape, DType dtype);
Tensor full(const Shape& shape, double value, DType dtype);
Tensor scalar_tensor(double value, DType dtype);  // 0-d
Tensor arange(double end, DType dtype);
Tensor arange(double start, double end, double step, DType dtype);
Tensor eye(int64_t n, DType dtype);
Tensor rand(const Shape& shape, DType dtype, Generator& gen = default_generator());
Tensor randn(const Shape& shape, DType dtype, Generator& gen = default_generator());

Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor scalar_tensor(double value, TensorOptions options = {});  // 0-d
// arange's dtype is torch.arange's: int64 when every bound given is an integer, float32 when any
// is floating (arange(5) = [0, 1, 2, 3, 4] int64; arange(0, 1, 0.25) = [0, 0.25, 0.5, 0.75]
// float32); options given explicitly win (arange(5, kFloat64)).
Tensor arange(double end, TensorOptions options);
Tensor arange(double start, double end, double step, TensorOptions options);
template <class T>
concept ArangeBound = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;
template <ArangeBound End>
Tensor arange(End end) {
  return arange(static_cast<double>(end), TensorOptions(std::is_integral_v<End> ? kInt64 : kFloat32));
}
template <ArangeBound Start, ArangeBound End, ArangeBound Step = int64_t>
Tensor arange(Start start, End end, Step step = 1) {
  constexpr bool integral = std::is_integral_v<Start> && std::is_integral_v<End> && std::is_integral_v<Step>;
  return arange(static_cast<double>(start), static_cast<double>(end), static_cast<double>(step),
                TensorOptions(integral ? kInt64 : kFloat32));
}
Tensor eye(int64_t n, TensorOptions options = {});
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator& gen = default_generator());
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator& gen = default_generator());
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen = default_generator());
// A random permutation of 0, ..., n-1 (int64), as torch.randperm: for shuffling.
Tensor randperm(int64_t n, Generator& gen = default_generator());
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor rand_like(const Tensor& t, Generator& gen = default_generator());
Tensor randn_like(const Tensor& t, Generator& gen = default_generator());

// From values: tensor({1, 2, 3}), tensor({{1, 2}, {3, 4}}, kFloat64), ...
Tensor tensor(std::initializer_list<double> values, DType dtype);
Tensor tensor(std::initializer_list<std::initializer_list<double>> values, DType dtype);
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<double>>> values, DType dtype);
Tensor tensor(std::initializer_list<double> values, TensorOptions options = {});
Tensor tensor(std::initializer_list<std::initializer_list<double>> values, TensorOptions options = {});
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<double>>> values,
              TensorOptions options = {});
// From a flat vector and a shape; the dtype follows T: tensor(std::vector<int64_t>{1, 2}, {2}).
// float gives float32, double float64, bool bool, and any other integer type int64
// (tensor(std::vector<int>{1, 2}, {2}) is int64, as torch.tensor of Python ints).
// Any other element type (long double, a struct) does not compile: no matching tensor().
template <class T>
concept StoredElement =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int64_t> || std::is_same_v<T, bool>;
template <StoredElement T>
Tensor tensor(const std::vector<T>& values, const Shape& shape);
template <class T>
  requires(std::is_integral_v<T> && !StoredElement<T>)
Tensor tensor(const std::vector<T>& values, const Shape& shape) {
  return tensor(std::vector<int64_t>(values.begin(), values.end()), shape);
}

// std::cout << t prints what fmt::format("{}", t) gives.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace cppgrad

// fmt::format("{}", t) prints a tensor as Tensor::str() does.
template <>
struct fmt::formatter<cppgrad::Tensor> : fmt::formatter<std::string_view> {
  template <class FormatContext>
  auto format(const cppgrad::Tensor& t, FormatContext& ctx) const {
    std::string s = t.str();
    return fmt::formatter<std::string_view>::format(s, ctx);
  }
};
