// colossal::parallel — the optimizer state of a pipeline-parallel model: each
// stage holds its parameters' states; a checkpoint holds the whole model's.
//
// gather_stage_states sends every stage's state dict to stage 0 over
// point-to-point messages (a JSON manifest of keys, dtypes and shapes, then
// the tensors), where the groups' parameter lists are joined in stage order
// (a tied weight's state from stage 0 only), as one process's optimizer
// would list them. gather_stage_decls does the same for the declarations of
// a streamed state (nn::StreamedOptimizerState). stage_part cuts the part of
// a whole state dict that a stage's table holds.
#ifndef COLOSSAL_PARALLEL_HYBRID_STAGE_STATES_H_
#define COLOSSAL_PARALLEL_HYBRID_STAGE_STATES_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor/tensor.h"
#include "nn/module/parameter.h"
#include "nn/optim/state_dict.h"

namespace colossal::parallel {

// Sends (send true) or receives a host tensor to or from pipeline stage `peer`.
using HostP2P = std::function<absl::Status(const core::Tensor& t, int peer, bool send)>;

// Every stage calls it with its own state (host tensors). Stage 0 gets the
// whole model's; with to_all every stage gets it, else the others get theirs
// back unchanged. `tied`: parameters stages 0 and stages-1 both hold.
absl::StatusOr<nn::OptimizerStateDict> gather_stage_states(nn::OptimizerStateDict mine, int stage,
                                                           int stages,
                                                           const std::vector<std::string>& tied,
                                                           bool to_all, const HostP2P& p2p);

// The declarations of each stage's streamed state tensors, on stage 0 (one
// list per stage, in stage order); the other stages get theirs back alone.
absl::StatusOr<std::vector<std::vector<nn::StateTensorDecl>>> gather_stage_decls(
    std::vector<nn::StateTensorDecl> mine, int stage, int stages, const HostP2P& p2p);

// The entries of `whole` for the parameters `local` holds (keys, and group
// lists in `local`'s order, as an optimizer over that table lists them).
nn::OptimizerStateDict stage_part(const nn::OptimizerStateDict& whole,
                                  const nn::ParameterTable& local);

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_HYBRID_STAGE_STATES_H_
