// colossal::nn — GPT-2's Hugging Face config.json (GPT2Config's fields and
// names), written with every checkpoint and read back by loads and
// `colossal generate`. Our padded_vocab_multiple travels as
// "colossal_padded_vocab_multiple".
//
//   std::string json = GPT2ConfigToHuggingFaceJson(config, DType::kBF16);
//   COLOSSAL_ASSIGN_OR_RETURN(GPT2Config back, GPT2ConfigFromHuggingFaceJson(json));
#ifndef COLOSSAL_NN_MODELS_GPT2_CONFIG_JSON_H_
#define COLOSSAL_NN_MODELS_GPT2_CONFIG_JSON_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/dtype/dtype.h"
#include "nn/models/gpt2/gpt2.h"

namespace colossal::nn {

// Hugging Face's config.json for `config` with weights of `dtype`.
std::string GPT2ConfigToHuggingFaceJson(const GPT2Config& config, core::DType dtype);
// The GPT2Config a config.json describes (n_layer, n_head, n_embd,
// vocab_size, n_positions; padded_vocab_multiple from our own
// "colossal_padded_vocab_multiple" key when present). InvalidArgument naming the key.
absl::StatusOr<GPT2Config> GPT2ConfigFromHuggingFaceJson(std::string_view json);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODELS_GPT2_CONFIG_JSON_H_
