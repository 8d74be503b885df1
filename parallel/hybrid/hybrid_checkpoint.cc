// hybrid_parallel's checkpoints: the whole model and optimizer state,
// gathered over tp (pieces) and pp (stages), and cut back when loading.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "nn/module/tensor_split.h"
#include "parallel/hybrid/hybrid_state.h"
#include "parallel/hybrid/stage_states.h"

namespace colossal::parallel {

// The whole tensor of `entry` (dtype of `piece`) on the host, from every tp
// rank's `piece` of it: a collective over tp for a split entry.
absl::StatusOr<core::Tensor> HybridParallelPlugin::State::gather_whole(nn::ParameterEntry entry,
                                                                       const core::Tensor& piece) {
  entry.dtype = piece.dtype();
  const core::Stream& st = piece.device().is_cuda() ? stream : core::Stream::cpu();
  if (!entry.split.active()) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host, piece.to(core::Device::cpu(), st));
    st.synchronize();
    return host;
  }
  // NCCL gathers device memory only.
  core::Tensor mine = piece;
  if (!piece.device().is_cuda() && stream.is_cuda()) {
    COLOSSAL_ASSIGN_OR_RETURN(mine, piece.to(stream.device(), stream));
  }
  const core::Stream& gst = mine.device().is_cuda() ? stream : core::Stream::cpu();
  const int64_t n = entry.numel();
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor all,
                            core::Tensor::empty({tp->size() * n}, entry.dtype, gst));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor flat, mine.reshape({n}));
  comm::CollectiveOptions o;
  if (gst.is_cuda()) o.stream = gst;
  COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, tp->all_gather(all, flat, o));
  COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), absl::StrCat("gathering ", entry.name)));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host, all.to(core::Device::cpu(), gst));
  gst.synchronize();
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor whole, core::Tensor::empty(entry.global_shape, entry.dtype,
                                                                    core::Stream::cpu()));
  for (int r = 0; r < tp->size(); ++r) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor part, host.slice(r * n, (r + 1) * n));
    COLOSSAL_RETURN_IF_ERROR(nn::copy_piece_into_whole(nn::entry_of_part(entry, r), part, whole));
  }
  return whole;
}

// Host tensor `t` sent to / received from pipeline stage `peer` (staged
// through the device where the group is NCCL's).
absl::Status HybridParallelPlugin::State::p2p(const core::Tensor& t, int peer, bool send) {
  core::Tensor buf = t;
  if (stream.is_cuda()) {
    COLOSSAL_ASSIGN_OR_RETURN(buf, t.to(stream.device(), stream));
  }
  comm::CollectiveOptions o;
  if (stream.is_cuda()) o.stream = stream;
  comm::ProcessGroup& g = *pipeline.p2p;
  COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, send ? g.send(buf, peer, o) : g.recv(buf, peer, o));
  COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "hybrid_parallel: pipeline checkpoint"));
  if (!send && stream.is_cuda()) {
    core::Tensor dst = t;
    COLOSSAL_RETURN_IF_ERROR(dst.copy_from(buf, stream));
    stream.synchronize();
  }
  return absl::OkStatus();
}
// Host tensor `t` from pipeline stage `root` to the other stages.
absl::Status HybridParallelPlugin::State::broadcast_host(core::Tensor& t, int root) {
  core::Tensor buf = t;
  if (stream.is_cuda()) {
    COLOSSAL_ASSIGN_OR_RETURN(buf, t.to(stream.device(), stream));
  }
  comm::CollectiveOptions o;
  if (stream.is_cuda()) o.stream = stream;
  COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, pp->broadcast(buf, root, o));
  COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "hybrid_parallel: pipeline checkpoint"));
  if (stream.is_cuda()) {
    COLOSSAL_RETURN_IF_ERROR(t.copy_from(buf, stream));
    stream.synchronize();
  }
  return absl::OkStatus();
}

// This rank's piece of `whole` (a host tensor of entry's whole shape, any dtype).
absl::StatusOr<core::Tensor> HybridParallelPlugin::State::piece_of(nn::ParameterEntry entry,
                                                                   const core::Tensor& whole) {
  entry.dtype = whole.dtype();
  return nn::piece_of_whole(entry, whole);  // a view where the piece is contiguous
}

// The parameter an optimizer state key ("state.<param>.<state>") belongs
// to, when it is a split one and the tensor has the parameter's `shape`
// (a piece: want_whole false) or its whole shape (true).
const nn::ParameterEntry* HybridParallelPlugin::State::split_entry_of(const std::string& key,
                                                                      const core::Shape& shape,
                                                                      bool want_whole) const {
  if (absl::EndsWith(key, ".step")) return nullptr;  // held whole by every tp rank
  const nn::ParameterEntry* e = store.table().find(nn::param_of_state_key(key));
  if (e == nullptr || !e->split.active()) return nullptr;
  return shape == (want_whole ? e->global_shape : e->shape) ? e : nullptr;
}

