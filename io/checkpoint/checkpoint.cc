#include "io/checkpoint/checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

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

absl::StatusOr<Json> ParseJson(std::string_view text, absl::string_view what) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
  }
  return j;
}

absl::StatusOr<int64_t> GetInt(const Json& j, const char* key, absl::string_view what) {
  auto it = j.find(key);
  if (it == j.end()) return absl::InvalidArgumentError(absl::StrCat(what, ": missing key '", key, "'"));
  if (!it->is_number_integer()) {
    // The type, not the value: dump() recurses once per nesting level.
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", key, "' must be an integer, got ", it->is_structured() ? it->type_name() : it->dump()));
  }
  return it->get<int64_t>();
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

// ---- trainer_state.json ----------------------------------------------------

std::string TrainerStateToJson(const TrainerState& state) {
  Json j{{"step", state.step}};
  if (state.lr_scheduler) j["lr_scheduler"] = Json::parse(nn::lr_scheduler_state_to_json(*state.lr_scheduler));
  if (state.loss_scaler) j["loss_scaler"] = Json::parse(nn::loss_scaler_state_to_json(*state.loss_scaler));
  if (state.rng) j["rng"] = Json{{"seed", state.rng->seed}, {"offset", state.rng->offset}};
  if (state.data_loader) j["data_loader"] = DataLoaderStateToJson(*state.data_loader);
  return j.dump(2) + "\n";
}

absl::StatusOr<TrainerState> TrainerStateFromJson(std::string_view text) {
  constexpr absl::string_view kWhat = "trainer_state.json";
  absl::StatusOr<Json> j = ParseJson(text, kWhat);
  if (!j.ok()) return j.status();
  TrainerState s;
  absl::StatusOr<int64_t> step = GetInt(*j, "step", kWhat);
  if (!step.ok()) return step.status();
  s.step = *step;
  auto annotate = [&](const absl::Status& st, const char* key) {
    return absl::Status(st.code(), absl::StrCat(kWhat, ": '", key, "': ", st.message()));
  };
  if (auto it = j->find("lr_scheduler"); it != j->end()) {
    absl::StatusOr<std::string> text = FlatObjectText(*it, "lr_scheduler", kWhat);
    if (!text.ok()) return text.status();
    absl::StatusOr<nn::LrSchedulerState> v = nn::lr_scheduler_state_from_json(*text);
    if (!v.ok()) return annotate(v.status(), "lr_scheduler");
    s.lr_scheduler = *v;
  }
  if (auto it = j->find("loss_scaler"); it != j->end()) {
    absl::StatusOr<std::string> text = FlatObjectText(*it, "loss_scaler", kWhat);
    if (!text.ok()) return text.status();
    absl::StatusOr<nn::LossScalerState> v = nn::loss_scaler_state_from_json(*text);
    if (!v.ok()) return annotate(v.status(), "loss_scaler");
    s.loss_scaler = *v;
  }
  if (auto it = j->find("rng"); it != j->end()) {
    const Json& r = *it;
    if (!r.is_object() || !r.contains("seed") || !r.contains("offset") || !r["seed"].is_number_unsigned() ||
        !r["offset"].is_number_unsigned()) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, ": 'rng' must be {\"seed\": n, \"offset\": n} with non-negative integers"));
    }
    s.rng = core::RngState{r["seed"].get<uint64_t>(), r["offset"].get<uint64_t>()};
  }
  if (auto it = j->find("data_loader"); it != j->end()) {
    absl::StatusOr<DataLoaderState> v = DataLoaderStateFromJson(*it);
    if (!v.ok()) return annotate(v.status(), "data_loader");
    s.data_loader = *v;
  }
  return s;
}

// ---- config.json -----------------------------------------------------------

