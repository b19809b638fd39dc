// TensorImpl bookkeeping and the Tensor methods that only read data.
#include "tensor/tensor.h"

#include <atomic>

#include "tensor/kernels.h"

namespace cppgrad {

namespace {
std::atomic<int64_t> g_live_tensors{0};
}

TensorImpl::TensorImpl(std::shared_ptr<Storage> storage_, Shape shape_, Strides strides_, int64_t offset_,
                       DType dtype_)
    : storage(std::move(storage_)), shape(std::move(shape_)), strides(std::move(strides_)), offset(offset_),
      dtype(dtype_) {
  ++g_live_tensors;
}

TensorImpl::~TensorImpl() { --g_live_tensors; }

int64_t live_tensor_count() { return g_live_tensors.load(); }

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;  // the stride of a size-1 dim never matters
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

void* Tensor::raw_data() const {
  return static_cast<char*>(storage()->data) + offset() * static_cast<int64_t>(dtype_size(dtype()));
}

template <class T>
T* Tensor::data() const {
  CPPGRAD_CHECK(dtype() == dtype_of<T>(), "data: tensor has dtype {}, asked for {}", dtype_name(dtype()),
        dtype_name(dtype_of<T>()));
  return static_cast<T*>(raw_data());
}

template <class T>
T Tensor::item() const {
  CPPGRAD_CHECK(numel() == 1, "item: a tensor of shape {} has {} elements, expected exactly 1", shape_str(shape()), numel());
  return dispatch(dtype(), [&](auto tag) { return static_cast<T>(*data<decltype(tag)>()); });
}

double Tensor::item() const { return item<double>(); }

template <class T>
T& Tensor::at(const std::vector<int64_t>& index) const {
  CPPGRAD_CHECK(static_cast<int64_t>(index.size()) == dim(), "at: index has {} entries for a tensor of shape {}",
        index.size(), shape_str(shape()));
  int64_t off = 0;
  for (int64_t d = 0; d < dim(); ++d) {
    int64_t i = index[d] < 0 ? index[d] + shape()[d] : index[d];
    CPPGRAD_CHECK(i >= 0 && i < shape()[d], "at: index {} out of range for dim {} of size {} (shape {})", index[d], d,
          shape()[d], shape_str(shape()));
    off += i * strides()[d];
  }
  return data<T>()[off];
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor dense = kernels::contiguous(kernels::to(*this, dtype_of<T>()));
  const T* p = dense.data<T>();
  return std::vector<T>(p, p + dense.numel());
}

#define CPPGRAD_INSTANTIATE(T)                                          \
  template T* Tensor::data<T>() const;                                  \
  template T Tensor::item<T>() const;                                   \
  template T& Tensor::at<T>(const std::vector<int64_t>& index) const;  \
  template std::vector<T> Tensor::to_vector<T>() const;
CPPGRAD_INSTANTIATE(float)
CPPGRAD_INSTANTIATE(double)
CPPGRAD_INSTANTIATE(int64_t)
CPPGRAD_INSTANTIATE(bool)
CPPGRAD_INSTANTIATE(bfloat16)
#undef CPPGRAD_INSTANTIATE

}  // namespace cppgrad
