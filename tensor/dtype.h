// The four element types and the one switch that turns a runtime DType into a C++ type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "../runtime/error.h"

namespace cppgrad {

enum class DType : uint8_t { Float32, Float64, Int64, Bool };

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kBool = DType::Bool;

constexpr size_t dtype_size(DType d) {
  switch (d) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::Bool: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
  }
  return "?";
}

constexpr bool is_floating(DType d) { return d == DType::Float32 || d == DType::Float64; }

// The result type of a binary op, as PyTorch promotes: bool < int64 < float32 < float64.
constexpr int promotion_rank(DType d) {
  switch (d) {
    case DType::Bool: return 0;
    case DType::Int64: return 1;
    case DType::Float32: return 2;
    case DType::Float64: return 3;
  }
  return 0;
}
constexpr DType promote(DType a, DType b) { return promotion_rank(a) >= promotion_rank(b) ? a : b; }

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

// dispatch(dtype, "op", [&](auto tag) { using T = decltype(tag); ... })
// calls the lambda with a value of the C++ type behind `dtype`.
template <class F>
decltype(auto) dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    case DType::Bool: return f(bool{});
  }
  throw Error("dispatch: unknown dtype");
}

// The same, for ops defined only on floating types; names the op when given another.
template <class F>
decltype(auto) dispatch_floating(DType dtype, std::string_view op, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    default: throw Error(fmt::format("{}: expected a floating dtype (float32 or float64), got {}", op, dtype_name(dtype)));
  }
}

// For arithmetic ops: every type but bool.
template <class F>
decltype(auto) dispatch_numeric(DType dtype, std::string_view op, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    default: throw Error(fmt::format("{}: not defined for dtype {}", op, dtype_name(dtype)));
  }
}

}  // namespace cppgrad
