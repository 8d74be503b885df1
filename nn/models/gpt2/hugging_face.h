// colossal::nn — GPT-2 as Hugging Face stores it: config.json and the model
// tensors under HF names and shapes (GPT2LMHeadModel, Conv1D layout), so
// `transformers.GPT2LMHeadModel.from_pretrained(step_dir)` loads our
// checkpoints and we load theirs.
//
// Names and shapes are the model's table's (gpt2.h), except wte: HF's has
// vocab_size rows, ours padded_vocab_size (the padding rows are not written
// and are zero after a load). config.json carries our padded_vocab_multiple
// as "colossal_padded_vocab_multiple".
//
//   std::vector<io::TensorToSave> tensors = GPT2HuggingFaceTensors(config, model->store());
//   COLOSSAL_RETURN_IF_ERROR(LoadGPT2Model(step_dir, config, model->store()));
#ifndef COLOSSAL_NN_MODELS_GPT2_HUGGING_FACE_H_
#define COLOSSAL_NN_MODELS_GPT2_HUGGING_FACE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype/dtype.h"
#include "io/checkpoint/checkpoint.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/module/parameter.h"

namespace colossal::nn {

// Hugging Face's config.json for `config` with weights of `dtype`.
std::string GPT2ConfigToHuggingFaceJson(const GPT2Config& config, core::DType dtype);
// The GPT2Config a config.json describes (n_layer, n_head, n_embd,
// vocab_size, n_positions; padded_vocab_multiple from our own
// "colossal_padded_vocab_multiple" key when present). InvalidArgument naming the key.
absl::StatusOr<GPT2Config> GPT2ConfigFromHuggingFaceJson(std::string_view json);
// GPT2ConfigFromHuggingFaceJson of `dir`/config.json (errors name the file).
absl::StatusOr<GPT2Config> ReadGPT2Config(const std::string& dir);

// Every parameter of `store` (materialized) under its name with its Hugging
// Face shape, in table order: what a checkpoint's model files hold.
std::vector<io::TensorToSave> GPT2HuggingFaceTensors(const GPT2Config& config,
                                                     const ParameterStore& store);
// Copies the model tensors of step directory `dir` into `store`, validated
// (io::LoadModelTensors: every parameter present with its HF shape and the
// store's dtype, nothing unexpected); wte's padding rows become zero.
absl::Status LoadGPT2Model(const std::string& dir, const GPT2Config& config, ParameterStore& store);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODELS_GPT2_HUGGING_FACE_H_
