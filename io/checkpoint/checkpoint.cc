#include "io/checkpoint/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <span>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status/suggest.h"
#include "core/dtype/dtype.h"
#include "io/common/absl_view.h"
#include "io/common/atomic_file.h"
#include "io/common/file_util.h"
#include "io/safetensors/dtypes.h"
#include "io/safetensors/kernel_dtype.h"
#include "io/safetensors/reader.h"
#include "io/safetensors/sharded.h"
#include "io/safetensors/writer.h"
#include "io/common/json_util.h"
#include "nlohmann/json.hpp"

namespace colossal::io {
namespace {

using Json = nlohmann::json;

constexpr char kConfigFile[] = "config.json";
constexpr char kOptimizerTensors[] = "optimizer.safetensors";
constexpr char kOptimizerMeta[] = "optimizer.json";
constexpr char kTrainerState[] = "trainer_state.json";

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// `j` as text for a parser of a flat object; an object holding arrays or
// objects is refused first (dump() would recurse once per nesting level).
absl::StatusOr<std::string> FlatObjectText(const Json& j, const char* key, absl::string_view what) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, ": '", key, "' must be an object, got ", j.type_name()));
  for (const auto& [name, value] : j.items()) {
    if (value.is_structured()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": '", key, ".", name, "' must be a number, got ", value.type_name()));
    }
  }
  return j.dump();
}

// A host tensor with `t`'s contents: `t` itself on the CPU, a copy otherwise.
absl::StatusOr<core::Tensor> OnHost(const core::Tensor& t) {
  if (!t.device().is_cuda()) return t;
  return t.to(core::Device::cpu(), t.storage()->stream());
}

absl::StatusOr<core::Shape> ToShape(const std::vector<int64_t>& dims) { return core::Shape::make(dims); }

}  // namespace

absl::Status CheckStepRange(int64_t step, absl::string_view subject) {
  if (step >= 0 && step <= kMaxCheckpointStep) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(subject, " must be in [0, 2^40 = ", kMaxCheckpointStep, "], got ", step));
}

// ---- trainer_state.json ----------------------------------------------------

std::string TrainerStateToJson(const TrainerState& state) {
  Json j{{"step", state.step}};
  for (const auto& [key, text] : state.sections) j[key] = Json::parse(text);
  if (state.rng) j["rng"] = Json{{"seed", state.rng->seed}, {"offset", state.rng->offset}};
  if (state.data_loader) j["data_loader"] = DataLoaderStateToJson(*state.data_loader);
  return j.dump(2) + "\n";
}

absl::StatusOr<TrainerState> TrainerStateFromJson(std::string_view text) {
  constexpr absl::string_view kWhat = "trainer_state.json";
  absl::StatusOr<Json> j = ParseJsonObject(ToAbsl(text), kWhat);
  if (!j.ok()) return j.status();
  TrainerState s;
  absl::StatusOr<int64_t> step = JsonInt(*j, "step", kWhat);
  if (!step.ok()) return step.status();
  if (absl::Status r = CheckStepRange(*step, absl::StrCat(kWhat, ": 'step'")); !r.ok()) return r;
  s.step = *step;
  for (const auto& [key, value] : j->items()) {
    if (key == "step") continue;
    if (key == "rng") {
      if (!value.is_object() || !value.contains("seed") || !value.contains("offset") ||
          !value["seed"].is_number_unsigned() || !value["offset"].is_number_unsigned()) {
        return absl::InvalidArgumentError(absl::StrCat(kWhat, ": 'rng' must be {\"seed\": n, \"offset\": n} with non-negative integers"));
      }
      s.rng = core::RngState{value["seed"].get<uint64_t>(), value["offset"].get<uint64_t>()};
    } else if (key == "data_loader") {
      absl::StatusOr<DataLoaderState> v = DataLoaderStateFromJson(value);
      if (!v.ok()) {
        return absl::Status(v.status().code(), absl::StrCat(kWhat, ": 'data_loader': ", v.status().message()));
      }
      s.data_loader = *v;
    } else {
      absl::StatusOr<std::string> section = FlatObjectText(value, key.c_str(), kWhat);
      if (!section.ok()) return section.status();
      s.sections[key] = *std::move(section);
    }
  }
  return s;
}

