// colossal::nn — every model family by name: the model a Hugging Face
// directory's config.json describes ("model_type": gpt2, llama, mistral, qwen2, mixtral),
// declared without memory.
//
//   COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<CausalLM> model,
//                             DeclareHuggingFaceModel("checkpoints/run/step_000100", DType::kF32));
//   COLOSSAL_RETURN_IF_ERROR(model->store().allocate(Stream::cpu()));
//   COLOSSAL_RETURN_IF_ERROR(LoadHuggingFaceModelConverting(dir, *model, model->store()));
#ifndef COLOSSAL_NN_MODELS_REGISTRY_REGISTRY_H_
#define COLOSSAL_NN_MODELS_REGISTRY_REGISTRY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/dtype/dtype.h"
#include "nn/models/causal_lm/causal_lm.h"

namespace colossal::nn {

// The model of `dir`/config.json with weights of `dtype` (no memory).
// Errors name the file: unreadable, not JSON, a model_type no family reads
// (naming the known ones), the family's own config errors.
absl::StatusOr<std::unique_ptr<CausalLM>> DeclareHuggingFaceModel(const std::string& dir,
                                                                  core::DType dtype);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODELS_REGISTRY_REGISTRY_H_