absl::StatusOr<nn::ParameterTable> HybridParallelPlugin::State::whole_model_table() const {
  if (pipeline.stages == 1) return nn::whole_table(store.table());
  if (whole == nullptr) return absl::FailedPreconditionError("hybrid_parallel: checkpoint before boost");
  return whole->table();
}

absl::StatusOr<nn::ParameterTable> HybridParallelPlugin::State::stage_table(int stage) const {
  if (whole == nullptr) return absl::FailedPreconditionError("hybrid_parallel: checkpoint before boost");
  COLOSSAL_ASSIGN_OR_RETURN(nn::PipelineStage st,
                            nn::pipeline_stage(whole->num_layers(), pipeline.stages, stage,
                                               pipeline.chunks, options.layers_per_stage));
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<nn::CausalLM> names,
                            whole->redeclare(whole->dtype(), nn::ModelSplit{{}, st}));
  return names->table();
}

absl::StatusOr<nn::ParameterStore> HybridParallelPlugin::model_state_dict(
    const nn::ParameterStore& store, int to_rank, const core::Stream& stream) {
  State& s = *state_;
  if (to_rank == 0) {
    // A save's: the stream rank 0 writes, collected.
    COLOSSAL_ASSIGN_OR_RETURN(const nn::ParameterTable whole, s.whole_model_table());
    return collected_model_state(whole, s.world->rank() == 0,
                                 [&](const nn::StatePieceFn& piece) { return stream_model_state(store, 0, piece); });
  }
  // The inner plugin may still be gathering the last step's weights (ZeRO's overlap_allgather).
  COLOSSAL_RETURN_IF_ERROR(s.inner->sync_weights());
  s.stream = stream;
  // This stage's parameters, whole over tp (every tp rank gathers).
  COLOSSAL_ASSIGN_OR_RETURN(nn::ParameterTable stage_table, nn::whole_table(store.table()));
  std::vector<core::Tensor> mine;
  for (size_t i = 0; i < store.parameters().size(); ++i) {
    COLOSSAL_ASSIGN_OR_RETURN(
        core::Tensor t, s.gather_whole(store.table().entries()[i], store.parameters()[i].value));
    mine.push_back(std::move(t));
  }
  const bool want = to_rank < 0 || s.world->rank() == to_rank;
  if (s.pipeline.stages == 1) {
    nn::ParameterStore out = nn::ParameterStore::declare(stage_table);
    if (!want) return out;
    COLOSSAL_ASSIGN_OR_RETURN(out, nn::ParameterStore::create(stage_table, core::Stream::cpu()));
    for (size_t i = 0; i < mine.size(); ++i) {
      core::Tensor dst = out.parameters()[i].value;
      COLOSSAL_RETURN_IF_ERROR(dst.copy_from(mine[i], core::Stream::cpu()));
    }
    return out;
  }
  // Pipeline: every stage sends its parameters (a tied weight only from the
  // first) to stage 0 of its pipeline, which assembles the whole model.
  if (s.whole == nullptr)
    return absl::FailedPreconditionError("hybrid_parallel: checkpoint before boost");
  const nn::ParameterTable& whole = s.whole->table();
  const bool gatherer = s.pipeline.stage == 0;
  nn::ParameterStore out = nn::ParameterStore::declare(whole);
  if (gatherer || to_rank < 0) {
    COLOSSAL_ASSIGN_OR_RETURN(out, nn::ParameterStore::create(whole, core::Stream::cpu()));
  }
  const auto slot = [&](const std::string& name) -> absl::StatusOr<core::Tensor> {
    COLOSSAL_ASSIGN_OR_RETURN(nn::Parameter p, out.find(name));
    return p.value;
  };
  if (gatherer) {
    for (size_t i = 0; i < mine.size(); ++i) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, slot(stage_table.entries()[i].name));
      COLOSSAL_RETURN_IF_ERROR(dst.copy_from(mine[i], core::Stream::cpu()));
    }
  }
  for (int stage = 1; stage < s.pipeline.stages; ++stage) {
    if (!gatherer && s.pipeline.stage != stage) continue;
    COLOSSAL_ASSIGN_OR_RETURN(const nn::ParameterTable names, s.stage_table(stage));
    const std::vector<std::string> tied = s.whole->tied_parameters();
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string& name = names.entries()[i].name;
      if (std::find(tied.begin(), tied.end(), name) != tied.end()) continue;  // stage 0's copy
      if (gatherer) {
        COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, slot(name));
        COLOSSAL_RETURN_IF_ERROR(s.p2p(dst, stage, /*send=*/false));
      } else {
        COLOSSAL_RETURN_IF_ERROR(s.p2p(mine[i], 0, /*send=*/true));
      }
    }
  }
  if (to_rank < 0) {
    for (core::DType dt : whole.dtypes()) {
      core::Tensor flat = out.flat_values(dt);
      COLOSSAL_RETURN_IF_ERROR(s.broadcast_host(flat, 0));
    }
  }
  if (!want && !gatherer) return nn::ParameterStore::declare(whole);
  return out;
}

