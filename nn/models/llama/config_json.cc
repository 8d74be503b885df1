#include "nn/models/llama/config_json.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace colossal::nn {
namespace {

using Json = nlohmann::json;

// Debian's abseil has its own string_view: std's pass through std::string.
absl::Status key_error(std::string_view what, std::string_view key, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(what), ": \"", std::string(key), "\" ", std::string(why)));
}

// j[key] into *out when present (and not null): integers, numbers, booleans.
absl::Status read(const Json& j, const char* key, int64_t* out, std::string_view what) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer()) return key_error(what, key, "must be an integer");
  *out = it->get<int64_t>();
  return absl::OkStatus();
}
absl::Status read(const Json& j, const char* key, double* out, std::string_view what) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) return key_error(what, key, "must be a number");
  *out = it->get<double>();
  return absl::OkStatus();
}
absl::Status read(const Json& j, const char* key, bool* out, std::string_view what) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) return key_error(what, key, "must be true or false");
  *out = it->get<bool>();
  return absl::OkStatus();
}
// bos/eos ids: an integer, or a list (Llama-3 instruct models list several
// end tokens): the first is ours.
absl::Status read_token(const Json& j, const char* key, int64_t* out, std::string_view what) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
    *out = (*it)[0].get<int64_t>();
    return absl::OkStatus();
  }
  return read(j, key, out, what);
}

}  // namespace

std::string LlamaConfigToHuggingFaceJson(const LlamaConfig& c, core::DType dtype) {
  Json j{
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.kv_heads()},
      {"head_dim", c.head_size()},
      {"hidden_act", "silu"},
      {"max_position_embeddings", c.max_position_embeddings},
      {"initializer_range", c.initializer_range},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope_scaling", nullptr},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", c.attention_bias},
      {"attention_dropout", 0.0},
      {"mlp_bias", c.mlp_bias},
      {"pretraining_tp", 1},
      {"use_cache", true},
      {"bos_token_id", c.bos_token_id},
      {"eos_token_id", c.eos_token_id},
      {"torch_dtype", core::dtype_name(dtype)},
      {"colossal_padded_vocab_multiple", c.padded_vocab_multiple},
  };
  if (c.qkv_bias && !c.attention_bias) {
    // Qwen2's class: q/k/v biases, none on o_proj or the MLP (validate()
    // refuses mlp_bias and a window beside qkv_bias).
    j["architectures"] = {"Qwen2ForCausalLM"};
    j["model_type"] = "qwen2";
    j.erase("attention_bias");
    j.erase("mlp_bias");
    j.erase("pretraining_tp");
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = c.num_hidden_layers;
  }
  if (c.sliding_window > 0) {
    // Only Mistral's class has the window: transformers then computes what
    // the original checkpoint does past it too.
    j["architectures"] = {"MistralForCausalLM"};
    j["model_type"] = "mistral";
    j["sliding_window"] = c.sliding_window;
  }
  if (c.num_local_experts > 0) {
    // Mixtral's class (a Mistral with experts): no biases, the window or null.
    j["architectures"] = {"MixtralForCausalLM"};
    j["model_type"] = "mixtral";
    j.erase("attention_bias");
    j.erase("mlp_bias");
    j.erase("pretraining_tp");
    j["sliding_window"] = c.sliding_window > 0 ? Json(c.sliding_window) : Json(nullptr);
    j["num_local_experts"] = c.num_local_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["output_router_logits"] = false;
    j["router_jitter_noise"] = 0.0;
  }
  if (c.rope_scaling.has_value()) {
    j["rope_scaling"] = Json{
        {"rope_type", "llama3"},
        {"factor", c.rope_scaling->factor},
        {"low_freq_factor", c.rope_scaling->low_freq_factor},
        {"high_freq_factor", c.rope_scaling->high_freq_factor},
        {"original_max_position_embeddings", c.rope_scaling->original_max_position_embeddings},
    };
  }
  return j.dump(2) + "\n";
}

