#include "nn/models/causal_lm/hugging_face.h"

#include "absl/strings/str_cat.h"
#include "core/context/context.h"
#include "core/ops/elementwise.h"
#include "core/status/status.h"

namespace colossal::nn {

std::vector<io::TensorToSave> HuggingFaceTensors(const CausalLM& model, const ParameterStore& store) {
  std::vector<io::TensorToSave> out;
  out.reserve(store.parameters().size());
  for (size_t i = 0; i < store.parameters().size(); ++i) {
    const ParameterEntry& e = store.table().entries()[i];
    out.push_back({e.name, store.parameters()[i].value, model.hugging_face_shape(e)});
  }
  return out;
}

absl::Status LoadHuggingFaceModel(const std::string& dir, const CausalLM& model,
                                  ParameterStore& store) {
  std::vector<io::TensorToLoad> expected;
  expected.reserve(store.parameters().size());
  for (size_t i = 0; i < store.parameters().size(); ++i) {
    const ParameterEntry& e = store.table().entries()[i];
    const core::Tensor& value = store.parameters()[i].value;
    if (!value.defined()) {
      return absl::FailedPreconditionError(
          absl::StrCat("loading ", dir, ": parameter \"", e.name, "\" has no memory on this process"));
    }
    expected.push_back({e.name, e.dtype, model.hugging_face_shape(e), value});
  }
  return io::LoadModelTensors(dir, expected);
}

absl::StatusOr<ParameterStore> MapHuggingFaceModel(const std::string& dir, const CausalLM& model) {
  const ParameterTable& table = model.table();
  std::vector<io::TensorToMap> expected;
  expected.reserve(table.size());
  for (const ParameterEntry& e : table.entries()) {
    expected.push_back({e.name, e.dtype, model.hugging_face_shape(e), e.shape});
  }
  COLOSSAL_ASSIGN_OR_RETURN(std::vector<core::Tensor> views, io::MapModelTensors(dir, expected));
  ParameterStore store = ParameterStore::declare(table);
  for (size_t i = 0; i < views.size(); ++i) {
    COLOSSAL_RETURN_IF_ERROR(store.set_views(i, std::move(views[i]), core::Tensor()));
  }
  return store;
}

absl::Status LoadHuggingFaceModelConverting(const std::string& dir, const CausalLM& model,
                                            ParameterStore& store) {
  const core::DType want = model.dtype();
  absl::StatusOr<core::DType> have = io::ReadCheckpointDType(dir);
  if (!have.ok() || *have == want) return LoadHuggingFaceModel(dir, model, store);
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<CausalLM> as_saved, model.redeclare(*have, ModelSplit{}));
  COLOSSAL_ASSIGN_OR_RETURN(ParameterStore files,
                            ParameterStore::create(as_saved->table(), core::Stream::cpu()));
  COLOSSAL_RETURN_IF_ERROR(LoadHuggingFaceModel(dir, *as_saved, files));
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<core::Context> ctx,
                            core::Context::create(core::Device::cpu()));
  core::Tensor out = store.flat_values(want);
  return core::ops::cast(*ctx, out, files.flat_values(*have));
}

}  // namespace colossal::nn