// ---- config.json -----------------------------------------------------------

absl::StatusOr<std::string> ReadCheckpointConfig(const std::string& dir) {
  return ReadFileToString(dir + "/" + kConfigFile);
}

absl::StatusOr<core::DType> ReadCheckpointDType(const std::string& dir) {
  const std::string path = dir + "/" + kConfigFile;
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  // transformers 4 writes "torch_dtype", transformers 5 "dtype".
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_string()) continue;
    absl::StatusOr<core::DType> dtype = core::parse_dtype(j[key].get<std::string>());
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("'", path, "': ", key, ": ", dtype.status().message()));
    }
    return dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("'", path, "': no \"torch_dtype\" (or \"dtype\") string"));
}

// ---- save ------------------------------------------------------------------

namespace {

// The first of `numel` elements of `dtype` at `data` that is NaN or inf, or
// -1 (floating dtypes; integer tensors have none). Bit tests, so every CPU
// answers alike: an all-ones exponent. Elements are read with memcpy: a
// safetensors file need not align its tensors.
int64_t FirstNonFinite(const void* data, core::DType dtype, int64_t numel) {
  auto scan = [&](auto bits, auto exponent_mask) -> int64_t {
    using Bits = decltype(bits);
    const char* p = static_cast<const char*>(data);
    const Bits mask = static_cast<Bits>(exponent_mask);
    for (int64_t i = 0; i < numel; ++i) {
      Bits v;
      std::memcpy(&v, p + i * sizeof(Bits), sizeof(Bits));
      if ((v & mask) == mask) return i;
    }
    return -1;
  };
  switch (dtype) {
    case core::DType::kF32: return scan(uint32_t{0}, 0x7F800000u);
    case core::DType::kF64: return scan(uint64_t{0}, 0x7FF0000000000000ull);
    case core::DType::kBF16: return scan(uint16_t{0}, 0x7F80u);
    case core::DType::kF16: return scan(uint16_t{0}, 0x7C00u);
    default: return -1;
  }
}

SafetensorsEntry LayoutEntry(const TensorLayout& t) {
  return SafetensorsEntry{t.name, std::string(SafetensorsDTypeName(t.dtype)),
                          std::vector<int64_t>(t.shape.dims().begin(), t.shape.dims().end()), nullptr,
                          static_cast<uint64_t>(t.shape.numel()) * core::dtype_size(t.dtype)};
}

// A sink into the first layout.size() tensors of `out` (a streamed part is
// laid out first in its file), or, with `out` null, one that drops everything
// (a save whose files could not be laid out).
class FileSink : public TensorSink {
 public:
  FileSink(ShardedSafetensorsWriter* out, std::span<const TensorLayout> layout, bool check_finite)
      : out_(out), layout_(layout), check_finite_(check_finite) {}

  void write(size_t index, int64_t offset, const void* data, int64_t count) override {
    if (out_ == nullptr || !error_.ok()) return;
    if (index >= layout_.size() || offset < 0 || count < 0) {
      error_ = absl::InvalidArgumentError(absl::StrCat("streamed write of ", count, " elements at ", offset,
                                                       " into tensor ", index, " of ", layout_.size()));
      return;
    }
    const TensorLayout& t = layout_[index];
    count = std::min(count, std::max<int64_t>(0, t.shape.numel() - offset));  // the tail past the shape
    if (count == 0) return;
    if (check_finite_) {
      if (const int64_t bad = FirstNonFinite(data, t.dtype, count); bad >= 0) {
        error_ = absl::FailedPreconditionError(absl::StrCat(
            "model tensor '", t.name, "' holds NaN or inf (element ", offset + bad,
            "): the run has diverged; this step is not saved and the earlier checkpoints are kept"));
        return;
      }
    }
    const uint64_t size = core::dtype_size(t.dtype);
    error_ = out_->Write(index, static_cast<uint64_t>(offset) * size, data, static_cast<size_t>(count) * size);
  }
  void fail(absl::Status error) override {
    if (error_.ok()) error_ = std::move(error);
  }
  const absl::Status& status() const { return error_; }

