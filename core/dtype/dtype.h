// colossal::core — element types, as users name them.
//
// The dtype table itself is kernels/common/dtype.h (one table for the whole
// project); core re-exports it and adds what the Tensor runtime needs: parsing
// user strings with a suggestion for typos, and the DType of a C++ type.
//
//   absl::StatusOr<DType> t = parse_dtype("bf16");     // DType::kBF16
//   parse_dtype("bfloat61").status().message();
//     // unknown dtype "bfloat61"; did you mean "bfloat16"? (accepted: float32 ...)
//   dtype_name(DType::kBF16);                           // "bfloat16"
//   static_assert(dtype_of<kernels::BFloat16>() == DType::kBF16);
#ifndef COLOSSAL_CORE_DTYPE_DTYPE_H_
#define COLOSSAL_CORE_DTYPE_DTYPE_H_

#include <cstdint>
#include <string>
#include <type_traits>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/common/dtype.h"
#include "kernels/common/half.h"

namespace colossal::core {

using kernels::DType;
using kernels::dtype_is_floating;
using kernels::dtype_name;
using kernels::dtype_size;

// Parses a dtype as a user writes it, ASCII case-insensitive, surrounding
// whitespace ignored. Accepted: each canonical name (dtype_name: "float32",
// "bfloat16", ...) and the common short forms:
//   float32: fp32 f32 float      float16: fp16 f16 half       bfloat16: bf16
//   float64: fp64 f64 double     int32: i32 int               int64: i64 long
//   uint8: u8 byte               uint16: u16
// Anything else is InvalidArgumentError naming the input, the closest spelling
// when one is close, and the accepted names.
absl::StatusOr<DType> parse_dtype(absl::string_view text);

// Every accepted spelling of `dtype`, canonical name first (for help texts).
std::string dtype_spellings(DType dtype);

// The DType whose elements are C++ type T: float, double, kernels::Half,
// kernels::BFloat16, int32_t, int64_t, uint8_t, uint16_t. Other types do not compile.
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) {
    return DType::kF32;
  } else if constexpr (std::is_same_v<T, kernels::Half>) {
    return DType::kF16;
  } else if constexpr (std::is_same_v<T, kernels::BFloat16>) {
    return DType::kBF16;
  } else if constexpr (std::is_same_v<T, double>) {
    return DType::kF64;
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return DType::kI32;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return DType::kI64;
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    return DType::kU8;
  } else if constexpr (std::is_same_v<T, uint16_t>) {
    return DType::kU16;
  } else {
    static_assert(!sizeof(T), "dtype_of<T>: T is not an element type of colossal");
  }
}

}  // namespace colossal::core

#endif  // COLOSSAL_CORE_DTYPE_DTYPE_H_
