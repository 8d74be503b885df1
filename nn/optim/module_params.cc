#include "nn/optim/module_params.h"

#include <utility>
#include <vector>

#include "core/status/status.h"

namespace colossal::nn {

absl::StatusOr<std::vector<ParamRef>> optimizer_params(absl::Span<const Parameter> parameters,
                                                       const core::Stream& stream) {
  std::vector<ParamRef> out;
  out.reserve(parameters.size());
  for (const Parameter& p : parameters) {
    COLOSSAL_ASSIGN_OR_RETURN(ParamRef ref, make_master_param(p.name, p.value, p.grad, stream));
    out.push_back(std::move(ref));
  }
  return out;
}

std::vector<ParamRef> declared_params(const ParameterTable& table) {
  std::vector<ParamRef> out;
  out.reserve(table.size());
  for (const ParameterEntry& e : table.entries()) out.push_back(declared_param(e.name, e.shape));
  return out;
}

absl::StatusOr<std::vector<ParamRef>> model_optimizer_params(const ParameterStore& store,
                                                             const core::Stream& stream) {
  if (store.materialized() && !store.grads_released()) {
    return optimizer_params(store.parameters(), stream);
  }
  return declared_params(store.table());
}

}  // namespace colossal::nn
