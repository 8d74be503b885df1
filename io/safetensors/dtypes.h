// colossal::io — the element types of the safetensors format.
//
// The one table of safetensors dtype names ("F32", "BF16", "F8_E4M3", ...)
// and their sizes in bits, in the order the safetensors library lists them
// (0.8). Sub-byte types (F4, F6_*) pack elements with no padding, so a
// tensor of them must fill whole bytes.
//
//   const colossal::io::SafetensorsDType* dt = colossal::io::FindSafetensorsDType("BF16");
//   // dt->bits == 16
//   absl::StatusOr<uint64_t> bytes = colossal::io::SafetensorsTensorBytes(*dt, {768, 2304});
//   // 3538944
//
// kernel_dtype.h maps these names to colossal's kernels::DType.
#ifndef COLOSSAL_IO_SAFETENSORS_DTYPES_H_
#define COLOSSAL_IO_SAFETENSORS_DTYPES_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace colossal::io {

struct SafetensorsDType {
  std::string_view name;  // as written in headers: "F32"
  int bits;               // per element: 4, 6, 8, 16, 32 or 64
};

// Every dtype safetensors knows.
std::span<const SafetensorsDType> SafetensorsDTypes();

// The dtype named `name` (case-sensitive, as the format is), or nullptr.
const SafetensorsDType* FindSafetensorsDType(std::string_view name);

// "BOOL, F4, F6_E2M3, ..., U64", for error messages.
std::string SafetensorsDTypeList();

// The product of `shape` (1 for a scalar, shape []). InvalidArgument for a
// negative dimension or a product beyond int64.
absl::StatusOr<int64_t> SafetensorsNumElements(std::span<const int64_t> shape);

// Bytes of a tensor of `dtype` and `shape`. InvalidArgument for a bad shape
// (as above), a size beyond int64, or sub-byte elements that do not fill
// whole bytes. Messages say what is wrong, without naming a file or tensor.
absl::StatusOr<uint64_t> SafetensorsTensorBytes(const SafetensorsDType& dtype, std::span<const int64_t> shape);

// "[768, 2304]" (and "[]" for a scalar), for messages.
std::string ShapeString(std::span<const int64_t> shape);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_SAFETENSORS_DTYPES_H_
