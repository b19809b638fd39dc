// Factories: tensors made from sizes, values or random draws. These are the graph-free forms, taking a
// DType; the forms taking TensorOptions (which may ask for requires_grad) are in autograd/factory.cpp.
#include <algorithm>
#include <cmath>
#include <new>

#include "runtime/allocator.h"
#include "runtime/profile.h"
#include "tensor/iterate.h"
#include "tensor/kernels.h"
#include "tensor/tensor.h"

namespace cppgrad {

namespace {
// Every tensor's memory comes from here (reductions, elementwise ops and copies allocate through
// empty()), so this is where an impossible or unaffordable size is refused with an Error, never
// a wrapped count, a crash or a std::bad_alloc.
Tensor allocate(const Shape& shape, DType dtype, Storage::Init init, std::string_view op) {
  const int64_t count = checked_numel(shape, op);
  int64_t nbytes = 0;
  CPPGRAD_CHECK(!__builtin_mul_overflow(count, static_cast<int64_t>(dtype_size(dtype)), &nbytes),
                "{}: shape {} of {} needs more bytes than a 64-bit count holds", op, shape_str(shape),
                dtype_name(dtype));
  const double memory_bytes = machine_memory_bytes();
  if (static_cast<double>(nbytes) > memory_bytes) {
    throw OutOfMemoryError(fmt::format("{}: shape {} of {} needs {:.3g} GB, more than this machine's {:.3g} GB of memory",
                                       op, shape_str(shape), dtype_name(dtype), static_cast<double>(nbytes) / 1e9,
                                       memory_bytes / 1e9));
  }
  std::shared_ptr<Storage> storage;
  try {
    storage = std::make_shared<Storage>(static_cast<size_t>(nbytes), init);
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(fmt::format("{}: out of memory: shape {} of {} needs {} bytes", op, shape_str(shape),
                            dtype_name(dtype), nbytes));
  }
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), shape, contiguous_strides(shape), 0, dtype));
}

Tensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype) {
  for (double v : values) check_value_fits(v, dtype, "tensor");
  Tensor t = empty(shape, dtype);
  dispatch(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i]);
  });
  return t;
}
}  // namespace

// The elements of an empty tensor are unset: every kernel that calls it writes all of them.
Tensor empty(const Shape& shape, DType dtype) { return allocate(shape, dtype, Storage::Init::Uninitialized, "empty"); }

Tensor zeros(const Shape& shape, DType dtype) { return allocate(shape, dtype, Storage::Init::Zeroed, "zeros"); }

Tensor full(const Shape& shape, double value, DType dtype) {
  check_fill_value(value, dtype, "full");
  Tensor t = allocate(shape, dtype, Storage::Init::Uninitialized, "full");
  kernels::fill_(t, value);
  return t;
}

Tensor ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }
Tensor scalar_tensor(double value, DType dtype) {
  check_fill_value(value, dtype, "scalar_tensor");
  return full({}, value, dtype);
}

Tensor arange(double end, DType dtype) { return arange(0, end, 1, dtype); }

Tensor arange(double start, double end, double step, DType dtype) {
  CPPGRAD_CHECK(step != 0, "arange: step must be non-zero");
  CPPGRAD_CHECK((end - start) / step >= 0, "arange: range [{}, {}) is empty going by step {}", start, end, step);
  const double count = std::ceil((end - start) / step);
  CPPGRAD_CHECK(count < 0x1p63, "arange: range [{}, {}) by step {} has too many elements", start, end, step);
  auto n = static_cast<int64_t>(count);
  if (n > 0) {  // the first and last values bound the others
    check_value_fits(start, dtype, "arange");
    check_value_fits(start + static_cast<double>(n - 1) * step, dtype, "arange");
  }
  Tensor t = empty({n}, dtype);
  dispatch(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
  return t;
}

Tensor eye(int64_t n, DType dtype) {
  CPPGRAD_CHECK(n >= 0, "eye: negative size {}", n);
  Tensor t = zeros({n, n}, dtype);
  dispatch(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) t.data<T>()[i * n + i] = T(1);
  });
  return t;
}