 private:
  ShardedSafetensorsWriter* out_;
  std::span<const TensorLayout> layout_;
  bool check_finite_;
  absl::Status error_;
};

// Which streamed parts a save has called (each exactly once: StreamedTensors).
struct StreamCalls {
  bool model = false;
  bool optimizer = false;
};

// Calls `part.write` with a sink into `out` (null: dropping); its own error
// first, then the sink's.
absl::Status RunStreamed(const StreamedTensors& part, ShardedSafetensorsWriter* out, bool check_finite,
                         bool& called) {
  called = true;
  if (part.tensors.empty()) return absl::OkStatus();
  if (!part.write) return absl::InvalidArgumentError("streamed tensors without a write function");
  FileSink sink(out, part.tensors, check_finite);
  if (absl::Status s = part.write(sink); !s.ok()) return s;
  return sink.status();
}

// After a failed save: the streamed parts not yet called, with dropping sinks,
// so other ranks' matching collectives complete. Their errors are dropped:
// the save's own error is the one to report.
void DrainStreams(const CheckpointToSave& save, StreamCalls& calls) {
  if (!calls.model) (void)RunStreamed(save.streamed_model, nullptr, false, calls.model);
  if (save.optimizer != nullptr && !calls.optimizer) {
    (void)RunStreamed(save.optimizer->streamed, nullptr, false, calls.optimizer);
  }
}

absl::Status WriteModel(const std::string& dir, const CheckpointToSave& save, const CheckpointOptions& options,
                        StreamCalls& calls) {
  ShardedWriteOptions shard_options;
  shard_options.max_shard_bytes = options.max_shard_bytes;
  const SafetensorsMetadata metadata = {{"format", "pt"}};
  if (!save.streamed_model.tensors.empty()) {
    std::vector<SafetensorsEntry> entries;
    for (const TensorLayout& t : save.streamed_model.tensors) entries.push_back(LayoutEntry(t));
    absl::StatusOr<ShardedSafetensorsWriter> out = ShardedSafetensorsWriter::Create(dir, entries, metadata, shard_options);
    if (!out.ok()) return out.status();
    if (absl::Status s = RunStreamed(save.streamed_model, &*out, /*check_finite=*/true, calls.model); !s.ok()) {
      return s;
    }
    return out->Commit().status();
  }
  std::vector<core::Tensor> host;  // keeps device copies alive during the write
  std::vector<SafetensorsEntry> entries;
  for (const TensorToSave& t : save.model) {
    if (t.shape.numel() > t.tensor.numel()) {
      return absl::InvalidArgumentError(absl::StrCat("model tensor '", t.name, "': shape ", t.shape.to_string(),
                                                     " is larger than its tensor ", t.tensor.to_string()));
    }
    absl::StatusOr<core::Tensor> h = OnHost(t.tensor);
    if (!h.ok()) return h.status();
    if (const int64_t bad = FirstNonFinite(h->raw_data(), h->dtype(), t.shape.numel()); bad >= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model tensor '", t.name, "' holds NaN or inf (element ", bad,
          "): the run has diverged; this step is not saved and the earlier checkpoints are kept"));
    }
    host.push_back(*h);
    entries.push_back(SafetensorsEntry{t.name, std::string(SafetensorsDTypeName(t.tensor.dtype())),
                                       std::vector<int64_t>(t.shape.dims().begin(), t.shape.dims().end()), h->raw_data(),
                                       static_cast<uint64_t>(t.shape.numel()) * core::dtype_size(t.tensor.dtype())});
  }
  return WriteShardedSafetensors(dir, entries, metadata, shard_options).status();
}

