#include "io/safetensors/kernel_dtype.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "io/common/absl_view.h"

namespace colossal::io {
namespace {

// Every DType of kernels/common/dtype.h's table, for lookups by name.
constexpr kernels::DType kAllDTypes[] = {
#define COLOSSAL_IO_DTYPE_ENTRY(e, name, size, fp) kernels::DType::e,
    COLOSSAL_DTYPE_TABLE(COLOSSAL_IO_DTYPE_ENTRY)
#undef COLOSSAL_IO_DTYPE_ENTRY
};

}  // namespace

std::string_view SafetensorsDTypeName(kernels::DType dtype) {
  // No default: the compiler flags a DType added to the table but not here.
  switch (dtype) {
    case kernels::DType::kF32:
      return "F32";
    case kernels::DType::kF16:
      return "F16";
    case kernels::DType::kBF16:
      return "BF16";
    case kernels::DType::kF64:
      return "F64";
    case kernels::DType::kI32:
      return "I32";
    case kernels::DType::kI64:
      return "I64";
    case kernels::DType::kU8:
      return "U8";
    case kernels::DType::kU16:
      return "U16";
  }
  return "";
}

std::optional<kernels::DType> FindKernelDType(std::string_view safetensors_dtype) {
  for (kernels::DType dtype : kAllDTypes) {
    if (SafetensorsDTypeName(dtype) == safetensors_dtype) return dtype;
  }
  return std::nullopt;
}

absl::StatusOr<kernels::DType> KernelDType(std::string_view safetensors_dtype) {
  if (std::optional<kernels::DType> dtype = FindKernelDType(safetensors_dtype)) return *dtype;
  std::string supported;
  for (kernels::DType dtype : kAllDTypes) {
    if (!supported.empty()) supported += ", ";
    supported += SafetensorsDTypeName(dtype);
  }
  return absl::InvalidArgumentError(absl::StrCat("safetensors dtype '", ToAbsl(safetensors_dtype),
                                                 "' has no colossal dtype (colossal computes in ", supported, ")"));
}

}  // namespace colossal::io
