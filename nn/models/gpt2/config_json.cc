#include "nn/models/gpt2/config_json.h"

#include "absl/strings/str_cat.h"
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

}  // namespace colossal::nn
