// Private to parallel/hybrid: the hybrid_parallel plugin's state, shared by
// hybrid_parallel_plugin.cc (mesh, boost, step) and hybrid_checkpoint.cc
// (gathering and cutting pieces and stages for checkpoints).
#ifndef COLOSSAL_PARALLEL_HYBRID_HYBRID_STATE_H_
#define COLOSSAL_PARALLEL_HYBRID_HYBRID_STATE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/mesh/device_mesh.h"
#include "comm/process_group/process_group.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "parallel/hybrid/hybrid_parallel_plugin.h"

namespace colossal::parallel {

struct HybridParallelPlugin::State {
  HybridParallelOptions options;
  std::shared_ptr<comm::ProcessGroup> world;
  std::optional<comm::DeviceMesh> mesh;
  std::shared_ptr<comm::ProcessGroup> tp, dp, pp;
  // all_to_all sequence parallelism: the sp group, and dp x sp, over which
  // the inner plugin reduces (null without it).
  std::shared_ptr<comm::ProcessGroup> sp, dp_sp;
  Pipeline pipeline;                         // pp_size > 1
  std::shared_ptr<comm::ProcessGroup> tied;  // the first and last stage (pp_size > 1, those stages)
  std::vector<std::string> tied_names;       // after boost: tied parameters this stage holds
  std::unique_ptr<Plugin> inner;             // over dp
  std::unique_ptr<nn::CausalLM> whole;       // after boost with pp_size > 1: names of every stage
  nn::ParameterStore store;                  // after materialize or boost
  nn::Optimizer* optimizer = nullptr;
  core::Stream stream;  // the model's: where pieces are gathered
  // Per optimizer gradient (Optimizer::grads() order): counts in this rank's
  // share of the norm.
  std::vector<bool> in_norm;

  // This rank's share of the norm: its tensor-parallel pieces; parameters
  // whole on every tp rank on tp rank 0 only; a tied weight on the first
  // stage only.
  bool counts_in_norm(const nn::ParameterEntry& e) const {
    if (!e.split.active() && tp->rank() != 0) return false;
    if (pipeline.stages > 1 && pipeline.stage != 0) {
      for (const std::string& t : tied_names) {
        if (t == e.name) return false;
      }
    }
    return true;
  }

  // Checkpoint helpers (hybrid_checkpoint.cc).
  // The whole tensor of `entry` (dtype of `piece`) on the host, from every tp
  // rank's `piece` of it: a collective over tp for a split entry.
  absl::StatusOr<core::Tensor> gather_whole(nn::ParameterEntry entry, const core::Tensor& piece);
  // Host tensor `t` sent to / received from pipeline stage `peer` (staged
  // through the device where the group is NCCL's).
  absl::Status p2p(const core::Tensor& t, int peer, bool send);
  // Host tensor `t` from pipeline stage `root` to the other stages.
  absl::Status broadcast_host(core::Tensor& t, int root);
  // This rank's piece of `whole` (a host tensor of entry's whole shape, any dtype).
  static absl::StatusOr<core::Tensor> piece_of(nn::ParameterEntry entry, const core::Tensor& whole);
  // The parameter an optimizer state key ("state.<param>.<state>") belongs
  // to, when it is a split one and the tensor has the parameter's `shape`
  // (a piece: want_whole false) or its whole shape (true).
  const nn::ParameterEntry* split_entry_of(const std::string& key, const core::Shape& shape,
                                           bool want_whole) const;
  // The parameter table of pipeline stage `stage`, in its order (after boost).
  absl::StatusOr<nn::ParameterTable> stage_table(int stage) const;
  // The whole model's table, one process's: every stage's parameters, whole
  // over tp (with pipelines, after boost).
  absl::StatusOr<nn::ParameterTable> whole_model_table() const;

  // Streamed saves (hybrid_stream.cc). The data-parallel copy world rank 0
  // belongs to writes them (inner rank 0 of each dp group): its tp ranks
  // gather each tensor whole, and its tp rank 0 of every later stage sends
  // it to rank 0.
  bool in_saving_copy() const { return inner->dp_rank() == 0; }
  // Parameters this stage leaves to stage 0 in a save: the tied weight.
  std::vector<std::string> left_to_stage_0() const {
    if (pipeline.stage == 0 || whole == nullptr) return {};
    return whole->tied_parameters();
  }
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_HYBRID_HYBRID_STATE_H_
