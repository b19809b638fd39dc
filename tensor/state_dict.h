// A state_dict: what an object saves so that a run can resume it exactly (a module's weights, an
// optimizer's moments, a generator's words, a data loader's position), as named tensors in a
// fixed order, the form a safetensors file holds. Every floor's state_dict() returns one.
//
// Loading a state_dict is reading untrusted input. StateReader is how a load_state_dict reads
// it: each entry is asked for with the dtype and shape it must have and, for a number, the
// range its meaning allows; finish() refuses the entries nobody asked for. Every refusal is one
// Error naming the loader and the entry:
//
//   StateReader in(state, "DataLoader::load_state_dict");
//   const int64_t epoch = in.int64("epoch", Bounds::at_least(0));
//   const double eps = in.float64("eps", Bounds::above(0));
//   in.finish();   // "DataLoader::load_state_dict: unexpected entry 'epoch '"
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dtype.h"
#include "shape.h"

namespace cppgrad {

class Tensor;

// Name → tensor, in order: a state_dict, a safetensors file's contents.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Prepends `prefix` to every name ("model." + "fc.weight").
NamedTensors with_prefix(const std::string& prefix, const NamedTensors& tensors);
// The entries whose names start with `prefix`, with it removed.
NamedTensors under_prefix(const std::string& prefix, const NamedTensors& tensors);

// The values a number may take: [min, max], or (min, max] when min is open. A NaN is in no
// bounds, and an infinity only in bounds that reach it.
struct Bounds {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;

  static Bounds finite() { return {-std::numeric_limits<double>::max(), std::numeric_limits<double>::max()}; }
  static Bounds at_least(double v) { return {v, std::numeric_limits<double>::max()}; }
  static Bounds above(double v) { return {v, std::numeric_limits<double>::max(), true}; }

  bool contains(double v) const;
  std::string str() const;  // ">= 0", "> 0", "in [0, 1]", "finite"
};

// The flat index (row-major) of the first NaN or infinity in `t`, or -1 when every element is
// finite (always for an integer or bool tensor). With `as` float32: also the first element
// beyond float32's range, which would become an infinity there (a float64 file's 1e300 loaded
// into a float32 model). One pass, no copy of a contiguous tensor.
int64_t first_non_finite(const Tensor& t, DType as = kFloat64);
// Throws an Error naming the first entry of `state` that holds a NaN or an infinity, and where:
// "<owner>: 'model.fc.weight' holds nan (element 3 of [4, 2])".
void check_finite(const NamedTensors& state, const std::string& owner);

class StateReader {
 public:
  // `owner` starts every message ("Generator::load_state_dict").
  StateReader(const NamedTensors& state, std::string owner);

  bool contains(const std::string& name) const;
  // Entry `name`, of this dtype and shape (missing, undefined or another: an Error naming it).
  const Tensor& tensor(const std::string& name, DType dtype, const Shape& shape);
  // A 0-d int64 entry in `bounds` (whole numbers: the default takes any int64).
  int64_t int64(const std::string& name, Bounds bounds = {});
  // A 0-d float64 entry in `bounds` (the default: any finite number).
  double float64(const std::string& name, Bounds bounds = Bounds::finite());
  bool boolean(const std::string& name);
  // Runs `load`, a part's own load_state_dict (a loader's generator), on the entries under
  // `prefix` with it removed; they count as read, and its errors name the owner and `prefix`.
  void load_part(const std::string& prefix, const std::function<void(const NamedTensors&)>& load);
  // Refuses the first entry no call above asked for.
  void finish() const;

  const std::string& owner() const { return owner_; }

 private:
  const NamedTensors& state_;
  std::string owner_;
  std::set<std::string> read_;
};

}  // namespace cppgrad
