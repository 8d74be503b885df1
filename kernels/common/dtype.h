// colossal::kernels — element types shared by every kernel family.
//
// The one table of dtypes in colossal (core/ reuses it). Kernels take a DType
// and raw pointers; a family states which dtypes each function accepts and
// returns KernelStatus::unsupported for the others.
//
//   using colossal::kernels::DType;
//   size_t bytes = n * dtype_size(DType::kBF16);   // 2 bytes per element
//   const char* name = dtype_name(DType::kBF16);  // "bfloat16"
#ifndef COLOSSAL_KERNELS_COMMON_DTYPE_H_
#define COLOSSAL_KERNELS_COMMON_DTYPE_H_

#include <cstddef>

namespace colossal::kernels {

// X(enumerator, name, size in bytes, is floating point)
#define COLOSSAL_DTYPE_TABLE(X)   \
  X(kF32, "float32", 4, true)     \
  X(kF16, "float16", 2, true)     \
  X(kBF16, "bfloat16", 2, true)   \
  X(kF64, "float64", 8, true)     \
  X(kI32, "int32", 4, false)      \
  X(kI64, "int64", 8, false)      \
  X(kU8, "uint8", 1, false)       \
  X(kU16, "uint16", 2, false)

enum class DType : int {
#define COLOSSAL_DTYPE_ENUM(e, name, size, fp) e,
  COLOSSAL_DTYPE_TABLE(COLOSSAL_DTYPE_ENUM)
#undef COLOSSAL_DTYPE_ENUM
};

// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
#define COLOSSAL_DTYPE_SIZE(e, name, size, fp) \
  case DType::e:                               \
    return size;
    COLOSSAL_DTYPE_TABLE(COLOSSAL_DTYPE_SIZE)
#undef COLOSSAL_DTYPE_SIZE
  }
  return 0;
}

// The dtype's name as users write it ("float32", "bfloat16", ...).
constexpr const char* dtype_name(DType t) {
  switch (t) {
#define COLOSSAL_DTYPE_NAME(e, name, size, fp) \
  case DType::e:                               \
    return name;
    COLOSSAL_DTYPE_TABLE(COLOSSAL_DTYPE_NAME)
#undef COLOSSAL_DTYPE_NAME
  }
  return "unknown";
}

constexpr bool dtype_is_floating(DType t) {
  switch (t) {
#define COLOSSAL_DTYPE_FP(e, name, size, fp) \
  case DType::e:                             \
    return fp;
    COLOSSAL_DTYPE_TABLE(COLOSSAL_DTYPE_FP)
#undef COLOSSAL_DTYPE_FP
  }
  return false;
}

}  // namespace colossal::kernels

#endif  // COLOSSAL_KERNELS_COMMON_DTYPE_H_