std::string GPT2ConfigToHuggingFaceJson(const nn::GPT2Config& c, core::DType dtype) {
  const int64_t eos = c.vocab_size > 50256 ? 50256 : c.vocab_size - 1;
  Json j{
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", c.vocab_size},
      {"n_positions", c.max_seq_len},
      {"n_ctx", c.max_seq_len},
      {"n_embd", c.n_embd},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},  // tanh approximation, as GPT-2 and llm.c
      {"layer_norm_epsilon", 1e-5},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"initializer_range", 0.02},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", true},
      {"bos_token_id", eos},
      {"eos_token_id", eos},
      {"torch_dtype", core::dtype_name(dtype)},
      {"colossal_padded_vocab_multiple", c.padded_vocab_multiple},
  };
  return j.dump(2) + "\n";
}

absl::StatusOr<nn::GPT2Config> GPT2ConfigFromHuggingFaceJson(std::string_view text) {
  constexpr absl::string_view kWhat = "config.json";
  absl::StatusOr<Json> j = ParseJson(text, kWhat);
  if (!j.ok()) return j.status();
  nn::GPT2Config c;
  struct Field {
    const char* key;
    int64_t* out;
  };
  for (Field f : {Field{"n_layer", &c.n_layer}, Field{"n_head", &c.n_head}, Field{"n_embd", &c.n_embd},
                  Field{"vocab_size", &c.vocab_size}, Field{"n_positions", &c.max_seq_len}}) {
    absl::StatusOr<int64_t> v = GetInt(*j, f.key, kWhat);
    if (!v.ok()) return v.status();
    *f.out = *v;
  }
  if (j->contains("colossal_padded_vocab_multiple")) {
    absl::StatusOr<int64_t> v = GetInt(*j, "colossal_padded_vocab_multiple", kWhat);
    if (!v.ok()) return v.status();
    c.padded_vocab_multiple = *v;
  }
  absl::Status s = c.validate();
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(kWhat, ": ", s.message()));
  return c;
}

absl::StatusOr<nn::GPT2Config> ReadGPT2Config(const std::string& dir) {
  const std::string path = dir + "/" + kConfigFile;
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<nn::GPT2Config> c = GPT2ConfigFromHuggingFaceJson(*text);
  if (!c.ok()) return absl::Status(c.status().code(), absl::StrCat("'", path, "': ", c.status().message()));
  return c;
}

absl::StatusOr<core::DType> ReadCheckpointDType(const std::string& dir) {
  const std::string path = dir + "/" + kConfigFile;
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("torch_dtype") || !j["torch_dtype"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': no \"torch_dtype\" string"));
  }
  absl::StatusOr<core::DType> dtype = core::parse_dtype(j["torch_dtype"].get<std::string>());
  if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat("'", path, "': torch_dtype: ", dtype.status().message()));
  return dtype;
}

// ---- save ------------------------------------------------------------------

namespace {

absl::Status WriteContents(const std::string& dir, const CheckpointToSave& save, const CheckpointOptions& options) {
  const nn::ParameterStore& store = *save.model;
  // Model: every parameter under its table name, HF shape (wte's first rows).
  std::vector<core::Tensor> host;  // keeps device copies alive during the write
  std::vector<SafetensorsEntry> entries;
  core::DType model_dtype = core::DType::kF32;
  for (const nn::Parameter& p : store.parameters()) {
    const nn::ParameterEntry* e = store.table().find(p.name);
    const core::Shape hf = nn::GPT2::hugging_face_shape(*save.config, *e);
    absl::StatusOr<core::Tensor> h = OnHost(p.value);
    if (!h.ok()) return h.status();
    host.push_back(*h);
    model_dtype = p.value.dtype();
    entries.push_back(SafetensorsEntry{p.name, std::string(SafetensorsDTypeName(p.value.dtype())),
                                       std::vector<int64_t>(hf.dims().begin(), hf.dims().end()), h->raw_data(),
                                       static_cast<uint64_t>(hf.numel()) * core::dtype_size(p.value.dtype())});
  }
  ShardedWriteOptions shard_options;
  shard_options.max_shard_bytes = options.max_shard_bytes;
  absl::StatusOr<ShardedWriteResult> written = WriteShardedSafetensors(dir, entries, {{"format", "pt"}}, shard_options);
  if (!written.ok()) return written.status();
  absl::Status s = WriteFileAtomically(dir + "/" + kConfigFile, GPT2ConfigToHuggingFaceJson(*save.config, model_dtype));
  if (!s.ok()) return s;

  if (save.optimizer != nullptr) {
    s = SaveOptimizerState(dir, *save.optimizer);
    if (!s.ok()) return s;
  }
  TrainerState trainer = save.trainer;
  trainer.step = save.step;
  return WriteFileAtomically(dir + "/" + kTrainerState, TrainerStateToJson(trainer));
}

}  // namespace

