// colossal::nn — reading a GPT-2 checkpoint directory's config.json (the
// tensors load through nn/models/causal_lm/hugging_face.h, as every family's).
//
//   COLOSSAL_ASSIGN_OR_RETURN(GPT2Config config, ReadGPT2Config(step_dir));
#ifndef COLOSSAL_NN_MODELS_GPT2_HUGGING_FACE_H_
#define COLOSSAL_NN_MODELS_GPT2_HUGGING_FACE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype/dtype.h"
#include "io/checkpoint/checkpoint.h"
#include "nn/models/gpt2/config_json.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/module/parameter.h"

namespace colossal::nn {

// GPT2ConfigFromHuggingFaceJson (config_json.h) of `dir`/config.json (errors name the file).
absl::StatusOr<GPT2Config> ReadGPT2Config(const std::string& dir);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODELS_GPT2_HUGGING_FACE_H_