absl::StatusOr<LlamaConfig> LlamaConfigFromHuggingFaceJson(std::string_view text,
                                                           std::string_view what) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": not a JSON object"));
  }
  const auto type = j.find("model_type");
  if (type == j.end() || !type->is_string() ||
      (*type != "llama" && *type != "mistral" && *type != "qwen2" && *type != "mixtral")) {
    return key_error(what, "model_type",
                     absl::StrCat("is ", type == j.end() ? std::string("missing") : type->dump(),
                                  "; expected \"llama\" (or \"mistral\", \"qwen2\", \"mixtral\")"));
  }
  LlamaConfig c;  // transformers' defaults for absent keys
  const bool qwen2 = *type == "qwen2";
  const bool mixtral = *type == "mixtral";
  if (mixtral) {
    // MixtralConfig's defaults (Mixtral-8x7B's).
    c.intermediate_size = 14336, c.num_key_value_heads = 8, c.max_position_embeddings = 4096 * 32;
    c.rms_norm_eps = 1e-5, c.rope_theta = 1e6, c.num_local_experts = 8, c.num_experts_per_tok = 2;
    for (auto [key, out] : {std::pair{"num_local_experts", &c.num_local_experts},
                            std::pair{"num_experts_per_tok", &c.num_experts_per_tok}}) {
      if (absl::Status s = read(j, key, out, what); !s.ok()) return s;
    }
    bool router_logits = false;
    if (absl::Status s = read(j, "output_router_logits", &router_logits, what); !s.ok()) return s;
    if (router_logits) {
      return key_error(what, "output_router_logits",
                       "is true; the router's load-balancing loss is not in this build (set it false: "
                       "the loss is then the language-model loss alone, as transformers computes it)");
    }
    double jitter = 0.0;
    if (absl::Status s = read(j, "router_jitter_noise", &jitter, what); !s.ok()) return s;
    if (jitter != 0.0) {
      return key_error(what, "router_jitter_noise",
                       absl::StrCat("is ", jitter, "; router jitter is not in this build (it must be 0)"));
    }
  }
  if (qwen2) {
    // Qwen2 / Qwen2.5: a Llama with q/k/v biases. Its window applies only
    // with use_sliding_window (false in every published checkpoint).
    c.qkv_bias = true;
    bool windowed = false;
    if (absl::Status s = read(j, "use_sliding_window", &windowed, what); !s.ok()) return s;
    if (windowed) {
      return key_error(what, "use_sliding_window",
                       "is true; sliding-window attention is not supported (Qwen2 here attends to every "
                       "earlier position in every layer)");
    }
  }
  const auto window = j.find("sliding_window");
  if (!qwen2 && window != j.end() && !window->is_null()) {
    if (*type != "mistral" && !mixtral) {
      return key_error(what, "sliding_window", "is set for model_type \"llama\", which has none");
    }
    if (absl::Status s = read(j, "sliding_window", &c.sliding_window, what); !s.ok()) return s;
    if (c.sliding_window <= 0) {
      return key_error(what, "sliding_window", absl::StrCat("is ", c.sliding_window,
                                                            "; it must be positive or null"));
    }
  }
  struct IntField { const char* key; int64_t* out; };
  for (IntField f : {IntField{"vocab_size", &c.vocab_size}, IntField{"hidden_size", &c.hidden_size},
                     IntField{"intermediate_size", &c.intermediate_size},
                     IntField{"num_hidden_layers", &c.num_hidden_layers},
                     IntField{"num_attention_heads", &c.num_attention_heads},
                     IntField{"num_key_value_heads", &c.num_key_value_heads},
                     IntField{"head_dim", &c.head_dim},
                     IntField{"max_position_embeddings", &c.max_position_embeddings},
                     IntField{"colossal_padded_vocab_multiple", &c.padded_vocab_multiple}}) {
    if (absl::Status s = read(j, f.key, f.out, what); !s.ok()) return s;
  }
  for (auto [key, out] : {std::pair{"bos_token_id", &c.bos_token_id},
                          std::pair{"eos_token_id", &c.eos_token_id}}) {
    if (absl::Status s = read_token(j, key, out, what); !s.ok()) return s;
  }
  for (auto [key, out] : {std::pair{"initializer_range", &c.initializer_range},
                          std::pair{"rms_norm_eps", &c.rms_norm_eps},
                          std::pair{"rope_theta", &c.rope_theta}}) {
    if (absl::Status s = read(j, key, out, what); !s.ok()) return s;
  }
  if (absl::Status s = read(j, "tie_word_embeddings", &c.tie_word_embeddings, what); !s.ok()) return s;
  // Qwen2's and Mixtral's classes have their biases fixed; transformers
  // ignores these keys there.
  if (!qwen2 && !mixtral) {
    for (auto [key, out] : {std::pair{"attention_bias", &c.attention_bias},
                            std::pair{"mlp_bias", &c.mlp_bias}}) {
      if (absl::Status s = read(j, key, out, what); !s.ok()) return s;
    }
  }
  const auto act = j.find("hidden_act");
  if (act != j.end() && *act != "silu") {
    return key_error(what, "hidden_act", absl::StrCat("is ", act->dump(), "; only \"silu\" is supported"));
  }
  // The rotary embedding: transformers 4's "rope_theta" + "rope_scaling", or
  // transformers 5's "rope_parameters" (theta and scaling in one object).
  const char* scaling_key = "rope_scaling";
  auto scaling = j.find(scaling_key);
  const auto parameters = j.find("rope_parameters");
  if (parameters != j.end() && !parameters->is_null()) {
    if (!parameters->is_object() || parameters->contains("full_attention")) {
      return key_error(what, "rope_parameters",
                       "must be one object (per-layer-type rotary parameters are not supported)");
    }
    if (absl::Status s = read(*parameters, "rope_theta", &c.rope_theta, what); !s.ok()) return s;
    scaling_key = "rope_parameters";
    scaling = parameters;
  }
  if (scaling != j.end() && !scaling->is_null()) {
    if (!scaling->is_object()) return key_error(what, scaling_key, "must be an object or null");
    std::string kind = "default";
    for (const char* k : {"rope_type", "type"}) {
      const auto t = scaling->find(k);
      if (t != scaling->end() && t->is_string()) kind = t->get<std::string>();
    }
    if (kind == "llama3") {
      kernels::rope::Llama3RopeScaling r{8.0, 1.0, 4.0, 8192};
      for (auto [key, out] : {std::pair{"factor", &r.factor},
                              std::pair{"low_freq_factor", &r.low_freq_factor},
                              std::pair{"high_freq_factor", &r.high_freq_factor}}) {
        if (absl::Status s = read(*scaling, key, out, what); !s.ok()) return s;
      }
      if (absl::Status s = read(*scaling, "original_max_position_embeddings",
                                &r.original_max_position_embeddings, what);
          !s.ok()) {
        return s;
      }
      c.rope_scaling = r;
    } else if (kind != "default") {
      return key_error(what, scaling_key,
                       absl::StrCat("has rope_type \"", kind,
                                    "\"; supported: \"llama3\" and \"default\" (no scaling)"));
    }
  }
  if (absl::Status s = c.validate(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(std::string(what), ": ", s.message()));
  }
  return c;
}

}  // namespace colossal::nn
