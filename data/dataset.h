// Datasets: a size and a way to get example i, as torch.utils.data.Dataset.
//
// An Example is a few named tensors ("input", "target", ...), in a fixed order, as the dict a
// PyTorch dataset often returns. A batch has the same form: the collate step (data/collate.h)
// turns B examples into one Example whose tensors have a leading batch dim.
//
//   data::TensorDataset train({{"x", x}, {"y", y}});       // x (N, 3), y (N): example i = x[i], y[i]
//   auto scaled = data::map(train, [](data::Example e) { e.set("x", e["x"] * 2.0); return e; });
//
// get() is const and may be called from the loader's background thread (data/loader.h), one call
// at a time: a dataset needs no locks, but must not share mutable state with the training loop.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../tensor/tensor.h"

namespace cppgrad::data {

using NamedTensors = cppgrad::NamedTensors;  // name → tensor, in order (tensor/state_dict.h)

class Example {
 public:
  Example() = default;
  Example(std::initializer_list<std::pair<std::string, Tensor>> fields);
  explicit Example(NamedTensors fields);

  // The tensor named `name`; throws Error listing the names there are.
  const Tensor& operator[](const std::string& name) const;
  const Tensor& at(size_t position) const;  // by position, in insertion order
  bool contains(const std::string& name) const;
  // Replaces the tensor of that name, or appends a new one.
  Example& set(const std::string& name, Tensor value);

  size_t size() const { return fields_.size(); }
  std::vector<std::string> names() const;
  const NamedTensors& fields() const { return fields_; }

 private:
  NamedTensors fields_;
};

// What the loader hands out: one Example whose tensors are batched (dim 0 = the batch).
using Batch = Example;

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;  // 0 <= index < size()
};

// Checks 0 <= index < size, naming the dataset ("TensorDataset: index 7 out of range for 5 examples").
void check_index(std::string_view dataset, int64_t index, int64_t size);

// Example i is row i of each tensor (a view: no copy). The tensors share their first dim.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(NamedTensors tensors);
  // Unnamed tensors are called "0", "1", ... as positions.
  explicit TensorDataset(const std::vector<Tensor>& tensors);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;

 private:
  NamedTensors tensors_;
  int64_t size_ = 0;
};

// Another dataset's examples, each passed through a function (a transform).
class MapDataset : public Dataset {
 public:
  using Transform = std::function<Example(Example)>;
  MapDataset(std::shared_ptr<const Dataset> source, Transform transform);
  int64_t size() const override { return source_->size(); }
  Example get(int64_t index) const override { return transform_(source_->get(index)); }

 private:
  std::shared_ptr<const Dataset> source_;
  Transform transform_;
};

// The examples of `source` at the given indices, in that order (a train/validation split, say).
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> source, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t index) const override;

 private:
  std::shared_ptr<const Dataset> source_;
  std::vector<int64_t> indices_;
};

// map(dataset, f): a MapDataset; the dataset is shared, not copied.
template <class D>
std::shared_ptr<MapDataset> map(std::shared_ptr<D> source, MapDataset::Transform transform) {
  return std::make_shared<MapDataset>(std::move(source), std::move(transform));
}
template <class D>
std::shared_ptr<MapDataset> map(D source, MapDataset::Transform transform)
  requires std::is_base_of_v<Dataset, D>
{
  return std::make_shared<MapDataset>(std::make_shared<D>(std::move(source)), std::move(transform));
}

}  // namespace cppgrad::data
