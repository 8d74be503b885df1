#include "io/safetensors/sharded.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "io/common/absl_view.h"
#include "io/common/atomic_file.h"
#include "io/common/file_util.h"
#include "nlohmann/json.hpp"

namespace colossal::io {
namespace {

using Json = nlohmann::json;

std::string JoinPath(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  return absl::StrCat(ToAbsl(dir), dir.back() == '/' ? "" : "/", ToAbsl(name));
}

// The folder part of `path` ("." for a bare name).
std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// True for "<prefix>-NNNNN-of-NNNNN.safetensors".
bool IsShardName(std::string_view name, std::string_view prefix) {
  constexpr std::string_view kSuffix = ".safetensors";
  if (!name.starts_with(prefix) || !name.ends_with(kSuffix)) return false;
  std::string_view middle = name.substr(prefix.size(), name.size() - prefix.size() - kSuffix.size());
  // "-00001-of-00003"
  if (middle.size() != 15 || middle[0] != '-' || middle.substr(6, 4) != "-of-") return false;
  for (size_t i : {1, 2, 3, 4, 5, 10, 11, 12, 13, 14}) {
    if (middle[i] < '0' || middle[i] > '9') return false;
  }
  return true;
}

// Removes files of an earlier save under `prefix` that `keep` does not list.
absl::Status RemoveStaleFiles(const std::string& dir, std::string_view prefix, const std::set<std::string>& keep) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, "cannot list folder", dir);
  std::vector<std::string> stale;
  const std::string single = absl::StrCat(ToAbsl(prefix), ".safetensors");
  const std::string index = absl::StrCat(ToAbsl(prefix), ".safetensors.index.json");
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (keep.count(name) != 0) continue;
    if (name == single || name == index || IsShardName(name, prefix)) stale.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : stale) {
    const std::string path = JoinPath(dir, name);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, "cannot remove the stale checkpoint file", path);
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string SafetensorsShardName(std::string_view prefix, size_t index, size_t count) {
  char numbers[64];
  std::snprintf(numbers, sizeof(numbers), "-%05zu-of-%05zu", index, count);
  return absl::StrCat(ToAbsl(prefix), numbers, ".safetensors");
}

std::vector<std::vector<size_t>> PlanSafetensorsShards(std::span<const SafetensorsEntry> tensors,
                                                       uint64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards(1);
  uint64_t bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!shards.back().empty() && bytes + tensors[i].bytes > max_shard_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(i);
    bytes += tensors[i].bytes;
  }
  return shards;
}

absl::StatusOr<ShardedSafetensorsWriter> ShardedSafetensorsWriter::Create(
    const std::string& dir, std::span<const SafetensorsEntry> tensors, const SafetensorsMetadata& metadata,
    const ShardedWriteOptions& options) {
  const std::string where = absl::StrCat("checkpoint '", JoinPath(dir, options.prefix), "'");
  if (options.prefix.empty() || options.prefix.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": prefix '", options.prefix, "' must be a non-empty file name without '/'"));
  }
  if (options.max_shard_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": max_shard_bytes must be positive"));
  }
  // Everything is checked before the first file is created.
  absl::StatusOr<std::string> all = EncodeSafetensorsHeader(tensors, metadata, options.file_options, where);
  if (!all.ok()) return all.status();

  ShardedSafetensorsWriter out;
  out.dir_ = dir;
  out.where_ = where;
  out.prefix_ = options.prefix;
  out.places_.resize(tensors.size());
  const std::vector<std::vector<size_t>> plan = PlanSafetensorsShards(tensors, options.max_shard_bytes);
  Json weight_map = Json::object();
  for (size_t f = 0; f < plan.size(); ++f) {
    const std::string name = plan.size() == 1 ? absl::StrCat(options.prefix, ".safetensors")
                                              : SafetensorsShardName(options.prefix, f + 1, plan.size());
    std::vector<SafetensorsEntry> part;
    part.reserve(plan[f].size());
    for (size_t i : plan[f]) part.push_back(tensors[i]);
    absl::StatusOr<std::string> header = EncodeSafetensorsHeader(part, metadata, options.file_options, where);
    if (!header.ok()) return header.status();
    uint64_t offset = header->size();
    for (size_t i : plan[f]) {
      out.places_[i] = Place{tensors[i].name, f, offset, tensors[i].bytes, {}};
      offset += tensors[i].bytes;
      weight_map[tensors[i].name] = name;
      out.total_size_ += tensors[i].bytes;
    }
    absl::StatusOr<AtomicFileWriter> file = AtomicFileWriter::Create(JoinPath(dir, name));
    if (!file.ok()) return file.status();
    if (absl::Status st = file->Write(*header); !st.ok()) return st;
    if (absl::Status st = file->Allocate(offset); !st.ok()) return st;
    out.files_.push_back(*std::move(file));
    out.file_names_.push_back(name);
  }
  if (plan.size() > 1) {
    Json index = {{"metadata", {{"total_size", out.total_size_}}}, {"weight_map", std::move(weight_map)}};
    try {
      out.index_text_ = index.dump(2) + "\n";
    } catch (const Json::exception&) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": a tensor name is not valid UTF-8"));
    }
  }
  return out;
}

