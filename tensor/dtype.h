// The five element types and the one switch that turns a runtime DType into a C++ type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>

#include "../runtime/error.h"
#include "bfloat16.h"

namespace cppgrad {

// BFloat16 is a storage type (tensor/bfloat16.h): converted, copied, viewed and printed, and
// multiplied only inside autocast's matrix products (tensor/autocast.h).
enum class DType : uint8_t { Float32, Float64, Int64, Bool, BFloat16 };

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kBFloat16 = DType::BFloat16;

// Each dtype's name, bytes an element, and rank in PyTorch's promotion order (the result type of
// a binary op: bool < int64 < bfloat16 < float32 < float64), in the enum's order.
struct DTypeInfo {
  std::string_view name;
  size_t size;
  int promotion_rank;
};
inline constexpr DTypeInfo kDTypeInfo[] = {
    {"float32", 4, 3}, {"float64", 8, 4}, {"int64", 8, 1}, {"bool", 1, 0}, {"bfloat16", 2, 2}};
// A DType made from a file's number may be out of range: it reads as "?", of size 0.
constexpr DTypeInfo dtype_info(DType d) {
  return static_cast<size_t>(d) < std::size(kDTypeInfo) ? kDTypeInfo[static_cast<size_t>(d)] : DTypeInfo{"?", 0, 0};
}
constexpr size_t dtype_size(DType d) { return dtype_info(d).size; }
constexpr std::string_view dtype_name(DType d) { return dtype_info(d).name; }

// As torch.is_floating_point: bfloat16 is a floating type (though a storage type here).
constexpr bool is_floating(DType d) { return d == DType::Float32 || d == DType::Float64 || d == DType::BFloat16; }

// Whether an int64 element holds `value` (its fraction dropped, as a conversion drops it): NaN,
// ±inf and the numbers outside [-2^63, 2^63) have no int64 value, and converting them is undefined
// behaviour (it gave INT64_MIN).
constexpr bool fits_int64(double value) { return value >= -0x1p63 && value < 0x1p63; }

// A number that is to become an element of `dtype`, refused when it has no value there, as
// PyTorch refuses it ("value cannot be converted to type int64_t without overflow"). A bool
// element holds any number (NaN is true, as in PyTorch).
inline void check_value_fits(double value, DType dtype, std::string_view op) {
  CPPGRAD_CHECK(dtype != DType::Int64 || fits_int64(value), "{}: value {} cannot be converted to int64 without overflow",
                op, value);
}

// A value that fills a tensor (full, scalar_tensor, fill_, masked_fill): refused as above, and
// also when it is finite but beyond the largest float32 or bfloat16, as PyTorch refuses such a
// fill. (A tensor's listed values and arange's become ±inf there instead, as in PyTorch.)
inline void check_fill_value(double value, DType dtype, std::string_view op) {
  check_value_fits(value, dtype, op);
  const double largest = dtype == DType::Float32 ? 0x1.fffffep127 : dtype == DType::BFloat16 ? 0x1.fep127 : 0.0;
  const bool finite = value - value == 0.0;  // false for NaN and ±inf
  CPPGRAD_CHECK(largest == 0.0 || !finite || (value <= largest && value >= -largest),
                "{}: value {} cannot be converted to {} without overflow", op, value, dtype_name(dtype));
}

constexpr int promotion_rank(DType d) { return dtype_info(d).promotion_rank; }
constexpr DType promote(DType a, DType b) { return promotion_rank(a) >= promotion_rank(b) ? a : b; }

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<bfloat16>() { return DType::BFloat16; }

// dispatch(dtype, "op", [&](auto tag) { using T = decltype(tag); ... })
// calls the lambda with a value of the C++ type behind `dtype`.
template <class F>
decltype(auto) dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    case DType::Bool: return f(bool{});
    case DType::BFloat16: return f(bfloat16{});
  }
  throw Error("dispatch: unknown dtype");
}

// What an arithmetic op says of a bfloat16 tensor.
[[noreturn]] inline void throw_bfloat16_arithmetic(std::string_view op) {
  throw Error(fmt::format("{}: bfloat16 tensors are for storage and autocast's matrix products; convert with "
                          ".to(kFloat32) first (tensor/autocast.h runs products in bfloat16)",
                          op));
}

// The same, for ops defined only on floating types; names the op when given another.
template <class F>
decltype(auto) dispatch_floating(DType dtype, std::string_view op, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::BFloat16: throw_bfloat16_arithmetic(op);
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
    case DType::BFloat16: throw_bfloat16_arithmetic(op);
    default: throw Error(fmt::format("{}: not defined for dtype {}", op, dtype_name(dtype)));
  }
}

}  // namespace cppgrad
