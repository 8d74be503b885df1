#include "core/dtype/dtype.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status/suggest.h"

namespace colossal::core {
namespace {

// Short spellings beside each dtype's canonical name (from kernels/common/dtype.h).
struct Alias {
  DType dtype;
  const char* spelling;
};
constexpr Alias kAliases[] = {
    {DType::kF32, "fp32"},  {DType::kF32, "f32"},   {DType::kF32, "float"},
    {DType::kF16, "fp16"},  {DType::kF16, "f16"},   {DType::kF16, "half"},
    {DType::kBF16, "bf16"}, {DType::kF64, "fp64"},  {DType::kF64, "f64"},
    {DType::kF64, "double"}, {DType::kI32, "i32"},  {DType::kI32, "int"},
    {DType::kI64, "i64"},   {DType::kI64, "long"},  {DType::kU8, "u8"},
    {DType::kU8, "byte"},   {DType::kU16, "u16"},
};

constexpr DType kAllDTypes[] = {
#define COLOSSAL_DTYPE_ENUMERATOR(e, name, size, fp) DType::e,
    COLOSSAL_DTYPE_TABLE(COLOSSAL_DTYPE_ENUMERATOR)
#undef COLOSSAL_DTYPE_ENUMERATOR
};

}  // namespace

std::string dtype_spellings(DType dtype) {
  std::vector<absl::string_view> names = {dtype_name(dtype)};
  for (const Alias& a : kAliases) {
    if (a.dtype == dtype) names.push_back(a.spelling);
  }
  return absl::StrJoin(names, " ");
}

absl::StatusOr<DType> parse_dtype(absl::string_view text) {
  const std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  std::vector<absl::string_view> spellings;
  for (DType t : kAllDTypes) {
    if (key == dtype_name(t)) return t;
    spellings.push_back(dtype_name(t));
  }
  for (const Alias& a : kAliases) {
    if (key == a.spelling) return a.dtype;
    spellings.push_back(a.spelling);
  }
  std::vector<std::string> accepted;
  for (DType t : kAllDTypes) accepted.push_back(dtype_spellings(t));
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype \"", text, "\"",
                                                 did_you_mean(key, spellings), " (accepted: ",
                                                 absl::StrJoin(accepted, ", "), ")"));
}

}  // namespace colossal::core