absl::Status ShardedSafetensorsWriter::Write(size_t tensor, uint64_t byte_offset, const void* data, size_t bytes) {
  if (!error_.ok()) return error_;
  if (tensor >= places_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": tensor ", tensor, " of ", places_.size()));
  }
  Place& p = places_[tensor];
  if (byte_offset > p.bytes || bytes > p.bytes - byte_offset) {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": tensor '", p.name, "': bytes [", byte_offset, ", ",
                                                   byte_offset + bytes, ") past its ", p.bytes));
  }
  if (bytes == 0) return absl::OkStatus();
  uint64_t begin = byte_offset, end = byte_offset + bytes;
  // The first written range ending after `begin` must start at or after `end`.
  auto next = p.written.upper_bound(begin);
  auto prev = next == p.written.begin() ? p.written.end() : std::prev(next);
  if ((prev != p.written.end() && prev->second > begin) || (next != p.written.end() && next->first < end)) {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": tensor '", p.name, "': bytes [", begin, ", ", end,
                                                   ") overlap bytes written before"));
  }
  if (absl::Status st = files_[p.file].WriteAt(p.offset + byte_offset, data, bytes); !st.ok()) {
    error_ = st;
    return st;
  }
  if (prev != p.written.end() && prev->second == begin) {
    begin = prev->first;
    p.written.erase(prev);
  }
  if (next != p.written.end() && next->first == end) {
    end = next->second;
    p.written.erase(next);
  }
  p.written.emplace(begin, end);
  return absl::OkStatus();
}

absl::StatusOr<ShardedWriteResult> ShardedSafetensorsWriter::Commit() {
  if (!error_.ok()) return error_;
  for (const Place& p : places_) {
    const uint64_t have = p.written.empty() ? 0 : p.written.begin()->second - p.written.begin()->first;
    if (p.bytes > 0 && (p.written.size() != 1 || have != p.bytes)) {
      error_ = absl::FailedPreconditionError(absl::StrCat(where_, ": tensor '", p.name, "' has ",
                                                          p.bytes, " bytes, not all of them written"));
      return error_;
    }
  }
  ShardedWriteResult result;
  result.total_size = total_size_;
  for (size_t f = 0; f < files_.size(); ++f) {
    if (absl::Status st = files_[f].Commit(); !st.ok()) {
      error_ = st;
      return st;
    }
    result.files.push_back(file_names_[f]);
  }
  if (!index_text_.empty()) {
    result.index_file = absl::StrCat(prefix_, ".safetensors.index.json");
    if (absl::Status st = WriteFileAtomically(JoinPath(dir_, result.index_file), index_text_); !st.ok()) {
      error_ = st;
      return st;
    }
  }
  std::set<std::string> keep(result.files.begin(), result.files.end());
  if (!result.index_file.empty()) keep.insert(result.index_file);
  if (absl::Status st = RemoveStaleFiles(dir_, prefix_, keep); !st.ok()) {
    error_ = st;
    return st;
  }
  error_ = absl::FailedPreconditionError(absl::StrCat(where_, ": already committed"));
  return result;
}

absl::StatusOr<ShardedWriteResult> WriteShardedSafetensors(const std::string& dir,
                                                           std::span<const SafetensorsEntry> tensors,
                                                           const SafetensorsMetadata& metadata,
                                                           const ShardedWriteOptions& options) {
  absl::StatusOr<ShardedSafetensorsWriter> out = ShardedSafetensorsWriter::Create(dir, tensors, metadata, options);
  if (!out.ok()) return out.status();
  // Checked after Create's own checks, whose messages come first.
  if (absl::Status st = CheckSafetensorsData(tensors, absl::StrCat("checkpoint '", JoinPath(dir, options.prefix), "'"));
      !st.ok()) {
    return st;
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (absl::Status st = out->Write(i, 0, tensors[i].data, tensors[i].bytes); !st.ok()) return st;
  }
  return out->Commit();
}

// ---------------------------------------------------------------------------
// ShardedSafetensors