absl::Status WriteOptimizerFiles(const std::string& dir, const OptimizerFiles& state, bool& called) {
  // The folder and its missing parents.
  for (size_t end = dir.find('/', 1); ; end = dir.find('/', end + 1)) {
    const std::string prefix = dir.substr(0, end);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, "cannot create the optimizer folder", prefix);
    }
    if (end == std::string::npos) break;
  }
  // One file: the streamed tensors (the large ones, aligned) first, then the
  // held ones sorted by name.
  std::vector<SafetensorsEntry> entries;
  for (const TensorLayout& t : state.streamed.tensors) entries.push_back(LayoutEntry(t));
  std::vector<core::Tensor> host;  // keeps the host copies alive while writing
  for (const auto& [name, t] : state.tensors) {
    absl::StatusOr<core::Tensor> h = OnHost(t);
    if (!h.ok()) return h.status();
    host.push_back(*h);
    entries.push_back(SafetensorsEntry{name, std::string(SafetensorsDTypeName(t.dtype())),
                                       std::vector<int64_t>(t.shape().dims().begin(), t.shape().dims().end()),
                                       h->raw_data(), t.nbytes()});
  }
  ShardedWriteOptions options;
  options.prefix = "optimizer";
  options.max_shard_bytes = std::numeric_limits<uint64_t>::max();
  absl::StatusOr<ShardedSafetensorsWriter> out =
      ShardedSafetensorsWriter::Create(dir, entries, {{"format", "pt"}}, options);
  if (!out.ok()) return out.status();
  if (absl::Status s = CheckSafetensorsData(std::span(entries).subspan(state.streamed.tensors.size()),
                                            absl::StrCat("'", dir, "/", kOptimizerTensors, "'"));
      !s.ok()) {
    return s;
  }
  for (size_t i = state.streamed.tensors.size(); i < entries.size(); ++i) {
    if (absl::Status s = out->Write(i, 0, entries[i].data, entries[i].bytes); !s.ok()) return s;
  }
  if (absl::Status s = RunStreamed(state.streamed, &*out, /*check_finite=*/false, called); !s.ok()) return s;
  if (absl::Status s = out->Commit().status(); !s.ok()) return s;
  return WriteFileAtomically(dir + "/" + kOptimizerMeta, state.meta_json);
}

absl::Status WriteContents(const std::string& dir, const CheckpointToSave& save, const CheckpointOptions& options,
                           StreamCalls& calls) {
  if (absl::Status s = WriteModel(dir, save, options, calls); !s.ok()) return s;
  absl::Status s = WriteFileAtomically(dir + "/" + kConfigFile, save.config_json);
  if (!s.ok()) return s;
  if (save.optimizer != nullptr) {
    s = WriteOptimizerFiles(dir, *save.optimizer, calls.optimizer);
    if (!s.ok()) return s;
  }
  for (const std::string& path : save.files_to_copy) {
    const size_t slash = path.rfind('/');
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    if (name.empty() || name == kConfigFile || name == kTrainerState || name == kOptimizerMeta ||
        name == kOptimizerTensors || name == "latest" || absl::EndsWith(name, ".safetensors") ||
        absl::EndsWith(name, ".safetensors.index.json")) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", path, "' would replace a file of the checkpoint's own"));
    }
    absl::StatusOr<std::string> bytes = ReadFileToString(path);
    if (!bytes.ok()) return bytes.status();
    s = WriteFileAtomically(dir + "/" + name, *bytes);
    if (!s.ok()) return s;
  }
  TrainerState trainer = save.trainer;
  trainer.step = save.step;
  return WriteFileAtomically(dir + "/" + kTrainerState, TrainerStateToJson(trainer));
}

}  // namespace

absl::Status SaveOptimizerFiles(const std::string& dir, const OptimizerFiles& state) {
  bool called = false;
  absl::Status s = WriteOptimizerFiles(dir, state, called);
  if (!called) (void)RunStreamed(state.streamed, nullptr, false, called);  // see StreamedTensors
  return s;
}

absl::StatusOr<std::string> SaveCheckpoint(const std::string& root, const CheckpointToSave& save,
                                           const CheckpointOptions& options) {
  StreamCalls calls;
  absl::StatusOr<std::string> dir = [&]() -> absl::StatusOr<std::string> {
    if (save.config_json.empty() || (save.model.empty() == save.streamed_model.tensors.empty())) {
      return absl::InvalidArgumentError(
          "SaveCheckpoint: a config and model tensors (held or streamed, not both) are required");
    }
    if (options.keep_last < 0) {
      return absl::InvalidArgumentError(absl::StrCat("SaveCheckpoint: keep_last must be >= 0, got ", options.keep_last));
    }
    // A step no load would accept is not written.
    if (absl::Status r = CheckStepRange(save.step, "SaveCheckpoint: step"); !r.ok()) return r;
    absl::StatusOr<std::string> tmp = BeginStepDir(root, save.step);
    if (!tmp.ok()) return tmp.status();
    absl::Status s = WriteContents(*tmp, save, options, calls);
    absl::StatusOr<std::string> published = s.ok() ? PublishStepDir(root, save.step, *tmp) : absl::StatusOr<std::string>(s);
    if (!published.ok()) {
      (void)RemoveTree(*tmp);  // best effort; the next save removes it otherwise
      return absl::Status(published.status().code(), absl::StrCat("saving checkpoint step ", save.step, " in '", root,
                                                                  "': ", published.status().message()));
    }
    return published;
  }();
  if (!dir.ok()) {
    DrainStreams(save, calls);
    return dir.status();
  }
  if (absl::Status s = PruneStepDirs(root, options.keep_last); !s.ok()) return s;
  return dir;
}

