#include "nn/models/registry/registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "io/checkpoint/checkpoint.h"
#include "nlohmann/json.hpp"
#include "nn/models/gpt2/config_json.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/models/llama/config_json.h"
#include "nn/models/llama/llama.h"

namespace colossal::nn {

absl::StatusOr<std::unique_ptr<CausalLM>> DeclareHuggingFaceModel(const std::string& dir,
                                                                  core::DType dtype) {
  const std::string path = dir + "/config.json";
  COLOSSAL_ASSIGN_OR_RETURN(const std::string text, io::ReadCheckpointConfig(dir));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // A truncated or hand-edited file: say so, not that model_type is missing.
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is not valid JSON (", text.size(),
        " bytes; a truncated copy?): re-copy or re-save the checkpoint's config.json"));
  }
  const auto type = j.is_object() ? j.find("model_type") : j.end();
  // GPT-2 checkpoints written before model_type mattered all have it; a
  // missing one is an error like any other.
  const std::string model_type = type != j.end() && type->is_string() ? type->get<std::string>() : "";
  if (model_type == "gpt2") {
    absl::StatusOr<GPT2Config> config = GPT2ConfigFromHuggingFaceJson(text);
    if (!config.ok()) {
      return absl::Status(config.status().code(), absl::StrCat("'", path, "': ", config.status().message()));
    }
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<GPT2> model, GPT2::declare(*config, dtype));
    return std::unique_ptr<CausalLM>(std::move(model));
  }
  if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2" ||
      model_type == "mixtral") {
    COLOSSAL_ASSIGN_OR_RETURN(LlamaConfig config, LlamaConfigFromHuggingFaceJson(text, path));
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<Llama> model, Llama::declare(config, dtype));
    return std::unique_ptr<CausalLM>(std::move(model));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", path, "': \"model_type\" is ", type == j.end() ? std::string("missing") : type->dump(),
      "; colossal reads \"gpt2\", \"llama\", \"mistral\", \"qwen2\" and \"mixtral\""));
}

}  // namespace colossal::nn