absl::StatusOr<ShardedSafetensors> ShardedSafetensors::Open(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot open checkpoint", path);
  if (S_ISDIR(st.st_mode)) {
    const std::string index = JoinPath(path, "model.safetensors.index.json");
    const std::string single = JoinPath(path, "model.safetensors");
    if (::access(index.c_str(), F_OK) == 0) return OpenIndex(index);
    if (::access(single.c_str(), F_OK) == 0) return Open(single);
    return absl::NotFoundError(absl::StrCat("checkpoint folder '", path,
                                            "' has neither model.safetensors.index.json nor model.safetensors"));
  }
  if (absl::EndsWith(path, ".json")) return OpenIndex(path);
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  ShardedSafetensors ckpt;
  for (size_t i = 0; i < file->tensors().size(); ++i) {
    ckpt.by_name_.emplace(file->tensors()[i].name, std::make_pair(size_t{0}, i));
    ckpt.total_size_ += file->tensors()[i].end - file->tensors()[i].begin;
  }
  ckpt.files_.push_back(*std::move(file));
  return ckpt;
}

absl::StatusOr<ShardedSafetensors> ShardedSafetensors::OpenIndex(const std::string& index_path) {
  absl::StatusOr<std::string> text = ReadFileToString(index_path);
  if (!text.ok()) return text.status();
  auto invalid = [&](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors index '", index_path, "': ", ToAbsl(what)));
  };
  Json index;
  try {
    index = Json::parse(*text);
  } catch (const Json::exception& e) {
    return invalid(absl::StrCat("not valid JSON: ", e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return invalid("expected an object with a \"weight_map\" object of tensor name -> file name");
  }
  ShardedSafetensors ckpt;
  ckpt.index_path_ = index_path;
  // file name -> the tensors the index puts there
  std::map<std::string, std::vector<std::string>> files;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) return invalid(absl::StrCat("weight_map['", name, "'] is not a file name"));
    const std::string& f = file.get_ref<const std::string&>();
    if (f.empty() || f.front() == '/' || f == ".." || absl::StartsWith(f, "../") ||
        absl::StrContains(f, "/../") || absl::EndsWith(f, "/..")) {
      return invalid(absl::StrCat("weight_map['", name, "'] = '", f,
                                  "' must be a file name relative to the index's folder"));
    }
    files[f].push_back(name);
  }
  const std::string dir = Dirname(index_path);
  for (const auto& [file_name, names] : files) {
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(JoinPath(dir, file_name));
    if (!file.ok()) return file.status();
    const size_t file_index = ckpt.files_.size();
    for (const std::string& name : names) {
      const SafetensorsTensor* t = file->Find(name);
      if (t == nullptr) {
        return invalid(absl::StrCat("weight_map puts tensor '", name, "' in '", file_name, "', which has no such tensor"));
      }
      ckpt.by_name_.emplace(name, std::make_pair(file_index, static_cast<size_t>(t - file->tensors().data())));
    }
    if (file->tensors().size() != names.size()) {
      for (const SafetensorsTensor& t : file->tensors()) {
        auto it = ckpt.by_name_.find(t.name);
        if (it == ckpt.by_name_.end() || it->second.first != file_index) {
          return invalid(absl::StrCat("file '", file_name, "' holds tensor '", t.name,
                                      "', which the weight_map does not put there"));
        }
      }
    }
    ckpt.files_.push_back(*std::move(file));
  }
  uint64_t sum = 0;
  for (const SafetensorsFile& f : ckpt.files_) {
    for (const SafetensorsTensor& t : f.tensors()) sum += t.end - t.begin;
  }
  ckpt.total_size_ = sum;
  if (index.contains("metadata") && index["metadata"].is_object() && index["metadata"].contains("total_size") &&
      index["metadata"]["total_size"].is_number_unsigned()) {
    ckpt.total_size_ = index["metadata"]["total_size"].get<uint64_t>();
  }
  return ckpt;
}

std::string ShardedSafetensors::Where() const {
  if (!index_path_.empty()) return absl::StrCat("safetensors index '", index_path_, "'");
  return absl::StrCat("safetensors file '", files_.empty() ? std::string() : files_[0].path(), "'");
}

const SafetensorsTensor* ShardedSafetensors::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return nullptr;
  return &files_[it->second.first].tensors()[it->second.second];
}

std::string ShardedSafetensors::FileOf(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? std::string() : files_[it->second.first].path();
}

absl::StatusOr<const SafetensorsTensor*> ShardedSafetensors::Get(std::string_view name) const {
  if (const SafetensorsTensor* t = Find(name)) return t;
  std::vector<std::string_view> names;
  names.reserve(by_name_.size());
  for (const auto& [n, where] : by_name_) names.push_back(n);
  return MissingTensorError(Where(), name, names);
}

std::vector<std::string> ShardedSafetensors::names() const {
  std::vector<std::string> out;
  out.reserve(by_name_.size());
  for (const auto& [n, where] : by_name_) out.push_back(n);
  return out;
}

}  // namespace colossal::io
