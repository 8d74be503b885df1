#include "io/safetensors/dtypes.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "io/common/absl_view.h"

namespace colossal::io {
namespace {

constexpr std::array<SafetensorsDType, 22> kDTypes = {{
    {"BOOL", 8},         {"F4", 4},           {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},   {"I8", 8},
    {"F8_E5M2", 8},      {"F8_E4M3", 8},      {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},
    {"F8_E5M2FNUZ", 8},  {"I16", 16},         {"U16", 16},    {"F16", 16},    {"BF16", 16}, {"I32", 32},
    {"U32", 32},         {"F32", 32},         {"C64", 64},    {"F64", 64},    {"I64", 64},  {"U64", 64},
}};

}  // namespace

std::span<const SafetensorsDType> SafetensorsDTypes() { return kDTypes; }

const SafetensorsDType* FindSafetensorsDType(std::string_view name) {
  for (const SafetensorsDType& dtype : kDTypes) {
    if (dtype.name == name) return &dtype;
  }
  return nullptr;
}

std::string SafetensorsDTypeList() {
  std::string out;
  for (const SafetensorsDType& dtype : kDTypes) {
    if (!out.empty()) out += ", ";
    out += dtype.name;
  }
  return out;
}

absl::StatusOr<int64_t> SafetensorsNumElements(std::span<const int64_t> shape) {
  bool any_zero = false;
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(shape), " has a negative dimension"));
    }
    any_zero = any_zero || dim == 0;
  }
  if (any_zero) return 0;
  int64_t n = 1;
  for (int64_t dim : shape) {
    if (n > INT64_MAX / dim) {
      return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(shape), " has more than 2^63 elements"));
    }
    n *= dim;
  }
  return n;
}

absl::StatusOr<uint64_t> SafetensorsTensorBytes(const SafetensorsDType& dtype, std::span<const int64_t> shape) {
  absl::StatusOr<int64_t> n = SafetensorsNumElements(shape);
  if (!n.ok()) return n.status();
  const uint64_t elements = static_cast<uint64_t>(*n);
  const uint64_t bits_per = static_cast<uint64_t>(dtype.bits);
  if (elements > static_cast<uint64_t>(INT64_MAX) / bits_per) {
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(dtype.name), " tensor of shape ", ShapeString(shape),
                                                   " would be larger than 2^60 bytes"));
  }
  const uint64_t bits = elements * bits_per;
  if (bits % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(elements, " elements of ", ToAbsl(dtype.name), " (", dtype.bits,
                                                   " bits each) do not fill whole bytes"));
  }
  return bits / 8;
}

std::string ShapeString(std::span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape.begin(), shape.end(), ", "), "]");
}

}  // namespace colossal::io