absl::Status HybridParallelPlugin::load_model_state_dict(nn::ParameterStore& store,
                                                         const nn::ParameterStore& state,
                                                         const core::Stream& stream) {
  COLOSSAL_RETURN_IF_ERROR(state_->inner->sync_weights());  // no gather may write over the load
  // Each parameter this rank holds (its stage's, its tp piece) by name: a
  // view of the state's tensor where the piece is contiguous in it.
  const nn::ParameterTable& table = store.table();
  nn::ParameterStore local = nn::ParameterStore::declare(table);
  for (size_t i = 0; i < table.size(); ++i) {
    const nn::ParameterEntry& e = table.entries()[i];
    absl::StatusOr<nn::Parameter> whole = state.find(e.name);
    if (!whole.ok()) return core::annotate(whole.status(), "hybrid_parallel: the state to load");
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor piece, nn::piece_of_whole(e, whole->value));
    COLOSSAL_RETURN_IF_ERROR(local.set_views(i, std::move(piece), core::Tensor()));
  }
  return state_->inner->load_model_state_dict(store, local, stream);
}

absl::StatusOr<nn::OptimizerStateDict> HybridParallelPlugin::optimizer_state_dict(
    const nn::Optimizer& optimizer, int to_rank) {
  State& s = *state_;
  if (to_rank == 0) {  // a save's: the stream rank 0 writes, collected
    COLOSSAL_ASSIGN_OR_RETURN(nn::StreamedOptimizerState streamed, stream_optimizer_state(optimizer, 0));
    return nn::collect_streamed(std::move(streamed), s.world->rank() == 0);
  }
  COLOSSAL_ASSIGN_OR_RETURN(nn::OptimizerStateDict sd, s.inner->optimizer_state_dict(optimizer, -1));
  for (auto& [key, tensor] : sd.tensors) {
    const nn::ParameterEntry* e = s.split_entry_of(key, tensor.shape(), /*want_whole=*/false);
    if (e == nullptr) {
      // A state every tp rank holds whole: on the host, as the default gives it.
      continue;
    }
    COLOSSAL_ASSIGN_OR_RETURN(tensor, s.gather_whole(*e, tensor));
  }
  if (s.pipeline.stages > 1) {
    // Every stage's part, joined on stage 0 of each pipeline (host tensors).
    for (auto& [key, tensor] : sd.tensors) {
      if (tensor.device().is_cuda()) {
        COLOSSAL_ASSIGN_OR_RETURN(tensor, tensor.to(core::Device::cpu(), s.stream));
      }
    }
    s.stream.synchronize();
    COLOSSAL_ASSIGN_OR_RETURN(
        sd, gather_stage_states(
                std::move(sd), s.pipeline.stage, s.pipeline.stages, s.whole->tied_parameters(),
                /*to_all=*/to_rank < 0,
                [&s](const core::Tensor& t, int peer, bool send) { return s.p2p(t, peer, send); }));
    // Joined in stage order; listed as one process's optimizer lists them
    // (with model chunks, stages hold layers out of order).
    sd = stage_part(sd, s.whole->table());
  }
  if (to_rank >= 0 && s.world->rank() != to_rank) sd.tensors.clear();
  return sd;
}

absl::Status HybridParallelPlugin::load_optimizer_state_dict(nn::Optimizer& optimizer,
                                                             const nn::OptimizerStateDict& state) {
  State& s = *state_;
  // This stage's parameters only (all of them without pipelines).
  nn::OptimizerStateDict local = stage_part(state, s.store.table());
  for (auto& [key, tensor] : local.tensors) {
    const nn::ParameterEntry* e = s.split_entry_of(key, tensor.shape(), /*want_whole=*/true);
    if (e == nullptr) continue;
    core::Tensor host = tensor;
    if (tensor.device().is_cuda()) {
      COLOSSAL_ASSIGN_OR_RETURN(host, tensor.to(core::Device::cpu(), s.stream));
      s.stream.synchronize();
    }
    COLOSSAL_ASSIGN_OR_RETURN(tensor, State::piece_of(*e, host));
  }
  return s.inner->load_optimizer_state_dict(optimizer, local);
}

}  // namespace colossal::parallel
