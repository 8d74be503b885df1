#include "io/safetensors/writer.h"

#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "io/common/absl_view.h"
#include "io/common/atomic_file.h"
#include "io/safetensors/dtypes.h"
#include "nlohmann/json.hpp"

namespace colossal::io {
namespace {

using OrderedJson = nlohmann::ordered_json;

absl::Status Invalid(std::string_view where, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(ToAbsl(where), ": ", ToAbsl(what)));
}

}  // namespace

absl::Status CheckSafetensorsData(std::span<const SafetensorsEntry> tensors, std::string_view where) {
  for (const SafetensorsEntry& t : tensors) {
    if (t.data == nullptr && t.bytes > 0) {
      return Invalid(where, absl::StrCat("tensor '", t.name, "' has no data pointer"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EncodeSafetensorsHeader(std::span<const SafetensorsEntry> tensors,
                                                    const SafetensorsMetadata& metadata,
                                                    const SafetensorsWriteOptions& options, std::string_view where) {
  const uint64_t alignment = options.alignment;
  if (alignment < 8 || (alignment & (alignment - 1)) != 0) {
    return Invalid(where, absl::StrCat("alignment ", alignment, " must be a power of two, at least 8"));
  }
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson meta = OrderedJson::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const SafetensorsEntry& t : tensors) {
    if (t.name.empty()) return Invalid(where, "a tensor has an empty name");
    if (t.name == "__metadata__") {
      return Invalid(where, "'__metadata__' is reserved for the header's metadata and cannot name a tensor");
    }
    if (!names.insert(t.name).second) return Invalid(where, absl::StrCat("tensor '", t.name, "' is given twice"));
    const SafetensorsDType* dtype = FindSafetensorsDType(t.dtype);
    if (dtype == nullptr) {
      return Invalid(where, absl::StrCat("tensor '", t.name, "': unknown dtype '", t.dtype,
                                         "' (safetensors dtypes: ", SafetensorsDTypeList(), ")"));
    }
    absl::StatusOr<uint64_t> bytes = SafetensorsTensorBytes(*dtype, t.shape);
    if (!bytes.ok()) return Invalid(where, absl::StrCat("tensor '", t.name, "': ", bytes.status().message()));
    if (*bytes != t.bytes) {
      return Invalid(where, absl::StrCat("tensor '", t.name, "': dtype ", t.dtype, " and shape ", ShapeString(t.shape),
                                         " need ", *bytes, " bytes, but ", t.bytes, " were given"));
    }
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = t.dtype;
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + t.bytes};
    header[t.name] = std::move(entry);
    offset += t.bytes;
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const OrderedJson::exception& e) {
    return Invalid(where, "a tensor name or metadata string is not valid UTF-8");
  }
  // Spaces so that 8 + N is a multiple of the alignment.
  const uint64_t unpadded = 8 + json.size();
  json.append((alignment - unpadded % alignment) % alignment, ' ');
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += json;
  return out;
}

absl::Status WriteSafetensors(const std::string& path, std::span<const SafetensorsEntry> tensors,
                              const SafetensorsMetadata& metadata, const SafetensorsWriteOptions& options) {
  const std::string where = absl::StrCat("safetensors file '", path, "'");
  absl::StatusOr<std::string> header = EncodeSafetensorsHeader(tensors, metadata, options, where);
  if (!header.ok()) return header.status();
  if (absl::Status s = CheckSafetensorsData(tensors, where); !s.ok()) return s;
  absl::StatusOr<AtomicFileWriter> out = AtomicFileWriter::Create(path);
  if (!out.ok()) return out.status();
  if (absl::Status s = out->Write(*header); !s.ok()) return s;
  for (const SafetensorsEntry& t : tensors) {
    if (absl::Status s = out->Write(t.data, t.bytes); !s.ok()) return s;
  }
  return out->Commit();
}

}  // namespace colossal::io
