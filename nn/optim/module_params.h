// colossal::nn — an optimizer's parameters from a model's ParameterStore.
//
// nn/module keeps a model's weights and gradients in flat buffers carved into
// named views (Parameter). optimizer_params turns those views into ParamRefs
// (nn/optim/param.h): float32 weights are their own masters; float16/bfloat16
// weights get optimizer-owned float32 masters and become the model copies the
// optimizer rewrites after every step (DESIGN principle 6).
//
//   COLOSSAL_ASSIGN_OR_RETURN(ParameterStore store, ParameterStore::create(table, stream));
//   COLOSSAL_ASSIGN_OR_RETURN(std::vector<ParamRef> params,
//                             optimizer_params(store.parameters(), stream));
//   COLOSSAL_ASSIGN_OR_RETURN(auto opt, make_hybrid_adam(split_decay_groups(std::move(params), 0.1),
//                                                        AdamOptions{}, stream));
#ifndef COLOSSAL_NN_OPTIM_MODULE_PARAMS_H_
#define COLOSSAL_NN_OPTIM_MODULE_PARAMS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/device/stream.h"
#include "nn/module/parameter.h"
#include "nn/optim/param.h"

namespace colossal::nn {

// make_master_param for each parameter, in order (masters of CUDA weights are
// filled on `stream`). Errors: make_master_param's, naming the parameter.
absl::StatusOr<std::vector<ParamRef>> optimizer_params(absl::Span<const Parameter> parameters,
                                                       const core::Stream& stream);

// A declared_param (name and shape, no tensors) per entry of `table`, in
// order: the optimizer of a model whose parameter memory a plugin keeps
// (gemini).
std::vector<ParamRef> declared_params(const ParameterTable& table);

// The parameters of an optimizer for `store`'s model: optimizer_params while
// the store holds every value and gradient, else declared_params (a plugin
// keeps the memory: gemini's chunks, or low_level_zero stage 2's gradients,
// ParameterStore::grads_released), so no float32 masters are made that the
// plugin would only drop.
absl::StatusOr<std::vector<ParamRef>> model_optimizer_params(const ParameterStore& store,
                                                             const core::Stream& stream);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_OPTIM_MODULE_PARAMS_H_