// ---- load ------------------------------------------------------------------

absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path) {
  if (IsFile(path + "/" + kConfigFile)) return path;
  if (IsFile(path)) {  // e.g. the model.safetensors inside a step folder
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is a file; a checkpoint is a folder: a step folder (holding ", kConfigFile,
        ") or a root with a 'latest' file"));
  }
  return LatestStepDir(path);
}

namespace {

// The memory of one read-only file mapping as a core allocator's single
// allocation, so that tensors can view a loaded file without copying it: the
// state of a model that fills the host stays in the page cache, which the
// kernel can drop, instead of in the process's memory. `owner` (the open
// file) lives as long as the allocator, which every Storage made from it holds.
class MappedFileAllocator : public core::Allocator {
 public:
  MappedFileAllocator(std::shared_ptr<const void> owner, std::span<const std::byte> mapping, std::string path)
      : owner_(std::move(owner)), mapping_(mapping), path_(std::move(path)) {}

  core::Device device() const override { return core::Device::cpu(); }
  core::MemoryKind kind() const override { return core::MemoryKind::kHost; }
  std::string name() const override { return absl::StrCat("mapped('", path_, "')"); }
  // The whole mapping, whatever is asked (Storage::allocate asks for its size).
  absl::StatusOr<void*> allocate(size_t bytes, const core::Stream&) override {
    if (bytes > mapping_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(name(), " holds ", mapping_.size(), " bytes, not ", bytes));
    }
    return const_cast<void*>(static_cast<const void*>(mapping_.data()));
  }
  void deallocate(void*, size_t, const core::Stream&) override {}
  core::AllocatorStats stats() const override { return {}; }
  void reset_peak_stats() override {}
  void release_cached_memory() override {}

 private:
  std::shared_ptr<const void> owner_;
  std::span<const std::byte> mapping_;
  std::string path_;
};

// `file`'s whole mapping as a Storage that keeps `owner` alive.
absl::StatusOr<std::shared_ptr<core::Storage>> MappedStorage(std::shared_ptr<const void> owner,
                                                            const SafetensorsFile& file) {
  auto allocator = std::make_shared<MappedFileAllocator>(std::move(owner), file.mapping(), file.path());
  return core::Storage::allocate(allocator, file.mapping().size(), core::Stream::cpu());
}

// Tensor `t` of `file` (mapped as `storage`) as `shape` and `dtype`: a view
// of the mapping where the file aligns it to its element size (our saves do
// for every large tensor), a copy otherwise.
absl::StatusOr<core::Tensor> MappedTensor(const std::shared_ptr<core::Storage>& storage, const SafetensorsFile& file,
                                          const SafetensorsTensor& t, const core::Shape& shape, core::DType dtype) {
  const size_t at = file.data_start() + t.begin;
  if (at % core::dtype_size(dtype) == 0) return core::Tensor::from_storage(storage, at, shape, dtype);
  absl::StatusOr<core::Tensor> out = core::Tensor::empty(shape, dtype, core::Stream::cpu());
  if (out.ok() && !t.data.empty()) std::memcpy(out->raw_data(), t.data.data(), t.data.size());
  return out;
}

