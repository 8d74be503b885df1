// colossal::nn — Llama's Hugging Face config.json (LlamaConfig's fields,
// names and defaults: a key that is absent takes transformers' default).
// Written with every checkpoint, read by `from_pretrained`. Our
// padded_vocab_multiple travels as "colossal_padded_vocab_multiple".
//
//   std::string json = LlamaConfigToHuggingFaceJson(config, DType::kBF16);
//   COLOSSAL_ASSIGN_OR_RETURN(LlamaConfig c, LlamaConfigFromHuggingFaceJson(text, "dir/config.json"));
#ifndef COLOSSAL_NN_MODELS_LLAMA_CONFIG_JSON_H_
#define COLOSSAL_NN_MODELS_LLAMA_CONFIG_JSON_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/dtype/dtype.h"
#include "nn/models/llama/llama.h"

namespace colossal::nn {

// config.json for LlamaForCausalLM with weights of `dtype` (MistralForCausalLM,
// model_type "mistral", with a sliding_window; Qwen2ForCausalLM, model_type
// "qwen2", with qkv_bias and no attention_bias; MixtralForCausalLM, model_type
// "mixtral", with num_local_experts).
std::string LlamaConfigToHuggingFaceJson(const LlamaConfig& config, core::DType dtype);

// The LlamaConfig a config.json describes. InvalidArgument naming `what` (the
// file) and the key: a wrong type, a model_type other than "llama",
// "mistral", "qwen2" or "mixtral", a Mixtral with output_router_logits or
// router_jitter_noise (not in this build), a sliding_window that is not positive (or set for
// "llama"), a Qwen2 with use_sliding_window, a rope_scaling type other than
// "llama3", a config validate() refuses. A Mistral's sliding_window becomes
// LlamaConfig::sliding_window: the model's context is then at most the window
// (full causal attention is the same up to there). "qwen2" sets qkv_bias and
// reads no attention_bias or mlp_bias (transformers' Qwen2 has fixed biases);
// its sliding_window without use_sliding_window is unused, as in transformers.
absl::StatusOr<LlamaConfig> LlamaConfigFromHuggingFaceJson(std::string_view text,
                                                           std::string_view what);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODELS_LLAMA_CONFIG_JSON_H_
