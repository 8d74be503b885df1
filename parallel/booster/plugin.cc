#include "parallel/booster/plugin.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"

namespace colossal::parallel {

absl::Status Plugin::materialize(nn::ParameterStore& store, uint64_t seed,
                                 const core::Stream& stream) {
  COLOSSAL_RETURN_IF_ERROR(store.allocate(stream));
  return store.initialize(seed, stream);
}

absl::StatusOr<nn::ParameterStore> Plugin::model_state_dict(const nn::ParameterStore& store,
                                                            int to_rank,
                                                            const core::Stream& stream) {
  if (to_rank >= 0 && to_rank != dp_rank()) return nn::ParameterStore::declare(store.table());
  return replicated_model_state(store, stream);
}

absl::Status Plugin::load_model_state_dict(nn::ParameterStore& store,
                                           const nn::ParameterStore& state,
                                           const core::Stream& stream) {
  return load_replicated_model_state(store, state, stream);
}

absl::StatusOr<nn::ParameterStore> replicated_model_state(const nn::ParameterStore& store,
                                                          const core::Stream& stream) {
  COLOSSAL_ASSIGN_OR_RETURN(nn::ParameterStore host,
                            nn::ParameterStore::create(store.table(), core::Stream::cpu()));
  for (core::DType dtype : store.table().dtypes()) {
    core::Tensor out = host.flat_values(dtype);
    COLOSSAL_RETURN_IF_ERROR(out.copy_from(store.flat_values(dtype), stream));
  }
  stream.synchronize();
  return host;
}

absl::StatusOr<nn::ParameterStore> collected_model_state(
    const nn::ParameterTable& table, bool hold,
    const std::function<absl::Status(const nn::StatePieceFn&)>& stream) {
  nn::ParameterStore out = nn::ParameterStore::declare(table);
  if (hold) COLOSSAL_RETURN_IF_ERROR(out.allocate(core::Stream::cpu()));
  absl::Status copied;
  COLOSSAL_RETURN_IF_ERROR(stream([&](size_t param, int64_t offset, const core::Tensor& piece) {
    if (!hold || !copied.ok()) return;
    const core::Tensor* dst = param < table.size() ? &out.parameters()[param].value : nullptr;
    if (dst == nullptr || offset < 0 || piece.numel() > dst->numel() - offset || piece.dtype() != dst->dtype()) {
      copied = absl::InvalidArgumentError(absl::StrCat("a piece ", piece.to_string(), " at ", offset,
                                                       " does not fit parameter ", param));
      return;
    }
    std::memcpy(static_cast<char*>(dst->raw_data()) + offset * core::dtype_size(piece.dtype()),
                piece.raw_data(), piece.nbytes());
  }));
  COLOSSAL_RETURN_IF_ERROR(copied);
  return out;
}

absl::Status load_replicated_model_state(nn::ParameterStore& store, const nn::ParameterStore& state,
                                         const core::Stream& stream) {
  const nn::ParameterTable& mine = store.table();
  const nn::ParameterTable& theirs = state.table();
  if (mine.dtypes() != theirs.dtypes() || mine.size() != theirs.size()) {
    return absl::InvalidArgumentError("load_model_state_dict: the state has another table");
  }
  for (core::DType dtype : mine.dtypes()) {
    if (mine.buffer_numel(dtype) != theirs.buffer_numel(dtype)) {
      return absl::InvalidArgumentError("load_model_state_dict: the state has another layout");
    }
    core::Tensor out = store.flat_values(dtype);
    const core::Tensor in = state.flat_values(dtype);
    if (in.defined()) {
      COLOSSAL_RETURN_IF_ERROR(out.copy_from(in, stream));
      continue;
    }
    // A state of views (a checkpoint's mapping): parameter by parameter.
    for (size_t i = 0; i < mine.size(); ++i) {
      if (mine.entries()[i].dtype != dtype) continue;
      const core::Tensor& from = state.parameters()[i].value;
      if (!from.defined() || from.shape() != mine.entries()[i].shape) {
        return absl::InvalidArgumentError(absl::StrCat("load_model_state_dict: the state's \"",
                                                       mine.entries()[i].name, "\" is ", from.to_string()));
      }
      core::Tensor to = store.parameters()[i].value;
      COLOSSAL_RETURN_IF_ERROR(to.copy_from(from, stream));
    }
  }
  stream.synchronize();
  return absl::OkStatus();
}

}  // namespace colossal::parallel
