#include "io/safetensors/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "io/common/absl_view.h"
#include "io/common/file_util.h"
#include "io/safetensors/dtypes.h"
#include "nlohmann/json.hpp"

namespace colossal::io {
namespace {

using Json = nlohmann::json;

// The deepest JSON nesting a header may have (it needs 3).
constexpr int kMaxJsonDepth = 64;

// Collects what a file's header says, then checks it as a whole.
class HeaderParser {
 public:
  HeaderParser(std::string_view path, std::span<const std::byte> data)
      : prefix_(absl::StrCat("safetensors file '", ToAbsl(path), "': ")), data_(data) {}

  absl::Status Parse(std::string_view text, std::vector<SafetensorsTensor>* tensors, SafetensorsMetadata* metadata);

 private:
  absl::Status Invalid(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(prefix_, ToAbsl(what)));
  }
  absl::Status TensorInvalid(std::string_view name, std::string_view what) const {
    return Invalid(absl::StrCat("tensor '", ToAbsl(name), "': ", ToAbsl(what)));
  }
  absl::StatusOr<Json> ParseJson(std::string_view text) const;
  absl::Status ParseMetadata(const Json& value, SafetensorsMetadata* metadata) const;
  absl::StatusOr<SafetensorsTensor> ParseEntry(const std::string& name, const Json& value) const;
  absl::Status CheckLayout(std::vector<SafetensorsTensor>* tensors) const;

  std::string prefix_;
  std::span<const std::byte> data_;
};

// A JSON value shortened for messages.
std::string Excerpt(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// A JSON integer in [0, INT64_MAX], or nullopt.
std::optional<int64_t> NonNegativeInt(const Json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;  // negatives are number_integer
  const uint64_t v = value.get<uint64_t>();
  if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<int64_t>(v);
}

absl::StatusOr<Json> HeaderParser::ParseJson(std::string_view text) const {
  // nlohmann keeps the last of duplicate keys silently; the callback notices them.
  std::vector<std::set<std::string>> open_objects;
  std::string top_level_key;
  std::string duplicate;
  // A header needs 3 levels ({name: {"shape": [...]}}); deeper nesting is
  // refused while parsing: dump() (error excerpts) recurses once per level,
  // and a 200 kB header of '[' overflowed the stack (tests/fuzz corpus).
  struct TooDeep {};
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth) {
      throw TooDeep{};
    }
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (depth == 1) top_level_key = key;
        if (!open_objects.empty() && !open_objects.back().insert(key).second && duplicate.empty()) {
          if (depth == 1) {
            duplicate = key == "__metadata__" ? "'__metadata__' appears twice in the header"
                                              : absl::StrCat("tensor '", key, "' appears twice in the header");
          } else {
            duplicate = absl::StrCat(top_level_key == "__metadata__" ? "" : "tensor '", top_level_key,
                                     top_level_key == "__metadata__" ? "" : "'", ": key '", key, "' appears twice");
          }
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  Json json;
  try {
    json = Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    std::string_view why = e.what();
    if (const size_t bracket = why.find("] "); absl::StartsWith(ToAbsl(why), "[json.exception.") &&
                                                 bracket != std::string_view::npos) {
      why.remove_prefix(bracket + 2);
    }
    return Invalid(absl::StrCat("the header is not valid JSON: ", ToAbsl(why)));
  } catch (const TooDeep&) {
    return Invalid(absl::StrCat("the header nests JSON values more than ", kMaxJsonDepth,
                                " levels deep (a safetensors header needs 3)"));
  }
  if (!duplicate.empty()) return Invalid(duplicate);
  if (!json.is_object()) return Invalid("the header is not a JSON object");
  return json;
}

absl::Status HeaderParser::ParseMetadata(const Json& value, SafetensorsMetadata* metadata) const {
  if (!value.is_object()) {
    return Invalid(absl::StrCat("__metadata__ must be an object of strings, not ", Excerpt(value)));
  }
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) {
      return Invalid(
          absl::StrCat("__metadata__ must map strings to strings, but '", key, "' is ", Excerpt(v)));
    }
    (*metadata)[key] = v.get<std::string>();
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsTensor> HeaderParser::ParseEntry(const std::string& name, const Json& value) const {
  if (!value.is_object()) {
    return TensorInvalid(name, absl::StrCat("expected an object with dtype, shape and data_offsets, got ",
                                            Excerpt(value)));
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(field)) return TensorInvalid(name, absl::StrCat("missing '", field, "'"));
  }
  SafetensorsTensor tensor;
  tensor.name = name;

  const Json& dtype = value["dtype"];
  if (!dtype.is_string()) return TensorInvalid(name, absl::StrCat("dtype must be a string, not ", Excerpt(dtype)));
  const SafetensorsDType* dt = FindSafetensorsDType(dtype.get_ref<const std::string&>());
  if (dt == nullptr) {
    return TensorInvalid(name, absl::StrCat("unknown dtype '", dtype.get_ref<const std::string&>(),
                                            "' (safetensors dtypes: ", SafetensorsDTypeList(), ")"));
  }
  tensor.dtype = dt->name;
  tensor.dtype_bits = dt->bits;

  const Json& shape = value["shape"];
  bool shape_ok = shape.is_array();
  if (shape_ok) {
    for (const Json& dim : shape) {
      const std::optional<int64_t> d = NonNegativeInt(dim);
      if (!d) {
        shape_ok = false;
        break;
      }
      tensor.shape.push_back(*d);
    }
  }
  if (!shape_ok) {
    return TensorInvalid(name, absl::StrCat("shape must be a list of non-negative integers, not ", Excerpt(shape)));
  }

  const Json& offsets = value["data_offsets"];
  std::optional<int64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = NonNegativeInt(offsets[0]);
    end = NonNegativeInt(offsets[1]);
  }
  if (!begin || !end || *end < *begin) {
    return TensorInvalid(name, absl::StrCat("data_offsets must be [begin, end] with integers 0 <= begin <= end, not ",
                                            Excerpt(offsets)));
  }
  tensor.begin = static_cast<uint64_t>(*begin);
  tensor.end = static_cast<uint64_t>(*end);

