// colossal::nn — an optimizer's saved state: named tensors plus a small JSON.
//
// Optimizer::state_dict() returns, and load_state_dict() takes, an
// OptimizerStateDict: every tensor of per-parameter state under a flat name,
// and the group hyper-parameters as an OptimizerMeta that io/ writes as JSON
// beside a safetensors file (DESIGN: "optimizer and scheduler state in the
// same format plus a small JSON").
//
//   state.<param name>.exp_avg        float32, the parameter's shape   (Adam)
//   state.<param name>.exp_avg_sq     float32, the parameter's shape   (Adam)
//   state.<param name>.momentum_buffer float32, the parameter's shape  (SGD with momentum)
//   state.<param name>.step           int64 scalar on the CPU: steps taken
//   state.<param name>.master         float32: the fp32 master, only for parameters
//                                     with a model copy (the optimizer owns it)
//
//   {"version": 1, "type": "hybrid_adam",
//    "param_groups": [{"lr": 0.0006, "weight_decay": 0.1, "betas": [0.9, 0.95], "eps": 1e-08,
//                      "bias_correction": true, "adamw_mode": true,
//                      "params": ["wte.weight", "h.0.attn.c_attn.weight"]}, ...]}
//
// SGD groups carry "lr", "weight_decay", "momentum", "dampening", "nesterov".
//
//   COLOSSAL_ASSIGN_OR_RETURN(OptimizerStateDict sd, optimizer->state_dict());
//   std::string json = optimizer_meta_to_json(sd.meta);    // beside the tensors
//   ...
//   COLOSSAL_ASSIGN_OR_RETURN(sd.meta, optimizer_meta_from_json(json));
//   COLOSSAL_RETURN_IF_ERROR(optimizer->load_state_dict(sd));
#ifndef COLOSSAL_NN_OPTIM_STATE_DICT_H_
#define COLOSSAL_NN_OPTIM_STATE_DICT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "core/device/stream.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor.h"
#include "nn/optim/param.h"

namespace colossal::nn {

// One group as saved: its hyper-parameters and its parameters' names, in order.
struct GroupState {
  GroupHyperParams hyper;
  std::vector<std::string> params;
  friend bool operator==(const GroupState&, const GroupState&) = default;
};

// Everything but the tensors.
struct OptimizerMeta {
  std::string type;  // "adamw", "cpu_adam", "hybrid_adam" or "sgd"
  std::vector<GroupState> groups;
  friend bool operator==(const OptimizerMeta&, const OptimizerMeta&) = default;
};

struct OptimizerStateDict {
  OptimizerMeta meta;
  std::map<std::string, core::Tensor> tensors;  // keys as in the file comment
};

// "state.<param>.<state>".
std::string state_key(absl::string_view param, absl::string_view state);
// The <param> of such a key ("" for a key of another form).
std::string param_of_state_key(absl::string_view key);

// Whether `type` names an Adam-family optimizer (their states load into each other).
bool is_adam_type(absl::string_view type);

// The JSON above (doubles round-trip exactly).
std::string optimizer_meta_to_json(const OptimizerMeta& meta);

// Pieces of state tensors handed out one at a time: elements [offset, offset
// + piece.numel()) of tensor `index`, flattened (`piece`: a host tensor of
// the tensor's dtype, valid during the call).
using StatePieceFn = std::function<void(size_t index, int64_t offset, const core::Tensor& piece)>;

// A tensor declared before its values come.
struct StateTensorDecl {
  std::string key;
  core::DType dtype = core::DType::kF32;
  core::Shape shape;
};

// An optimizer's state with its large tensors declared rather than held: a
// plugin whose state does not fit one host (gemini) streams them into a
// checkpoint. `write` calls its argument with every element of every
// `streamed` tensor (on the rank that asked for them; on others it is not
// called) and is a collective for a plugin that gathers: every rank calls
// it once.
struct StreamedOptimizerState {
  OptimizerStateDict held;  // the meta, and small tensors (step counts)
  std::vector<StateTensorDecl> streamed;
  std::function<absl::Status(const StatePieceFn&)> write;
};

// A held state (`sd`: ddp's optimizer, views of its memory) handed out as
// a stream, for callers that take the state of every plugin so: its
// one-element tensors (step counts) stay held, every other tensor is
// streamed whole, one at a time (device tensors are copied to the host on
// `stream`). Where `mine` is false the result holds the meta alone and
// `write` calls nothing.
absl::StatusOr<StreamedOptimizerState> stream_held(OptimizerStateDict sd, bool mine,
                                                   const core::Stream& stream);

// The whole state as one dict: runs `state.write` (on every rank, as a
// collective must) and, where `hold` is true, gathers the pieces into new
// host tensors beside the held ones; elsewhere the streamed tensors are left
// out. InvalidArgument for a piece outside its tensor or of another dtype.
absl::StatusOr<OptimizerStateDict> collect_streamed(StreamedOptimizerState state, bool hold);

// Parses optimizer_meta_to_json's output. InvalidArgument naming the key for
// malformed JSON, an unknown "type" (with a suggestion), a missing or mistyped
// key, or an unsupported "version". Unknown keys are ignored.
absl::StatusOr<OptimizerMeta> optimizer_meta_from_json(absl::string_view json);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_OPTIM_STATE_DICT_H_