// The tensors of `ckpt` that `expected` names, validated (see
// LoadModelTensors' contract) before anything is copied.
absl::StatusOr<std::vector<const SafetensorsTensor*>> ValidateModelTensors(const ShardedSafetensors& ckpt,
                                                                          const std::string& dir,
                                                                          std::span<const TensorToMap> expected) {
  const std::vector<std::string> names = ckpt.names();
  std::vector<absl::string_view> candidates(names.begin(), names.end());
  const std::string where = absl::StrCat("checkpoint '", dir, "'");
  std::vector<const SafetensorsTensor*> found;
  std::set<std::string, std::less<>> wanted;
  for (const TensorToMap& e : expected) {
    wanted.insert(e.name);
    const SafetensorsTensor* t = ckpt.Find(e.name);
    if (t == nullptr) {
      return absl::NotFoundError(absl::StrCat(where, " has no tensor '", e.name, "'",
                                              core::did_you_mean(e.name, candidates)));
    }
    const std::string_view want_dtype = SafetensorsDTypeName(e.dtype);
    if (t->dtype != want_dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor '", e.name, "' is ", ToAbsl(t->dtype), ", the model wants ", ToAbsl(want_dtype)));
    }
    if (absl::MakeConstSpan(t->shape) != e.shape.dims()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": tensor '", e.name, "' has shape ", ShapeString(t->shape),
                                                     ", the model wants ", e.shape.to_string()));
    }
    // Saves refuse a diverged model now; older versions wrote them, and
    // training (or sampling) from NaN weights only gives NaN.
    if (const int64_t bad = FirstNonFinite(t->data.data(), e.dtype, e.shape.numel()); bad >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tensor '", e.name, "' in '", ckpt.FileOf(e.name), "' holds NaN or inf (element ", bad,
          "): saved from a run that had diverged; load an earlier step instead"));
    }
    found.push_back(t);
  }
  std::vector<absl::string_view> expected_names;
  for (const TensorToMap& e : expected) expected_names.push_back(e.name);
  for (const std::string& n : names) {
    if (!wanted.contains(n)) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has an unexpected tensor '", n, "' that the model lacks",
                                                     core::did_you_mean(n, expected_names)));
    }
  }
  return found;
}

}  // namespace

