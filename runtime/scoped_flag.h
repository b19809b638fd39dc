#pragma once
// A process-wide switch set for a scope, then given back its previous value, after a throw too:
// the guards of grad mode, anomaly mode (autograd/node.h) and reference mode.
namespace cppgrad {

template <bool (*Get)(), void (*Set)(bool)>
class ScopedFlag {
 public:
  explicit ScopedFlag(bool value) : previous_(Get()) { Set(value); }
  ~ScopedFlag() { Set(previous_); }
  ScopedFlag(const ScopedFlag&) = delete;
  ScopedFlag& operator=(const ScopedFlag&) = delete;

 private:
  bool previous_;
};

}  // namespace cppgrad