  absl::StatusOr<uint64_t> bytes = SafetensorsTensorBytes(*dt, tensor.shape);
  if (!bytes.ok()) return TensorInvalid(name, FromAbsl(bytes.status().message()));
  if (*bytes != tensor.end - tensor.begin) {
    return TensorInvalid(name, absl::StrCat("dtype ", ToAbsl(tensor.dtype), " and shape ", ShapeString(tensor.shape),
                                            " need ", *bytes, " bytes but data_offsets [", tensor.begin, ", ",
                                            tensor.end, "] hold ", tensor.end - tensor.begin));
  }
  return tensor;
}

absl::Status HeaderParser::CheckLayout(std::vector<SafetensorsTensor>* tensors) const {
  const uint64_t data_bytes = data_.size();
  for (const SafetensorsTensor& t : *tensors) {
    if (t.end > data_bytes) {
      return absl::DataLossError(absl::StrCat(prefix_, "tensor '", t.name, "': data_offsets [", t.begin, ", ", t.end,
                                              "] run past the end of the data (", data_bytes,
                                              " bytes after the header): truncated?"));
    }
  }
  std::sort(tensors->begin(), tensors->end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& t : *tensors) {
    if (t.begin < covered) {
      return Invalid(absl::StrCat("tensors '", previous->name, "' (data_offsets [", previous->begin, ", ",
                                  previous->end, "]) and '", t.name, "' ([", t.begin, ", ", t.end, "]) overlap"));
    }
    if (t.begin > covered) {
      return Invalid(absl::StrCat("data bytes [", covered, ", ", t.begin, ") belong to no tensor (",
                                  previous == nullptr ? std::string("before the first tensor")
                                                      : absl::StrCat("between '", previous->name, "' and '", t.name,
                                                                     "'"),
                                  "); tensors must cover the data contiguously"));
    }
    covered = t.end;
    previous = &t;
  }
  if (covered != data_bytes) {
    return absl::DataLossError(absl::StrCat(prefix_, "the last ", data_bytes - covered,
                                            " bytes of the file belong to no tensor (the tensors end at data byte ",
                                            covered, " of ", data_bytes, ")"));
  }
  return absl::OkStatus();
}

