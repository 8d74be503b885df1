// colossal::io — safetensors dtype names <-> colossal's kernels::DType.
//
// kernels/common/dtype.h is colossal's one table of element types; each of
// them has a safetensors name, while safetensors has more (I8, BOOL, FP8,
// ...) that colossal's kernels do not compute in.
//
//   absl::StatusOr<colossal::kernels::DType> dt = colossal::io::KernelDType("BF16");
//   // *dt == colossal::kernels::DType::kBF16
//   std::string_view name = colossal::io::SafetensorsDTypeName(colossal::kernels::DType::kF32);  // "F32"
#ifndef COLOSSAL_IO_SAFETENSORS_KERNEL_DTYPE_H_
#define COLOSSAL_IO_SAFETENSORS_KERNEL_DTYPE_H_

#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/common/dtype.h"

namespace colossal::io {

// The safetensors name of `dtype`: F32, F16, BF16, F64, I32, I64, U8, U16.
std::string_view SafetensorsDTypeName(kernels::DType dtype);

// The DType a safetensors dtype name stands for, or nullopt for one without
// a DType (and for unknown names).
std::optional<kernels::DType> FindKernelDType(std::string_view safetensors_dtype);

// As FindKernelDType, or InvalidArgument: "safetensors dtype 'I8' has no
// colossal dtype (colossal computes in F32, F16, BF16, F64, I32, I64, U8, U16)".
absl::StatusOr<kernels::DType> KernelDType(std::string_view safetensors_dtype);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_SAFETENSORS_KERNEL_DTYPE_H_