absl::Status SaveOptimizerState(const std::string& dir, const nn::OptimizerStateDict& state) {
  // The folder and its missing parents.
  for (size_t end = dir.find('/', 1); ; end = dir.find('/', end + 1)) {
    const std::string prefix = dir.substr(0, end);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, "cannot create the optimizer folder", prefix);
    }
    if (end == std::string::npos) break;
  }
  std::vector<SafetensorsEntry> entries;
  std::vector<core::Tensor> host;  // keeps the host copies alive while writing
  for (const auto& [name, t] : state.tensors) {  // sorted by name
    absl::StatusOr<core::Tensor> h = OnHost(t);
    if (!h.ok()) return h.status();
    host.push_back(*h);
    entries.push_back(SafetensorsEntry{name, std::string(SafetensorsDTypeName(t.dtype())),
                                       std::vector<int64_t>(t.shape().dims().begin(), t.shape().dims().end()),
                                       h->raw_data(), t.nbytes()});
  }
  absl::Status s = WriteSafetensors(dir + "/" + kOptimizerTensors, entries, {{"format", "pt"}});
  if (s.ok()) s = WriteFileAtomically(dir + "/" + kOptimizerMeta, nn::optimizer_meta_to_json(state.meta));
  return s;
}

absl::StatusOr<std::string> SaveCheckpoint(const std::string& root, const CheckpointToSave& save,
                                           const CheckpointOptions& options) {
  if (save.config == nullptr || save.model == nullptr) {
    return absl::InvalidArgumentError("SaveCheckpoint: config and model are required");
  }
  if (options.keep_last < 0) {
    return absl::InvalidArgumentError(absl::StrCat("SaveCheckpoint: keep_last must be >= 0, got ", options.keep_last));
  }
  absl::StatusOr<std::string> tmp = BeginStepDir(root, save.step);
  if (!tmp.ok()) return tmp.status();
  absl::Status s = WriteContents(*tmp, save, options);
  absl::StatusOr<std::string> dir = s.ok() ? PublishStepDir(root, save.step, *tmp) : absl::StatusOr<std::string>(s);
  if (!dir.ok()) {
    (void)RemoveTree(*tmp);  // best effort; the next save removes it otherwise
    return absl::Status(dir.status().code(),
                        absl::StrCat("saving checkpoint step ", save.step, " in '", root, "': ", dir.status().message()));
  }
  s = PruneStepDirs(root, options.keep_last);
  if (!s.ok()) return s;
  return dir;
}

// ---- load ------------------------------------------------------------------

absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path) {
  if (IsFile(path + "/" + kConfigFile)) return path;
  return LatestStepDir(path);
}

