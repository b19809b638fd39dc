#include "data/dataset.h"

#include "tensor/kernels.h"

namespace cppgrad::data {

Example::Example(std::initializer_list<std::pair<std::string, Tensor>> fields) {
  for (const auto& [name, value] : fields) set(name, value);
}

Example::Example(NamedTensors fields) {
  for (auto& [name, value] : fields) set(name, std::move(value));
}

const Tensor& Example::operator[](const std::string& name) const {
  for (const auto& [field, value] : fields_)
    if (field == name) return value;
  throw Error(fmt::format("Example: no tensor named '{}' (it has: {})", name, fmt::join(names(), ", ")));
}

const Tensor& Example::at(size_t position) const {
  CPPGRAD_CHECK(position < fields_.size(), "Example: position {} out of range for {} tensors", position, fields_.size());
  return fields_[position].second;
}

bool Example::contains(const std::string& name) const {
  for (const auto& field : fields_)
    if (field.first == name) return true;
  return false;
}

Example& Example::set(const std::string& name, Tensor value) {
  for (auto& [field, old] : fields_)
    if (field == name) {
      old = std::move(value);
      return *this;
    }
  fields_.emplace_back(name, std::move(value));
  return *this;
}

std::vector<std::string> Example::names() const {
  std::vector<std::string> out;
  for (const auto& field : fields_) out.push_back(field.first);
  return out;
}

void check_index(std::string_view dataset, int64_t index, int64_t size) {
  CPPGRAD_CHECK(index >= 0 && index < size, "{}: index {} out of range for {} examples", dataset, index, size);
}

TensorDataset::TensorDataset(NamedTensors tensors) : tensors_(std::move(tensors)) {
  CPPGRAD_CHECK(!tensors_.empty(), "TensorDataset: expected at least one tensor");
  for (const auto& [name, t] : tensors_) {
    CPPGRAD_CHECK(t.defined(), "TensorDataset: tensor '{}' is undefined", name);
    CPPGRAD_CHECK(t.dim() >= 1, "TensorDataset: tensor '{}' is 0-d; examples are rows of dim 0", name);
  }
  size_ = tensors_.front().second.size(0);
  for (const auto& [name, t] : tensors_)
    CPPGRAD_CHECK(t.size(0) == size_, "TensorDataset: tensors must share their first dim, but '{}' is {} and '{}' is {}",
                  tensors_.front().first, shape_str(tensors_.front().second.shape()), name, shape_str(t.shape()));
}

static NamedTensors numbered(const std::vector<Tensor>& tensors) {
  NamedTensors out;
  for (size_t i = 0; i < tensors.size(); ++i) out.emplace_back(std::to_string(i), tensors[i]);
  return out;
}

TensorDataset::TensorDataset(const std::vector<Tensor>& tensors) : TensorDataset(numbered(tensors)) {}

Example TensorDataset::get(int64_t index) const {
  check_index("TensorDataset", index, size_);
  Example example;
  for (const auto& [name, t] : tensors_) example.set(name, kernels::select(t, 0, index));
  return example;
}

MapDataset::MapDataset(std::shared_ptr<const Dataset> source, Transform transform)
    : source_(std::move(source)), transform_(std::move(transform)) {
  CPPGRAD_CHECK(source_ != nullptr, "MapDataset: the source dataset is null");
  CPPGRAD_CHECK(static_cast<bool>(transform_), "MapDataset: the transform is empty");
}

Subset::Subset(std::shared_ptr<const Dataset> source, std::vector<int64_t> indices)
    : source_(std::move(source)), indices_(std::move(indices)) {
  CPPGRAD_CHECK(source_ != nullptr, "Subset: the source dataset is null");
  const int64_t n = source_->size();
  for (int64_t i : indices_) CPPGRAD_CHECK(i >= 0 && i < n, "Subset: index {} out of range for {} examples", i, n);
}

Example Subset::get(int64_t index) const {
  check_index("Subset", index, size());
  return source_->get(indices_[static_cast<size_t>(index)]);
}

}  // namespace cppgrad::data
