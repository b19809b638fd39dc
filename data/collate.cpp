#include "data/collate.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/kernels.h"

namespace cppgrad::data {

namespace {

void copy_bytes(const Tensor& dst, int64_t dst_element, const Tensor& src) {
  const size_t item = dtype_size(src.dtype());
  const size_t nbytes = static_cast<size_t>(src.numel()) * item;
  if (nbytes == 0) return;
  const Tensor dense = kernels::contiguous(src);  // a copy only when src is not contiguous
  std::memcpy(static_cast<char*>(dst.raw_data()) + static_cast<size_t>(dst_element) * item, dense.raw_data(), nbytes);
}

// Each example's field names, checked equal to the first example's.
void check_same_fields(const std::vector<Example>& examples, std::string_view op) {
  CPPGRAD_CHECK(!examples.empty(), "{}: no examples to collate", op);
  const auto names = examples.front().names();
  for (size_t i = 1; i < examples.size(); ++i)
    CPPGRAD_CHECK(examples[i].names() == names, "{}: example {} has fields [{}], example 0 has [{}]", op, i,
                  fmt::join(examples[i].names(), ", "), fmt::join(names, ", "));
}

std::vector<Tensor> field_of(const std::vector<Example>& examples, size_t position) {
  std::vector<Tensor> out;
  out.reserve(examples.size());
  for (const auto& e : examples) out.push_back(e.at(position));
  return out;
}

}  // namespace

Tensor stack_tensors(const std::vector<Tensor>& tensors, const std::string& what) {
  CPPGRAD_CHECK(!tensors.empty(), "{}: nothing to stack", what);
  for (size_t i = 0; i < tensors.size(); ++i) CPPGRAD_CHECK(tensors[i].defined(), "{}: tensor {} is undefined", what, i);
  const Tensor& first = tensors.front();
  for (size_t i = 1; i < tensors.size(); ++i) {
    CPPGRAD_CHECK(tensors[i].shape() == first.shape(),
                  "{}: cannot stack shapes {} (example 0) and {} (example {}); pad variable lengths with pad_collate",
                  what, shape_str(first.shape()), shape_str(tensors[i].shape()), i);
    CPPGRAD_CHECK(tensors[i].dtype() == first.dtype(), "{}: dtypes differ: {} (example 0) and {} (example {})", what,
                  dtype_name(first.dtype()), dtype_name(tensors[i].dtype()), i);
  }
  Shape shape = first.shape();
  shape.insert(shape.begin(), static_cast<int64_t>(tensors.size()));
  Tensor out = empty(shape, first.dtype());
  for (size_t i = 0; i < tensors.size(); ++i) copy_bytes(out, static_cast<int64_t>(i) * first.numel(), tensors[i]);
  return out;
}

PaddedSequences pad_sequences(const std::vector<Tensor>& sequences, double padding_value, const std::string& what) {
  CPPGRAD_CHECK(!sequences.empty(), "{}: no sequences to pad", what);
  const Tensor& first = sequences.front();
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    CPPGRAD_CHECK(s.defined(), "{}: sequence {} is undefined", what, i);
    CPPGRAD_CHECK(s.dim() >= 1, "{}: sequence {} is 0-d; a sequence's first dim is its length", what, i);
    CPPGRAD_CHECK(s.dtype() == first.dtype(), "{}: dtypes differ: {} (sequence 0) and {} (sequence {})", what,
                  dtype_name(first.dtype()), dtype_name(s.dtype()), i);
    CPPGRAD_CHECK(s.dim() == first.dim() && std::equal(s.shape().begin() + 1, s.shape().end(), first.shape().begin() + 1),
                  "{}: sequences {} (sequence 0) and {} (sequence {}) differ beyond their length", what,
                  shape_str(first.shape()), shape_str(s.shape()), i);
  }
  if (first.dtype() == kInt64)
    CPPGRAD_CHECK(std::trunc(padding_value) == padding_value && std::abs(padding_value) < 9.2e18,
                  "{}: padding value {} is not an int64", what, padding_value);
  if (first.dtype() == kBool)
    CPPGRAD_CHECK(padding_value == 0 || padding_value == 1, "{}: padding value {} is not a bool (0 or 1)", what,
                  padding_value);

  const auto batch = static_cast<int64_t>(sequences.size());
  int64_t longest = 0;
  std::vector<int64_t> lengths;
  for (const auto& s : sequences) {
    lengths.push_back(s.size(0));
    longest = std::max(longest, s.size(0));
  }
  Shape shape = first.shape();
  shape[0] = longest;
  shape.insert(shape.begin(), batch);
  const int64_t per_step = numel(Shape(first.shape().begin() + 1, first.shape().end()));  // elements per position
  const int64_t row = longest * per_step;                                                 // elements per sequence
  PaddedSequences out;
  out.padded = full(shape, padding_value, first.dtype());
  out.padding_mask = full({batch, longest}, 1.0, kBool);
  bool* mask = out.padding_mask.data<bool>();
  for (int64_t b = 0; b < batch; ++b) {
    const Tensor& s = sequences[static_cast<size_t>(b)];
    // Row-major: sequence b's elements are the first numel() of its row, as they are in s.
    copy_bytes(out.padded, b * row, s);
    std::fill(mask + b * longest, mask + b * longest + s.size(0), false);
  }
  out.lengths = tensor(lengths, {batch});
  return out;
}

Batch stack_collate(const std::vector<Example>& examples) {
  check_same_fields(examples, "stack_collate");
  Batch batch;
  const auto names = examples.front().names();
  for (size_t f = 0; f < names.size(); ++f)
    batch.set(names[f], stack_tensors(field_of(examples, f), fmt::format("stack_collate: field '{}'", names[f])));
  return batch;
}

Collate pad_collate(std::vector<std::pair<std::string, double>> padding_values) {
  return [padding_values = std::move(padding_values)](const std::vector<Example>& examples) {
    check_same_fields(examples, "pad_collate");
    const auto names = examples.front().names();
    for (const auto& [name, value] : padding_values)
      CPPGRAD_CHECK(examples.front().contains(name), "pad_collate: the examples have no field '{}' to pad (they have: {})",
                    name, fmt::join(names, ", "));
    Batch batch;
    Batch extras;  // masks and lengths, after the fields themselves
    for (size_t f = 0; f < names.size(); ++f) {
      const std::string& name = names[f];
      auto padded = std::find_if(padding_values.begin(), padding_values.end(),
                                 [&](const auto& entry) { return entry.first == name; });
      if (padded == padding_values.end()) {
        batch.set(name, stack_tensors(field_of(examples, f), fmt::format("pad_collate: field '{}'", name)));
        continue;
      }
      PaddedSequences p = pad_sequences(field_of(examples, f), padded->second, fmt::format("pad_collate: field '{}'", name));
      batch.set(name, p.padded);
      extras.set(name + "_padding_mask", p.padding_mask);
      extras.set(name + "_lengths", p.lengths);
    }
    for (const auto& [name, t] : extras.fields()) batch.set(name, t);
    return batch;
  };
}

}  // namespace cppgrad::data
