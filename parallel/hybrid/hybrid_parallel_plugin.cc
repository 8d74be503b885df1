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
#include "parallel/hybrid/hybrid_state.h"
#include "parallel/zero/low_level_zero_plugin.h"

namespace colossal::parallel {

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
  if (options.num_model_chunks < 1 || (options.num_model_chunks > 1 && options.pp_size < 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hybrid_parallel: num_model_chunks ", options.num_model_chunks,
        " must be 1, or more with pp_size > 1 (the interleaved schedule); pp_size is ",
        options.pp_size));
  }
  if (options.sequence_parallel && (options.tp_size < 2 || options.zero_stage > 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hybrid_parallel: sequence parallelism (split_gather) needs tp_size > 1 and zero_stage 0 "
        "or 1; got tp_size ",
        options.tp_size, ", zero_stage ", options.zero_stage));
  }
  if (options.sp_size < 1 || (options.sp_size > 1 && options.sequence_parallel)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hybrid_parallel: sp_size ", options.sp_size,
        " must be at least 1, and all_to_all sequence parallelism (sp_size > 1) is not combined "
        "with split_gather"));
  }
  if (world->size() % (options.tp_size * options.pp_size * options.sp_size) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hybrid_parallel: the world's ", world->size(), " ranks do not divide into tp_size ",
        options.tp_size, " x pp_size ", options.pp_size, " x sp_size ", options.sp_size));
  }
  if (options.zero_stage < 0 || options.zero_stage > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("hybrid_parallel: zero_stage ", options.zero_stage, " must be 0, 1 or 2"));
  }
  auto s = std::make_unique<State>();
  s->options = options;
  s->world = world;
  const int dp = world->size() / (options.tp_size * options.pp_size * options.sp_size);
  COLOSSAL_ASSIGN_OR_RETURN(
      comm::DeviceMesh mesh,
      comm::DeviceMesh::create(world->size(), world->rank(),
                               {dp, options.pp_size, options.sp_size, options.tp_size},
                               {"dp", "pp", "sp", "tp"}));
  COLOSSAL_RETURN_IF_ERROR(core::annotate(mesh.create_groups(*world), "hybrid_parallel: mesh"));
  COLOSSAL_ASSIGN_OR_RETURN(s->tp, mesh.group("tp"));
  COLOSSAL_ASSIGN_OR_RETURN(s->dp, mesh.group("dp"));
  COLOSSAL_ASSIGN_OR_RETURN(s->pp, mesh.group("pp"));
  std::shared_ptr<comm::ProcessGroup> reduce_over = s->dp;
  if (options.sp_size > 1) {
    COLOSSAL_ASSIGN_OR_RETURN(s->sp, mesh.group("sp"));
    // Every rank of one pipeline stage and tp index: the copies and the
    // sequence pieces, whose gradients are all partial.
    std::vector<int> members;
    for (int d = 0; d < dp; ++d) {
      for (int q = 0; q < options.sp_size; ++q) {
        members.push_back(
            mesh.rank_of({d, mesh.coordinate(1), q, mesh.coordinate(3)}));
      }
    }
    COLOSSAL_ASSIGN_OR_RETURN(s->dp_sp, world->new_group(members));
    reduce_over = s->dp_sp;
  }
  if (options.pp_size > 1) {
    s->pipeline.group = s->pp;
    COLOSSAL_ASSIGN_OR_RETURN(s->pipeline.p2p, world->new_group(s->pp->world_ranks()));
    s->pipeline.stage = s->pp->rank();
    s->pipeline.stages = s->pp->size();
    s->pipeline.chunks = options.num_model_chunks;
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
    o.overlap_communication = options.overlap_communication;
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<DdpPlugin> ddp, DdpPlugin::create(reduce_over, o));
    s->inner = std::move(ddp);
  } else {
    LowLevelZeroOptions o;
    o.stage = options.zero_stage;
    o.reduce_bucket_size_in_m = options.zero_bucket_size_in_m;
    o.cpu_offload = options.cpu_offload;
    o.cpu_offload_threads = options.cpu_offload_threads;
    o.overlap_communication = options.overlap_communication;
    o.norm_group = world;
    State* raw = s.get();  // the inner plugin is the state's: it never outlives it
    o.in_norm = [raw](const nn::ParameterEntry& e) { return raw->counts_in_norm(e); };
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<LowLevelZeroPlugin> zero,
                              LowLevelZeroPlugin::create(reduce_over, o));
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
  if (s.sp != nullptr) split.tp.sequence_group = s.sp;
  if (s.pipeline.stages > 1) {
    COLOSSAL_ASSIGN_OR_RETURN(
        split.stage, nn::pipeline_stage(model.num_layers(), s.pipeline.stages, s.pipeline.stage,
                                        s.pipeline.chunks, s.options.layers_per_stage));
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
        return absl::FailedPreconditionError(
            absl::StrCat("hybrid_parallel: parameter ", e.name, " is piece ", e.split.index, " of ",
                         e.split.parts, "; this rank is tensor-parallel rank ", s.tp->rank(),
                         " of ", s.tp->size()));
      }
    }
    if (!split) {
      return absl::FailedPreconditionError(
          absl::StrCat("hybrid_parallel: the model is not split over the ", s.tp->size(),
                       " tensor-parallel ranks; declare it as plugin.model_split() says "
                       "(nn::CausalLM::redeclare) before materializing it"));
    }
  }
  s.stream = stream;
  s.store = store;
  // As the data-parallel plugin lays it out (ZeRO-2: no flat gradient buffer).
  return s.inner->materialize(store, seed, stream);
}

absl::Status HybridParallelPlugin::boost(nn::Module& model, const nn::ParameterStore& store,
                                         nn::Optimizer& optimizer) {
  State& s = *state_;
  s.store = store;
  s.optimizer = &optimizer;
  s.stream = optimizer.stream();
  s.tied_names.clear();
  const auto* causal = dynamic_cast<const nn::CausalLM*>(&model);
  if (s.sp != nullptr) {
    // Ulysses splits no weights, so the store cannot show a model declared
    // without it: ask the model (a whole model here would compute every
    // position on every rank, correctly but at sp_size times the cost).
    if (causal == nullptr || causal->tensor_parallel().sequence_group != s.sp) {
      return absl::FailedPreconditionError(
          "hybrid_parallel: all_to_all sequence parallelism needs the model declared as "
          "model_split() says (its sequence group); redeclare it with that split before boost");
    }
  }
  if (s.pipeline.stages > 1) {
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
        return absl::InvalidArgumentError(absl::StrCat(
            "hybrid_parallel: the optimizer's parameter ", p.name, " is not in the model"));
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
  // Sums a gradient over `group`, ordered before `stream`'s next work.
  const auto sum = [&](comm::ProcessGroup& group, const nn::Parameter& p) -> absl::Status {
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, group.all_reduce(p.grad, comm::ReduceOp::kSum, o));
    return core::annotate(w->wait_on(stream), absl::StrCat("summing ", p.name));
  };
  if (s.options.sequence_parallel) {
    // Every tp rank saw its own positions: the whole-parameter gradients are
    // partial sums over the group.
    for (size_t i = 0; i < s.store.parameters().size(); ++i) {
      if (s.store.table().entries()[i].split.active()) continue;
      COLOSSAL_RETURN_IF_ERROR(sum(*s.tp, s.store.parameters()[i]));
    }
  }
  if (s.tied == nullptr) return absl::OkStatus();
  // The tied weight's two copies take the sum of both stages' gradients.
  for (const std::string& name : s.tied_names) {
    COLOSSAL_ASSIGN_OR_RETURN(nn::Parameter p, s.store.find(name));
    COLOSSAL_RETURN_IF_ERROR(sum(*s.tied, p));
  }
  return absl::OkStatus();
}
absl::Status HybridParallelPlugin::zero_grad() { return state_->inner->zero_grad(); }
bool HybridParallelPlugin::steps_declared_optimizer() const {
  return state_->inner->steps_declared_optimizer();
}
absl::Status HybridParallelPlugin::sync_weights() { return state_->inner->sync_weights(); }

absl::StatusOr<nn::MixedPrecisionStepResult> HybridParallelPlugin::step(
    nn::DynamicLossScaler* scaler, float max_norm) {
  State& s = *state_;
  if (s.optimizer == nullptr)
    return absl::FailedPreconditionError("hybrid_parallel: step before boost");
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
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t,
                              core::Tensor::empty({2}, core::DType::kF32, core::Stream::cpu()));
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

}  // namespace colossal::parallel