// Random draws are made in row-major order on the calling thread: same seed, same tensor.
template <class Draw>
static Tensor random_tensor(const Shape& shape, DType dtype, std::string_view op, Draw draw) {
  CPPGRAD_CHECK(is_floating(dtype), "{}: expected a floating dtype (float32, float64 or bfloat16), got {}", op,
                dtype_name(dtype));
  Tensor t = allocate(shape, dtype, Storage::Init::Uninitialized, op);
  dispatch(t.dtype(), [&](auto tag) {  // a bfloat16 draw is the float64 draw rounded (through float32)
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(draw());
  });
  return t;
}

// In [0, 1). A double within 2^-25 of 1 rounds up to 1.0f, so float32 draws stop at the largest
// float below 1 (bfloat16 draws at the largest bfloat16 below 1, 1 - 2^-8).
Tensor rand(const Shape& shape, DType dtype, Generator& gen) {
  const double top = dtype == kFloat32 ? std::nextafter(1.0f, 0.0f) : dtype == kBFloat16 ? 1.0 - 0x1p-8 : 1.0;
  return random_tensor(shape, dtype, "rand", [&] { return std::min(gen.uniform(), top); });
}

Tensor randn(const Shape& shape, DType dtype, Generator& gen) {
  return random_tensor(shape, dtype, "randn", [&] { return gen.normal(); });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen) {
  CPPGRAD_CHECK(low < high, "randint: empty range [{}, {})", low, high);
  Tensor t = empty(shape, kInt64);
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = gen.randint(low, high);
  return t;
}

Tensor randperm(int64_t n, Generator& gen) {
  CPPGRAD_CHECK(n >= 0, "randperm: negative n {}", n);
  Tensor t = arange(0, static_cast<double>(n), 1, kInt64);
  int64_t* p = t.data<int64_t>();
  // Fisher–Yates: position i takes one of the positions 0..i, each equally likely.
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[gen.randint(0, i + 1)]);
  return t;
}

Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.dtype()); }
Tensor rand_like(const Tensor& t, Generator& gen) { return rand(t.shape(), t.dtype(), gen); }
Tensor randn_like(const Tensor& t, Generator& gen) { return randn(t.shape(), t.dtype(), gen); }

// ---- from values ----------------------------------------------------------------------------

Tensor tensor(std::initializer_list<double> values, DType dtype) {
  return from_doubles(std::vector<double>(values), {static_cast<int64_t>(values.size())}, dtype);
}

Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, DType dtype) {
  std::vector<double> flat;
  const int64_t cols = rows.size() == 0 ? 0 : static_cast<int64_t>(rows.begin()->size());
  for (const auto& row : rows) {
    CPPGRAD_CHECK(static_cast<int64_t>(row.size()) == cols, "tensor: ragged nested list (rows of {} and {} values)", cols,
          row.size());
    flat.insert(flat.end(), row.begin(), row.end());
  }
  return from_doubles(flat, {static_cast<int64_t>(rows.size()), cols}, dtype);
}

Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<double>>> blocks,
              DType dtype) {
  std::vector<Tensor> parts;
  for (const auto& block : blocks) parts.push_back(tensor(block, dtype));
  CPPGRAD_CHECK(!parts.empty(), "tensor: empty nested list");
  for (const auto& p : parts)
    CPPGRAD_CHECK(p.shape() == parts[0].shape(), "tensor: ragged nested list (blocks of shape {} and {})",
          shape_str(parts[0].shape()), shape_str(p.shape()));
  Shape shape = parts[0].shape();
  shape.insert(shape.begin(), static_cast<int64_t>(parts.size()));
  Tensor out = empty(shape, dtype);
  for (size_t i = 0; i < parts.size(); ++i) kernels::copy_(kernels::select(out, 0, static_cast<int64_t>(i)), parts[i]);
  return out;
}

template <StoredElement T>
Tensor tensor(const std::vector<T>& values, const Shape& shape) {
  CPPGRAD_CHECK(checked_numel(shape, "tensor") == static_cast<int64_t>(values.size()), "tensor: {} values do not fill shape {} ({} elements)",
        values.size(), shape_str(shape), numel(shape));
  Tensor t = empty(shape, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

template Tensor tensor<float>(const std::vector<float>&, const Shape&);
template Tensor tensor<double>(const std::vector<double>&, const Shape&);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, const Shape&);
template Tensor tensor<bool>(const std::vector<bool>&, const Shape&);

}  // namespace cppgrad
