// colossal::nn — any CausalLM's weights as Hugging Face stores them: every
// parameter under its Hugging Face name and shape, so `transformers` loads our
// checkpoints (with the model's config.json, CausalLM::hugging_face_config_json)
// and we load theirs.
//
// Names and shapes are the model's table's, except the padded vocabulary
// tables (CausalLM::hugging_face_shape): Hugging Face's have vocab_size rows,
// ours padded_vocab_size; the padding rows are not written and are zero after
// a load.
//
//   std::vector<io::TensorToSave> tensors = HuggingFaceTensors(*model, model->store());
//   COLOSSAL_RETURN_IF_ERROR(LoadHuggingFaceModel(step_dir, *model, model->store()));
#ifndef COLOSSAL_NN_MODELS_CAUSAL_LM_HUGGING_FACE_H_
#define COLOSSAL_NN_MODELS_CAUSAL_LM_HUGGING_FACE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "io/checkpoint/checkpoint.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "nn/module/parameter.h"

namespace colossal::nn {

// Every parameter of `store` (materialized, declared from `model`'s table)
// under its name with its Hugging Face shape, in table order: what a
// checkpoint's model files hold.
std::vector<io::TensorToSave> HuggingFaceTensors(const CausalLM& model, const ParameterStore& store);

// Copies the model tensors of directory `dir` into `store` (declared from
// `model`'s table), validated (io::LoadModelTensors: every parameter present
// with its Hugging Face shape and the store's dtype, nothing unexpected); the
// padding rows become zero.
absl::Status LoadHuggingFaceModel(const std::string& dir, const CausalLM& model,
                                  ParameterStore& store);

// The same tensors, validated alike, as a store of `model`'s table whose
// parameters view the files' mapping (io::MapModelTensors): no copy but the
// padded rows, so a plugin keeping its share of a model that fills the host
// (gemini) loads it without a second copy in memory. The store has views,
// not flat buffers (ParameterStore::set_views). The files must hold
// `model`'s dtype (InvalidArgument otherwise: LoadHuggingFaceModelConverting
// converts).
absl::StatusOr<ParameterStore> MapHuggingFaceModel(const std::string& dir, const CausalLM& model);

// LoadHuggingFaceModel into a host `store` (ParameterStore::create on the
// CPU) whatever dtype the files hold: when config.json's torch_dtype is not
// the store's, they are read in their own dtype and rounded (or widened) once.
// This is how a Hugging Face directory (often bfloat16) becomes a float32 run.
absl::Status LoadHuggingFaceModelConverting(const std::string& dir, const CausalLM& model,
                                            ParameterStore& store);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODELS_CAUSAL_LM_HUGGING_FACE_H_