absl::Status LoadGPT2Model(const std::string& dir, const nn::GPT2Config& config, nn::ParameterStore& store) {
  absl::StatusOr<ShardedSafetensors> ckpt = ShardedSafetensors::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  const std::vector<std::string> names = ckpt->names();
  std::vector<absl::string_view> candidates(names.begin(), names.end());
  const std::string where = absl::StrCat("checkpoint '", dir, "'");
  // Validate everything before changing anything.
  std::vector<const SafetensorsTensor*> found;
  for (const nn::ParameterEntry& e : store.table().entries()) {
    const SafetensorsTensor* t = ckpt->Find(e.name);
    if (t == nullptr) {
      return absl::NotFoundError(absl::StrCat(where, " has no tensor '", e.name, "'",
                                              core::did_you_mean(e.name, candidates)));
    }
    const core::Shape hf = nn::GPT2::hugging_face_shape(config, e);
    const std::string_view want_dtype = SafetensorsDTypeName(e.dtype);
    if (t->dtype != want_dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor '", e.name, "' is ", ToAbsl(t->dtype), ", the model wants ", ToAbsl(want_dtype)));
    }
    if (absl::MakeConstSpan(t->shape) != hf.dims()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": tensor '", e.name, "' has shape ", ShapeString(t->shape),
                                                     ", the model wants ", hf.to_string()));
    }
    found.push_back(t);
  }
  std::vector<absl::string_view> table_names;
  for (const nn::ParameterEntry& e : store.table().entries()) table_names.push_back(e.name);
  for (const std::string& n : names) {
    if (store.table().find(n) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has an unexpected tensor '", n, "' that the model lacks",
                                                     core::did_you_mean(n, table_names)));
    }
  }
  for (size_t i = 0; i < found.size(); ++i) {
    const nn::ParameterEntry& e = store.table().entries()[i];
    absl::StatusOr<nn::Parameter> p = store.find(e.name);
    if (!p.ok()) return p.status();
    core::Tensor dst = p->value;
    const bool device = dst.device().is_cuda();
    if (device) {
      absl::StatusOr<core::Tensor> staging = core::Tensor::empty(dst.shape(), dst.dtype(), core::Stream::cpu());
      if (!staging.ok()) return staging.status();
      dst = *staging;
    }
    // The checkpoint's rows, then zeros (wte's padding rows).
    std::memcpy(dst.raw_data(), found[i]->data.data(), found[i]->data.size());
    std::memset(static_cast<char*>(dst.raw_data()) + found[i]->data.size(), 0, dst.nbytes() - found[i]->data.size());
    if (device) {
      absl::Status s = p->value.copy_from(dst, p->value.storage()->stream());
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<nn::OptimizerStateDict> LoadOptimizerState(const std::string& dir) {
  const std::string tensors_path = dir + "/" + kOptimizerTensors;
  const std::string meta_path = dir + "/" + kOptimizerMeta;
  if (!IsFile(tensors_path) || !IsFile(meta_path)) {
    return absl::NotFoundError(absl::StrCat("checkpoint '", dir, "' has no optimizer state (", kOptimizerTensors, " and ",
                                            kOptimizerMeta, ")"));
  }
  absl::StatusOr<std::string> meta_text = ReadFileToString(meta_path);
  if (!meta_text.ok()) return meta_text.status();
  nn::OptimizerStateDict sd;
  absl::StatusOr<nn::OptimizerMeta> meta = nn::optimizer_meta_from_json(*meta_text);
  if (!meta.ok()) return absl::Status(meta.status().code(), absl::StrCat("'", meta_path, "': ", meta.status().message()));
  sd.meta = *std::move(meta);
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(tensors_path);
  if (!file.ok()) return file.status();
  for (const SafetensorsTensor& t : file->tensors()) {
    absl::StatusOr<core::DType> dtype = KernelDType(t.dtype);
    if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat("'", tensors_path, "': tensor '", t.name, "': ", dtype.status().message()));
    absl::StatusOr<core::Shape> shape = ToShape(t.shape);
    if (!shape.ok()) return shape.status();
    absl::StatusOr<core::Tensor> out = core::Tensor::empty(*shape, *dtype, core::Stream::cpu());
    if (!out.ok()) return out.status();
    if (!t.data.empty()) std::memcpy(out->raw_data(), t.data.data(), t.data.size());
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