absl::Status HeaderParser::Parse(std::string_view text, std::vector<SafetensorsTensor>* tensors,
                                 SafetensorsMetadata* metadata) {
  if (text.empty() || text.front() != '{') {
    return Invalid("the header does not start with '{' (not a safetensors file?)");
  }
  absl::StatusOr<Json> json = ParseJson(text);
  if (!json.ok()) return json.status();
  for (const auto& [key, value] : json->items()) {
    if (key == "__metadata__") {
      if (absl::Status s = ParseMetadata(value, metadata); !s.ok()) return s;
      continue;
    }
    absl::StatusOr<SafetensorsTensor> tensor = ParseEntry(key, value);
    if (!tensor.ok()) return tensor.status();
    tensors->push_back(*std::move(tensor));
  }
  if (absl::Status s = CheckLayout(tensors); !s.ok()) return s;
  for (SafetensorsTensor& t : *tensors) t.data = data_.subspan(t.begin, t.end - t.begin);
  return absl::OkStatus();
}

}  // namespace

int64_t SafetensorsTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated not to overflow
  return n;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open safetensors file", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot stat safetensors file", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat("safetensors file '", path, "' is not a regular file"));
  }
  const uint64_t bytes = static_cast<uint64_t>(st.st_size);
  if (bytes < 8) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat("safetensors file '", path, "' has ", bytes,
                                            " bytes, fewer than the 8-byte header length (truncated or empty)"));
  }
  void* mapping = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (mapping == MAP_FAILED) return ErrnoStatus(err, "cannot mmap safetensors file", path);

  SafetensorsFile file;
  file.path_ = path;
  file.mapping_ = mapping;
  file.mapping_bytes_ = bytes;
  const auto* p = static_cast<const unsigned char*>(mapping);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | p[i];
  if (n > kSafetensorsMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors file '", path, "': header length ", n,
                                                   " is over the format's limit of ", kSafetensorsMaxHeaderBytes,
                                                   " bytes (not a safetensors file?)"));
  }
  if (n > bytes - 8) {
    return absl::DataLossError(absl::StrCat("safetensors file '", path, "': header length ", n,
                                            " runs past the end of the file (", bytes, " bytes): truncated?"));
  }
  file.header_bytes_ = n;
  const std::string_view text(reinterpret_cast<const char*>(p + 8), n);
  const std::span<const std::byte> data(static_cast<const std::byte*>(mapping) + 8 + n, bytes - 8 - n);
  HeaderParser parser(path, data);
  if (absl::Status s = parser.Parse(text, &file.tensors_, &file.metadata_); !s.ok()) return s;
  for (size_t i = 0; i < file.tensors_.size(); ++i) file.by_name_.emplace(file.tensors_[i].name, i);
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_bytes_(std::exchange(other.mapping_bytes_, 0)),
      header_bytes_(other.header_bytes_),
      tensors_(std::move(other.tensors_)),
      by_name_(std::move(other.by_name_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    header_bytes_ = other.header_bytes_;
    tensors_ = std::move(other.tensors_);
    by_name_ = std::move(other.by_name_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { Unmap(); }

void SafetensorsFile::Unmap() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  tensors_.clear();
  by_name_.clear();
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<const SafetensorsTensor*> SafetensorsFile::Get(std::string_view name) const {
  if (const SafetensorsTensor* t = Find(name)) return t;
  std::vector<std::string_view> names;
  names.reserve(tensors_.size());
  for (const SafetensorsTensor& t : tensors_) names.push_back(t.name);
  return MissingTensorError(absl::StrCat("safetensors file '", path_, "'"), name, names);
}

absl::Status MissingTensorError(std::string_view where, std::string_view name,
                                std::span<const std::string_view> names) {
  std::string hint;
  for (std::string_view candidate : names) {
    const std::string_view longer = candidate.size() > name.size() ? candidate : name;
    const std::string_view shorter = candidate.size() > name.size() ? name : candidate;
    if (longer.size() > shorter.size() + 1 && longer.ends_with(shorter) &&
        longer[longer.size() - shorter.size() - 1] == '.') {
      hint = absl::StrCat(" (did you mean '", ToAbsl(candidate), "'?)");
      break;
    }
  }
  return absl::NotFoundError(absl::StrCat(ToAbsl(where), " has no tensor '", ToAbsl(name), "'", hint, "; it has ",
                                          names.size(), names.size() == 1 ? " tensor" : " tensors"));
}

}  // namespace colossal::io
