// CPPGRAD_ARG(type, name, default) gives an options struct a chainable setter and a getter,
// so options read as in libtorch:  MultiheadAttentionOptions(512, 8).dropout(0.1).bias(false)
// (Here, at the bottom floor, so that autograd's options use it too; nn/options.h includes it.)
#pragma once

#define CPPGRAD_ARG(T, name, init)     \
 public:                               \
  auto& name(const T& value) {         \
    name##_ = value;                   \
    return *this;                      \
  }                                    \
  const T& name() const { return name##_; } \
                                       \
 private:                              \
  T name##_ = init;                    \
                                       \
 public:
