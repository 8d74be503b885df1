#include "parallel/hybrid/hybrid_parallel_plugin.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "nn/module/tensor_split.h"
#include "nn/optim/grad_clip.h"
#include "parallel/ddp/ddp_plugin.h"
#include "parallel/hybrid/stage_states.h"
#include "parallel/zero/low_level_zero_plugin.h"

namespace colossal::parallel {

struct HybridParallelPlugin::State {
  HybridParallelOptions options;
  std::shared_ptr<comm::ProcessGroup> world;
  std::optional<comm::DeviceMesh> mesh;
  std::shared_ptr<comm::ProcessGroup> tp, dp, pp;
  Pipeline pipeline;                     // pp_size > 1
  std::shared_ptr<comm::ProcessGroup> tied;  // the first and last stage (pp_size > 1, those stages)
  std::vector<std::string> tied_names;   // after boost: tied parameters this stage holds
  std::unique_ptr<Plugin> inner;  // over dp
  std::unique_ptr<nn::CausalLM> whole;   // after boost with pp_size > 1: names of every stage
  nn::ParameterStore store;       // after materialize or boost
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

  // The whole tensor of `entry` (dtype of `piece`) on the host, from every tp
  // rank's `piece` of it: a collective over tp for a split entry.
  absl::StatusOr<core::Tensor> gather_whole(nn::ParameterEntry entry, const core::Tensor& piece) {
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
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor whole,
                              core::Tensor::empty(entry.global_shape, entry.dtype, core::Stream::cpu()));
    for (int r = 0; r < tp->size(); ++r) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor part, host.slice(r * n, (r + 1) * n));
      COLOSSAL_RETURN_IF_ERROR(
          nn::copy_piece_into_whole(nn::entry_of_part(entry, r), part, whole));
    }
    return whole;
  }

  // Host tensor `t` sent to / received from pipeline stage `peer` (staged
  // through the device where the group is NCCL's).
  absl::Status p2p(const core::Tensor& t, int peer, bool send) {
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
  absl::Status broadcast_host(core::Tensor& t, int root) {
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
  static absl::StatusOr<core::Tensor> piece_of(nn::ParameterEntry entry, const core::Tensor& whole) {
    entry.dtype = whole.dtype();
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor piece,
                              core::Tensor::empty(entry.shape, entry.dtype, core::Stream::cpu()));
    COLOSSAL_RETURN_IF_ERROR(nn::copy_piece_from_whole(entry, whole, piece));
    return piece;
  }

  // The parameter an optimizer state key ("state.<param>.<state>") belongs
  // to, when it is a split one and the tensor has the parameter's `shape`
  // (a piece: want_whole false) or its whole shape (true).
  const nn::ParameterEntry* split_entry_of(const std::string& key, const core::Tensor& t,
                                           bool want_whole) const {
    if (!absl::StartsWith(key, "state.")) return nullptr;
    const size_t dot = key.rfind('.');
    if (dot == std::string::npos || dot <= 6) return nullptr;
    const nn::ParameterEntry* e = store.table().find(key.substr(6, dot - 6));
    if (e == nullptr || !e->split.active()) return nullptr;
    return t.shape() == (want_whole ? e->global_shape : e->shape) ? e : nullptr;
  }
};

absl::StatusOr<std::unique_ptr<HybridParallelPlugin>> HybridParallelPlugin::create(
    std::shared_ptr<comm::ProcessGroup> world, const HybridParallelOptions& options) {
  if (world == nullptr) return absl::InvalidArgumentError("hybrid_parallel: no process group");
  if (options.tp_size < 1 || options.pp_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("hybrid_parallel: tp_size ", options.tp_size,
                                                   " and pp_size ", options.pp_size,
                                                   " must be at least 1"));
  }
  if (options.pp_size > 1 && options.zero_stage > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hybrid_parallel: zero_stage ", options.zero_stage, " with pp_size ", options.pp_size,
        ": pipeline parallelism takes zero_stage 0 or 1 (as Colossal-AI's)"));
  }
  if (options.sequence_parallel &&
      (options.tp_size < 2 || options.pp_size > 1 || options.zero_stage > 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hybrid_parallel: sequence parallelism (split_gather) needs tp_size > 1, pp_size 1 and "
        "zero_stage 0 or 1; got tp_size ", options.tp_size, ", pp_size ", options.pp_size,
        ", zero_stage ", options.zero_stage));
  }
  if (world->size() % (options.tp_size * options.pp_size) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hybrid_parallel: the world's ", world->size(), " ranks do not divide into tp_size ",
        options.tp_size, " x pp_size ", options.pp_size));
  }
  if (options.zero_stage < 0 || options.zero_stage > 2) {
    return absl::InvalidArgumentError(absl::StrCat("hybrid_parallel: zero_stage ",
                                                   options.zero_stage, " must be 0, 1 or 2"));
  }
  auto s = std::make_unique<State>();
  s->options = options;
  s->world = world;
  COLOSSAL_ASSIGN_OR_RETURN(
      comm::DeviceMesh mesh,
      comm::DeviceMesh::hybrid_parallel(world->size(), world->rank(), options.pp_size,
                                        options.tp_size));
  COLOSSAL_RETURN_IF_ERROR(core::annotate(mesh.create_groups(*world), "hybrid_parallel: mesh"));
  COLOSSAL_ASSIGN_OR_RETURN(s->tp, mesh.group("tp"));
  COLOSSAL_ASSIGN_OR_RETURN(s->dp, mesh.group("dp"));
  COLOSSAL_ASSIGN_OR_RETURN(s->pp, mesh.group("pp"));
  if (options.pp_size > 1) {
    s->pipeline.group = s->pp;
    COLOSSAL_ASSIGN_OR_RETURN(s->pipeline.p2p, world->new_group(s->pp->world_ranks()));
    s->pipeline.stage = s->pp->rank();
    s->pipeline.stages = s->pp->size();
    // The end stages of this rank's pipeline share the tied head's weight.
    const std::vector<int>& ends = s->pp->world_ranks();
    if (s->pipeline.stage == 0 || s->pipeline.stage == s->pipeline.stages - 1) {
      COLOSSAL_ASSIGN_OR_RETURN(s->tied, world->new_group({ends.front(), ends.back()}));
    }
  }
  s->mesh.emplace(std::move(mesh));
  if (options.zero_stage == 0) {
    DdpOptions o;
    o.bucket_cap_mb = options.ddp_bucket_cap_mb;
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<DdpPlugin> ddp, DdpPlugin::create(s->dp, o));
    s->inner = std::move(ddp);
  } else {
    LowLevelZeroOptions o;
    o.stage = options.zero_stage;
    o.reduce_bucket_size_in_m = options.zero_bucket_size_in_m;
    o.cpu_offload = options.cpu_offload;
    o.cpu_offload_threads = options.cpu_offload_threads;
    o.norm_group = world;
    State* raw = s.get();  // the inner plugin is the state's: it never outlives it
    o.in_norm = [raw](const nn::ParameterEntry& e) { return raw->counts_in_norm(e); };
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<LowLevelZeroPlugin> zero,
                              LowLevelZeroPlugin::create(s->dp, o));
    s->inner = std::move(zero);
  }
  return std::unique_ptr<HybridParallelPlugin>(new HybridParallelPlugin(std::move(s)));
}

HybridParallelPlugin::HybridParallelPlugin(std::unique_ptr<State> state)
    : state_(std::move(state)) {}

HybridParallelPlugin::~HybridParallelPlugin() = default;

int HybridParallelPlugin::dp_rank() const { return state_->dp->rank(); }
int HybridParallelPlugin::dp_size() const { return state_->dp->size(); }
absl::StatusOr<nn::ModelSplit> HybridParallelPlugin::model_split(const nn::CausalLM& model) const {
  const State& s = *state_;
  nn::ModelSplit split;
  if (s.tp->size() > 1) split.tp = nn::TensorParallel{s.tp, s.options.sequence_parallel};
  if (s.pipeline.stages > 1) {
    COLOSSAL_ASSIGN_OR_RETURN(split.stage, nn::pipeline_stage(model.num_layers(), s.pipeline.stages,
                                                              s.pipeline.stage));
  }
  return split;
}

const Plugin::Pipeline* HybridParallelPlugin::pipeline() const {
  return state_->pipeline.stages > 1 ? &state_->pipeline : nullptr;
}
const comm::DeviceMesh& HybridParallelPlugin::mesh() const { return *state_->mesh; }

absl::Status HybridParallelPlugin::materialize(nn::ParameterStore& store, uint64_t seed,
                                               const core::Stream& stream) {
  State& s = *state_;
  if (s.tp->size() > 1) {
    bool split = false;
    for (const nn::ParameterEntry& e : store.table().entries()) {
      if (!e.split.active()) continue;
      split = true;
      if (e.split.parts != s.tp->size() || e.split.index != s.tp->rank()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "hybrid_parallel: parameter ", e.name, " is piece ", e.split.index, " of ",
            e.split.parts, "; this rank is tensor-parallel rank ", s.tp->rank(), " of ",
            s.tp->size()));
      }
    }
    if (!split) {
      return absl::FailedPreconditionError(absl::StrCat(
          "hybrid_parallel: the model is not split over the ", s.tp->size(),
          " tensor-parallel ranks; declare it as plugin.model_split() says "
          "(nn::CausalLM::redeclare) before materializing it"));
    }
  }
  s.stream = stream;
  s.store = store;
  return Plugin::materialize(store, seed, stream);
}

absl::Status HybridParallelPlugin::boost(nn::Module& model, const nn::ParameterStore& store,
                                         nn::Optimizer& optimizer) {
  State& s = *state_;
  s.store = store;
  s.optimizer = &optimizer;
  s.stream = optimizer.stream();
  s.tied_names.clear();
  if (s.pipeline.stages > 1) {
    const auto* causal = dynamic_cast<const nn::CausalLM*>(&model);
    if (causal == nullptr) {
      return absl::InvalidArgumentError(
          "hybrid_parallel: pipeline stages need a language model (nn::CausalLM)");
    }
    for (const std::string& name : causal->tied_parameters()) {
      if (store.table().find(name) != nullptr) s.tied_names.push_back(name);
    }
    // Declared only (no memory): which stage holds what, for checkpoints.
    COLOSSAL_ASSIGN_OR_RETURN(s.whole, causal->redeclare(causal->dtype(), nn::ModelSplit{}));
  }
  s.in_norm.clear();
  for (int g = 0; g < optimizer.num_groups(); ++g) {
    for (const nn::ParamRef& p : optimizer.group_params(g)) {
      const nn::ParameterEntry* e = store.table().find(p.name);
      if (e == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("hybrid_parallel: the optimizer's parameter ", p.name,
                         " is not in the model"));
      }
      s.in_norm.push_back(s.counts_in_norm(*e));
    }
  }
  return s.inner->boost(model, store, optimizer);
}

absl::Status HybridParallelPlugin::begin_forward(core::Context& ctx) {
  return state_->inner->begin_forward(ctx);
}
absl::Status HybridParallelPlugin::end_forward(bool ok) { return state_->inner->end_forward(ok); }
absl::Status HybridParallelPlugin::begin_backward(core::Context& ctx, bool sync) {
  return state_->inner->begin_backward(ctx, sync);
}
absl::Status HybridParallelPlugin::end_backward(bool ok) { return state_->inner->end_backward(ok); }
absl::Status HybridParallelPlugin::before_step(const core::Stream& stream) {
  State& s = *state_;
  COLOSSAL_RETURN_IF_ERROR(s.inner->before_step(stream));
  comm::CollectiveOptions o;
  if (stream.is_cuda()) o.stream = stream;
  if (s.options.sequence_parallel) {
    // Every tp rank saw its own positions: the whole-parameter gradients are
    // partial sums over the group.
    for (size_t i = 0; i < s.store.parameters().size(); ++i) {
      if (s.store.table().entries()[i].split.active()) continue;
      const nn::Parameter& p = s.store.parameters()[i];
      COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, s.tp->all_reduce(p.grad, comm::ReduceOp::kSum, o));
      if (stream.is_cuda()) {
        w->wait_stream(stream);
      } else {
        COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), absl::StrCat("summing ", p.name)));
      }
    }
  }
  if (s.tied == nullptr || s.tied_names.empty()) return absl::OkStatus();
  // The tied weight's two copies take the sum of both stages' gradients.
  for (const std::string& name : s.tied_names) {
    COLOSSAL_ASSIGN_OR_RETURN(nn::Parameter p, s.store.find(name));
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, s.tied->all_reduce(p.grad, comm::ReduceOp::kSum, o));
    if (stream.is_cuda()) {
      w->wait_stream(stream);
    } else {
      COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), absl::StrCat("summing tied ", name)));
    }
  }
  return absl::OkStatus();
}
absl::Status HybridParallelPlugin::zero_grad() { return state_->inner->zero_grad(); }

absl::StatusOr<nn::MixedPrecisionStepResult> HybridParallelPlugin::step(
    nn::DynamicLossScaler* scaler, float max_norm) {
  State& s = *state_;
  if (s.optimizer == nullptr) return absl::FailedPreconditionError("hybrid_parallel: step before boost");
  // low_level_zero sums its share of the norm over the world itself.
  if (s.inner->owns_step()) return s.inner->step(scaler, max_norm);
  nn::MixedPrecisionStepOptions o;
  o.max_norm = max_norm;
  o.global_norm = [&s](const std::vector<core::Tensor>& grads,
                       const core::Stream& stream) -> absl::StatusOr<nn::GradNorm> {
    std::vector<core::Tensor> mine;
    for (size_t i = 0; i < grads.size() && i < s.in_norm.size(); ++i) {
      if (s.in_norm[i]) mine.push_back(grads[i]);
    }
    COLOSSAL_ASSIGN_OR_RETURN(nn::GradNorm local, nn::grad_norm(mine, stream));
    // [sum of squares, non-finite flag], summed over tp and pp: every dp
    // rank holds the same averaged gradients (ddp), so the dp ranks' sums
    // are equal.
    float sums[2] = {local.norm * local.norm, local.finite ? 0.0f : 1.0f};
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t, core::Tensor::empty({2}, core::DType::kF32,
                                                                  core::Stream::cpu()));
    t.data<float>()[0] = sums[0];
    t.data<float>()[1] = sums[1];
    if (stream.is_cuda()) {
      COLOSSAL_ASSIGN_OR_RETURN(t, t.to(stream.device(), stream));
    }
    comm::CollectiveOptions co;
    if (stream.is_cuda()) co.stream = stream;
    for (comm::ProcessGroup* g : {s.tp.get(), s.pp.get()}) {
      if (g->size() == 1) continue;
      COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, g->all_reduce(t, comm::ReduceOp::kSum, co));
      COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "hybrid_parallel: gradient norm"));
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host, t.to(core::Device::cpu(), stream));
    stream.synchronize();
    nn::GradNorm global;
    global.norm = std::sqrt(host.data<float>()[0]);
    global.finite = host.data<float>()[1] == 0.0f && std::isfinite(global.norm);
    return global;
  };
  return nn::mixed_precision_step(*s.optimizer, scaler, o);
}

absl::StatusOr<nn::ParameterStore> HybridParallelPlugin::model_state_dict(
    const nn::ParameterStore& store, int to_rank, const core::Stream& stream) {
  State& s = *state_;
  s.stream = stream;
  // This stage's parameters, whole over tp (every tp rank gathers).
  COLOSSAL_ASSIGN_OR_RETURN(nn::ParameterTable stage_table, nn::whole_table(store.table()));
  std::vector<core::Tensor> mine;
  for (size_t i = 0; i < store.parameters().size(); ++i) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t, s.gather_whole(store.table().entries()[i],
                                                             store.parameters()[i].value));
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
  if (s.whole == nullptr) return absl::FailedPreconditionError("hybrid_parallel: checkpoint before boost");
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
    COLOSSAL_ASSIGN_OR_RETURN(nn::PipelineStage st,
                              nn::pipeline_stage(s.whole->num_layers(), s.pipeline.stages, stage));
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<nn::CausalLM> names,
                              s.whole->redeclare(s.whole->dtype(), nn::ModelSplit{{}, st}));
    const std::vector<std::string> tied = s.whole->tied_parameters();
    for (size_t i = 0; i < names->table().size(); ++i) {
      const std::string& name = names->table().entries()[i].name;
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
  // Each parameter this rank holds (its stage's, its tp piece) by name.
  const nn::ParameterTable& table = store.table();
  COLOSSAL_ASSIGN_OR_RETURN(nn::ParameterStore local,
                            nn::ParameterStore::create(table, core::Stream::cpu()));
  for (size_t i = 0; i < table.size(); ++i) {
    const nn::ParameterEntry& e = table.entries()[i];
    absl::StatusOr<nn::Parameter> whole = state.find(e.name);
    if (!whole.ok()) return core::annotate(whole.status(), "hybrid_parallel: the state to load");
    COLOSSAL_RETURN_IF_ERROR(
        nn::copy_piece_from_whole(e, whole->value, local.parameters()[i].value));
  }
  return state_->inner->load_model_state_dict(store, local, stream);
}

absl::StatusOr<nn::OptimizerStateDict> HybridParallelPlugin::optimizer_state_dict(
    const nn::Optimizer& optimizer, int to_rank) {
  State& s = *state_;
  COLOSSAL_ASSIGN_OR_RETURN(nn::OptimizerStateDict sd,
                            s.inner->optimizer_state_dict(optimizer, /*to_rank=*/-1));
  for (auto& [key, tensor] : sd.tensors) {
    const nn::ParameterEntry* e = s.split_entry_of(key, tensor, /*want_whole=*/false);
    if (e == nullptr || absl::EndsWith(key, ".step")) {
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
        sd, gather_stage_states(std::move(sd), s.pipeline.stage, s.pipeline.stages,
                                s.whole->tied_parameters(), /*to_all=*/to_rank < 0,
                                [&s](const core::Tensor& t, int peer, bool send) {
                                  return s.p2p(t, peer, send);
                                }));
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
    const nn::ParameterEntry* e = s.split_entry_of(key, tensor, /*want_whole=*/true);
    if (e == nullptr || absl::EndsWith(key, ".step")) continue;
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
