#include "nn/models/gpt2/hugging_face.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "io/common/absl_view.h"
#include "io/common/json_util.h"
#include "nlohmann/json.hpp"

namespace colossal::nn {
namespace {
using Json = nlohmann::json;
}  // namespace

std::string GPT2ConfigToHuggingFaceJson(const GPT2Config& c, core::DType dtype) {
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

absl::StatusOr<GPT2Config> GPT2ConfigFromHuggingFaceJson(std::string_view text) {
  constexpr absl::string_view kWhat = "config.json";
  absl::StatusOr<Json> j = io::ParseJsonObject(io::ToAbsl(text), kWhat);
  if (!j.ok()) return j.status();
  GPT2Config c;
  struct Field {
    const char* key;
    int64_t* out;
  };
  for (Field f : {Field{"n_layer", &c.n_layer}, Field{"n_head", &c.n_head}, Field{"n_embd", &c.n_embd},
                  Field{"vocab_size", &c.vocab_size}, Field{"n_positions", &c.max_seq_len}}) {
    absl::StatusOr<int64_t> v = io::JsonInt(*j, f.key, kWhat);
    if (!v.ok()) return v.status();
    *f.out = *v;
  }
  if (j->contains("colossal_padded_vocab_multiple")) {
    absl::StatusOr<int64_t> v = io::JsonInt(*j, "colossal_padded_vocab_multiple", kWhat);
    if (!v.ok()) return v.status();
    c.padded_vocab_multiple = *v;
  }
  absl::Status s = c.validate();
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(kWhat, ": ", s.message()));
  return c;
}

absl::StatusOr<GPT2Config> ReadGPT2Config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  absl::StatusOr<std::string> text = io::ReadCheckpointConfig(dir);
  if (!text.ok()) return text.status();
  absl::StatusOr<GPT2Config> c = GPT2ConfigFromHuggingFaceJson(*text);
  if (!c.ok()) return absl::Status(c.status().code(), absl::StrCat("'", path, "': ", c.status().message()));
  return c;
}

std::vector<io::TensorToSave> GPT2HuggingFaceTensors(const GPT2Config& config,
                                                     const ParameterStore& store) {
  std::vector<io::TensorToSave> out;
  out.reserve(store.parameters().size());
  for (size_t i = 0; i < store.parameters().size(); ++i) {
    const ParameterEntry& e = store.table().entries()[i];
    out.push_back({e.name, store.parameters()[i].value, GPT2::hugging_face_shape(config, e)});
  }
  return out;
}

absl::Status LoadGPT2Model(const std::string& dir, const GPT2Config& config, ParameterStore& store) {
  std::vector<io::TensorToLoad> expected;
  expected.reserve(store.parameters().size());
  for (size_t i = 0; i < store.parameters().size(); ++i) {
    const ParameterEntry& e = store.table().entries()[i];
    const core::Tensor& value = store.parameters()[i].value;
    if (!value.defined()) {
      return absl::FailedPreconditionError(
          absl::StrCat("loading ", dir, ": parameter \"", e.name, "\" has no memory on this process"));
    }
    expected.push_back({e.name, e.dtype, GPT2::hugging_face_shape(config, e), value});
  }
  return io::LoadModelTensors(dir, expected);
}

}  // namespace colossal::nn