absl::Status LoadModelTensors(const std::string& dir, const std::vector<TensorToLoad>& expected) {
  absl::StatusOr<ShardedSafetensors> ckpt = ShardedSafetensors::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  // Validate everything before changing anything.
  std::vector<TensorToMap> wanted;
  for (const TensorToLoad& e : expected) wanted.push_back({e.name, e.dtype, e.shape, e.dst.shape()});
  absl::StatusOr<std::vector<const SafetensorsTensor*>> found = ValidateModelTensors(*ckpt, dir, wanted);
  if (!found.ok()) return found.status();
  for (const TensorToLoad& e : expected) {
    if (e.dst.dtype() != e.dtype || e.dst.numel() < e.shape.numel()) {
      return absl::InvalidArgumentError(absl::StrCat("loading '", e.name, "' into ", e.dst.to_string(),
                                                     ": not ", core::dtype_name(e.dtype), " of at least ",
                                                     e.shape.numel(), " elements"));
    }
  }
  for (size_t i = 0; i < found->size(); ++i) {
    const SafetensorsTensor& from = *(*found)[i];
    const core::Tensor& target = expected[i].dst;
    core::Tensor dst = target;
    const bool device = dst.device().is_cuda();
    if (device) {
      absl::StatusOr<core::Tensor> staging = core::Tensor::empty(dst.shape(), dst.dtype(), core::Stream::cpu());
      if (!staging.ok()) return staging.status();
      dst = *staging;
    }
    // The checkpoint's elements, then zeros (e.g. padding rows).
    std::memcpy(dst.raw_data(), from.data.data(), from.data.size());
    std::memset(static_cast<char*>(dst.raw_data()) + from.data.size(), 0, dst.nbytes() - from.data.size());
    if (device) {
      core::Tensor out = target;
      absl::Status s = out.copy_from(dst, target.storage()->stream());
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<core::Tensor>> MapModelTensors(const std::string& dir,
                                                          const std::vector<TensorToMap>& expected) {
  absl::StatusOr<ShardedSafetensors> opened = ShardedSafetensors::Open(dir);
  if (!opened.ok()) return opened.status();
  auto ckpt = std::make_shared<const ShardedSafetensors>(*std::move(opened));
  for (const TensorToMap& e : expected) {
    if (e.as.numel() < e.shape.numel()) {
      return absl::InvalidArgumentError(absl::StrCat("MapModelTensors: '", e.name, "' as ", e.as.to_string(),
                                                     " is smaller than its ", e.shape.to_string()));
    }
  }
  absl::StatusOr<std::vector<const SafetensorsTensor*>> found = ValidateModelTensors(*ckpt, dir, expected);
  if (!found.ok()) return found.status();
  std::vector<std::shared_ptr<core::Storage>> storages;
  for (const SafetensorsFile& file : ckpt->files()) {
    absl::StatusOr<std::shared_ptr<core::Storage>> storage = MappedStorage(ckpt, file);
    if (!storage.ok()) return storage.status();
    storages.push_back(*std::move(storage));
  }
  std::vector<core::Tensor> out;
  for (size_t i = 0; i < expected.size(); ++i) {
    const TensorToMap& e = expected[i];
    const SafetensorsTensor& t = *(*found)[i];
    if (e.as.numel() > e.shape.numel()) {  // padded: a copy with zeros after the file's elements
      absl::StatusOr<core::Tensor> padded = core::Tensor::empty(e.as, e.dtype, core::Stream::cpu());
      if (!padded.ok()) return padded.status();
      std::memcpy(padded->raw_data(), t.data.data(), t.data.size());
      std::memset(static_cast<char*>(padded->raw_data()) + t.data.size(), 0, padded->nbytes() - t.data.size());
      out.push_back(*std::move(padded));
      continue;
    }
    size_t f = 0;  // the file whose mapping holds the tensor
    while (f + 1 < ckpt->files().size() &&
           !(t.data.data() >= ckpt->files()[f].mapping().data() &&
             t.data.data() < ckpt->files()[f].mapping().data() + ckpt->files()[f].mapping().size())) {
      ++f;
    }
    absl::StatusOr<core::Tensor> view = MappedTensor(storages[f], ckpt->files()[f], t, e.as, e.dtype);
    if (!view.ok()) return view.status();
    out.push_back(*std::move(view));
  }
  return out;
}

absl::StatusOr<OptimizerFiles> LoadOptimizerFiles(const std::string& dir) {
  const std::string tensors_path = dir + "/" + kOptimizerTensors;
  const std::string meta_path = dir + "/" + kOptimizerMeta;
  if (!IsFile(tensors_path) || !IsFile(meta_path)) {
    return absl::NotFoundError(absl::StrCat("checkpoint '", dir, "' has no optimizer state (", kOptimizerTensors, " and ",
                                            kOptimizerMeta, ")"));
  }
  absl::StatusOr<std::string> meta_text = ReadFileToString(meta_path);
  if (!meta_text.ok()) return meta_text.status();
  OptimizerFiles sd;
  sd.meta_json = *std::move(meta_text);
  absl::StatusOr<SafetensorsFile> opened = SafetensorsFile::Open(tensors_path);
  if (!opened.ok()) return opened.status();
  auto file = std::make_shared<const SafetensorsFile>(*std::move(opened));
  absl::StatusOr<std::shared_ptr<core::Storage>> storage = MappedStorage(file, *file);
  if (!storage.ok()) return storage.status();
  for (const SafetensorsTensor& t : file->tensors()) {
    absl::StatusOr<core::DType> dtype = KernelDType(t.dtype);
    if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat("'", tensors_path, "': tensor '", t.name, "': ", dtype.status().message()));
    absl::StatusOr<core::Shape> shape = ToShape(t.shape);
    if (!shape.ok()) return shape.status();
    // As the model's tensors: Adam's moments and masters are finite in a run
    // that has not diverged; resuming from NaN state only gives NaN.
    if (const int64_t bad = FirstNonFinite(t.data.data(), *dtype, shape->numel()); bad >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", tensors_path, "': tensor '", t.name, "' holds NaN or inf (element ", bad,
          "): saved from a run that had diverged; load an earlier step instead"));
    }
    absl::StatusOr<core::Tensor> out = MappedTensor(*storage, *file, t, *shape, *dtype);
    if (!out.ok()) return out.status();
    sd.tensors.emplace(t.name, *std::move(out));
  }
  return sd;
}

absl::StatusOr<TrainerState> LoadTrainerState(const std::string& dir) {
  const std::string path = dir + "/" + kTrainerState;
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<TrainerState> s = TrainerStateFromJson(*text);
  if (!s.ok()) return absl::Status(s.status().code(), absl::StrCat("'", path, "': ", s.status().message()));
  return s;
}

}  // namespace colossal::io
