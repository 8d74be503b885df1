#include "parallel/zero/low_level_zero_plugin.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bazel/cuda_config.h"
#include "core/device/device.h"
#include "core/ops/elementwise.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"
#include "kernels/adam/adam.h"
#include "kernels/multi_tensor/multi_tensor.h"
#include "nn/optim/adam.h"
#include "parallel/zero/low_level_zero_checkpoint.h"
#include "parallel/zero/low_level_zero_state.h"
#include "parallel/zero/zero_grad_reduction.h"
#include "parallel/zero/zero_offload.h"

namespace colossal::parallel {

absl::StatusOr<std::unique_ptr<LowLevelZeroPlugin>> LowLevelZeroPlugin::create(
    std::shared_ptr<comm::ProcessGroup> pg, const LowLevelZeroOptions& options) {
  if (pg == nullptr) return absl::InvalidArgumentError("low_level_zero: no process group");
  if (!std::isfinite(options.reduce_bucket_size_in_m) || options.reduce_bucket_size_in_m <= 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("low_level_zero: reduce_bucket_size_in_m must be positive, got ",
                     options.reduce_bucket_size_in_m));
  }
  if (options.stage != 1 && options.stage != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("low_level_zero: stage must be 1 or 2, got ", options.stage));
  }
  if (options.communication_dtype.has_value() && *options.communication_dtype != core::DType::kF32 &&
      *options.communication_dtype != core::DType::kBF16 &&
      *options.communication_dtype != core::DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("low_level_zero: communication_dtype must be float32, bfloat16 or float16, got ",
                     core::dtype_name(*options.communication_dtype)));
  }
  auto state = std::make_unique<State>();
  state->pg = std::move(pg);
  state->options = options;
  return std::unique_ptr<LowLevelZeroPlugin>(new LowLevelZeroPlugin(std::move(state)));
}

LowLevelZeroPlugin::LowLevelZeroPlugin(std::unique_ptr<State> state) : state_(std::move(state)) {}
LowLevelZeroPlugin::~LowLevelZeroPlugin() {
  // Finish unfinished collectives before the buffers they use go away.
  if (state_ != nullptr && state_->grads != nullptr) {
    state_->wait(core::Stream::cpu()).IgnoreError();
    if (state_->cuda) state_->stream.synchronize();
  }
}

int LowLevelZeroPlugin::dp_rank() const { return state_->pg->rank(); }
int LowLevelZeroPlugin::dp_size() const { return state_->pg->size(); }
const ZeroShard& LowLevelZeroPlugin::shard() const { return state_->shard; }
const std::vector<ShardPiece>& LowLevelZeroPlugin::pieces() const { return state_->pieces; }
const std::vector<float>& LowLevelZeroPlugin::master_shard() const { return state_->master; }
const std::vector<float>& LowLevelZeroPlugin::exp_avg_shard() const {
  return state_->adam.exp_avg;
}
const std::vector<float>& LowLevelZeroPlugin::exp_avg_sq_shard() const {
  return state_->adam.exp_avg_sq;
}
int64_t LowLevelZeroPlugin::step_count() const { return state_->adam.step; }
bool LowLevelZeroPlugin::on_cuda() const { return state_->cuda; }
core::DType LowLevelZeroPlugin::param_dtype() const { return state_->dtype; }
const core::Tensor& LowLevelZeroPlugin::master_shard_tensor() const {
  return state_->offload ? state_->offload->master() : state_->d_master;
}
const core::Tensor& LowLevelZeroPlugin::exp_avg_shard_tensor() const {
  return state_->offload ? state_->offload->exp_avg() : state_->d_exp_avg;
}
const core::Tensor& LowLevelZeroPlugin::exp_avg_sq_shard_tensor() const {
  return state_->offload ? state_->offload->exp_avg_sq() : state_->d_exp_avg_sq;
}
core::Tensor LowLevelZeroPlugin::grad_shard_tensor() const {
  return state_->grads != nullptr ? state_->grads->grad_shard() : core::Tensor();
}

namespace {

// [begin, end) of the slice less the parameters `in_norm` leaves out, as
// offsets from shard.begin (the whole slice when in_norm is null).
std::vector<std::pair<int64_t, int64_t>> norm_ranges(
    const nn::ParameterTable& table, core::DType dtype, const ZeroShard& shard,
    const std::function<bool(const nn::ParameterEntry&)>& in_norm) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t at = shard.begin;
  if (in_norm) {
    for (const nn::ParameterEntry& e : table.entries()) {
      if (e.dtype != dtype || in_norm(e)) continue;
      const int64_t a = std::max(e.offset, shard.begin), b = std::min(e.offset + e.numel(), shard.end);
      if (a >= b) continue;
      if (a > at) ranges.emplace_back(at - shard.begin, a - shard.begin);
      at = b;
    }
  }
  if (shard.end > at) ranges.emplace_back(at - shard.begin, shard.end - shard.begin);
  return ranges;
}

// A new float32 host tensor holding `v`.
absl::StatusOr<core::Tensor> host_tensor(const std::vector<float>& v) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t,
                            core::Tensor::empty({static_cast<int64_t>(v.size())},
                                                core::DType::kF32, core::Stream::cpu()));
  if (!v.empty()) std::memcpy(t.data<float>(), v.data(), sizeof(float) * v.size());
  return t;
}

}  // namespace

absl::Status LowLevelZeroPlugin::materialize(nn::ParameterStore& store, uint64_t seed,
                                             const core::Stream& stream) {
  State& s = *state_;
  if (!s.partitions_grads(stream.is_cuda())) return Plugin::materialize(store, seed, stream);
  COLOSSAL_RETURN_IF_ERROR(store.allocate(stream, nn::ParameterStore::Gradients::kPlugin));
  return store.initialize(seed, stream);
}

absl::Status LowLevelZeroPlugin::boost(nn::Module& model, const nn::ParameterStore& store,
                                       nn::Optimizer& optimizer) {
  State& s = *state_;
  if (s.boosted) return absl::FailedPreconditionError("low_level_zero: boost called twice");
  const nn::ParameterTable& table = store.table();
  if (table.dtypes().empty()) return absl::InvalidArgumentError("low_level_zero: no parameters");
  if (table.dtypes().size() != 1) {
    return absl::UnimplementedError(
        "low_level_zero: the parameters must all have one dtype (one flat buffer)");
  }
  const core::DType dtype = table.dtypes().front();
  const core::Tensor values = store.flat_values(dtype);
  const bool cuda = values.device().is_cuda();
  if (!cuda && dtype != core::DType::kF32) {
    return absl::UnimplementedError(absl::StrCat(
        "low_level_zero: on the CPU only float32 models are supported, this one has ",
        core::dtype_name(dtype), " parameters (16-bit parameters need the CUDA path)"));
  }
  if (cuda && dtype != core::DType::kF32 && dtype != core::DType::kBF16 &&
      dtype != core::DType::kF16) {
    return absl::UnimplementedError(absl::StrCat(
        "low_level_zero: parameters must be float32, bfloat16 or float16, got ",
        core::dtype_name(dtype)));
  }
  if (!cuda && !values.device().is_cpu()) {
    return absl::UnimplementedError("low_level_zero: parameters must be on the CPU or on CUDA");
  }
#if !COLOSSAL_WITH_CUDA
  if (cuda) {
    return absl::UnimplementedError("low_level_zero: CUDA parameters in a build without CUDA");
  }
#endif
  const std::string& type = optimizer.type();
  if (type != "adamw" && type != "cpu_adam" && type != "hybrid_adam") {
    return absl::InvalidArgumentError(absl::StrCat(
        "low_level_zero: the optimizer must be Adam-family (adamw, cpu_adam, hybrid_adam), got ",
        type));
  }
  if (cuda && !(optimizer.stream().is_cuda() && optimizer.stream().device() == values.device())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "low_level_zero: the parameters are on ", values.device().to_string(),
        " but the optimizer's stream is not a CUDA stream of that device"));
  }
  const bool sixteen = dtype != core::DType::kF32;
  const bool partitioned = s.partitions_grads(cuda);
  if (store.grads_released() && !partitioned) {
    return absl::FailedPreconditionError(absl::StrCat(
        "low_level_zero: the model's gradients have no flat buffer, which stage ",
        s.options.stage, s.options.stage == 2 ? " on one GPU" : "",
        " reduces in place; materialize the model with this plugin (Booster::materialize)"));
  }
  // A declared optimizer (no tensors) has nothing to check against the store.
  for (int g = 0; g < optimizer.num_groups() && !optimizer.declared(); ++g) {
    for (const nn::ParamRef& p : optimizer.group_params(g)) {
      absl::StatusOr<nn::Parameter> mine = store.find(p.name);
      if (!mine.ok()) {
        return core::annotate(mine.status(), "an optimizer parameter is not in the model's store");
      }
      if (!sixteen && (p.model_copy.defined() || p.master.raw_data() != mine->value.raw_data())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "low_level_zero: the optimizer's master of ", p.name,
            " is not the store's float32 value view; build its parameters with "
            "optimizer_params"));
      }
      if (sixteen && (!p.model_copy.defined() ||
                      p.model_copy.raw_data() != mine->value.raw_data())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "low_level_zero: the optimizer's model copy of ", p.name,
            " is not the store's ", core::dtype_name(dtype),
            " value view; build its parameters with optimizer_params"));
      }
      if (p.grad.raw_data() != mine->grad.raw_data()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "low_level_zero: the optimizer's gradient of ", p.name,
            " is not the store's gradient view; build its parameters with optimizer_params"));
      }
    }
  }
  s.cuda = cuda;
  s.dtype = dtype;
  if (cuda) s.stream = optimizer.stream();
  // Rank 0's weights everywhere.
  {
    comm::CollectiveOptions o;
    if (cuda) o.stream = s.stream;
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, s.pg->broadcast(values, 0, o));
    COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "broadcasting rank 0's parameters"));
  }
  const int64_t dsize = static_cast<int64_t>(core::dtype_size(dtype));
  const int64_t cap_bytes = std::max<int64_t>(
      dsize, static_cast<int64_t>(s.options.reduce_bucket_size_in_m * 1024.0 * 1024.0 *
                                  static_cast<double>(dsize)));
  s.store = store;
  s.optimizer = &optimizer;
  s.numel = table.buffer_numel(dtype);
  s.shard = zero_shard(s.numel, s.pg->size(), s.pg->rank());
  COLOSSAL_ASSIGN_OR_RETURN(s.pieces, shard_pieces(table, optimizer, s.shard));
  const int64_t n = s.shard.end - s.shard.begin;
  s.norm_ranges = norm_ranges(table, dtype, s.shard, s.options.in_norm);
  s.local = cuda && s.pg->size() == 1;
  ZeroGradReductionOptions ro;
  ro.stage = s.options.stage;
  ro.bucket_bytes = cap_bytes;
  ro.reduce_owned_buckets = cuda;
  ro.shard_is_flat_buffer = s.local;
  ro.overlap_communication = s.options.overlap_communication;
  // One rank sends nothing: its gradients stay as the backward wrote them.
  if (s.pg->size() > 1) ro.communication_dtype = s.options.communication_dtype;
  COLOSSAL_ASSIGN_OR_RETURN(s.grads, ZeroGradReduction::create(s.pg, model, store, dtype, s.shard,
                                                               cuda ? s.stream : core::Stream::cpu(),
                                                               ro));
  // (The CPU path has no offload buffers: there cpu_offload changes nothing.)
  if (s.options.overlap_allgather && s.pg->size() > 1 && !(cuda && s.options.cpu_offload)) {
    COLOSSAL_ASSIGN_OR_RETURN(s.gather, ZeroParamGather::create(s.pg, model, store, dtype, s.shard,
                                                                cap_bytes / dsize));
  }
  // Stage 2 keeps only this rank's shard of the gradients (ZeRO-2's
  // partitioned gradients; zero_grad_reduction.h): the store's flat gradient
  // buffer goes, once nothing else can fail, with the optimizer's views of it.
  const auto release_grads = [&]() -> absl::Status {
    if (!partitioned) return absl::OkStatus();
    if (!s.store.grads_released()) COLOSSAL_RETURN_IF_ERROR(s.store.release_grads());
    optimizer.drop_grads();
    return absl::OkStatus();
  };
  if (!cuda) {
    COLOSSAL_RETURN_IF_ERROR(s.read_master());
    s.adam.exp_avg.assign(n, 0.0f);
    s.adam.exp_avg_sq.assign(n, 0.0f);
    if (s.gather == nullptr) s.gathered.assign(s.shard.padded, 0.0f);
    COLOSSAL_RETURN_IF_ERROR(release_grads());
    s.boosted = true;
    return absl::OkStatus();
  }
#if COLOSSAL_WITH_CUDA
  const core::Stream& st = s.stream;
  if (s.options.cpu_offload) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor v, values.slice(s.shard.begin, s.shard.end));
    COLOSSAL_ASSIGN_OR_RETURN(s.offload,
                              ZeroOffload::create(v, st, s.options.cpu_offload_threads));
  } else {
    COLOSSAL_ASSIGN_OR_RETURN(s.d_master, zero_filled(n, core::DType::kF32, st));
    COLOSSAL_ASSIGN_OR_RETURN(s.d_exp_avg, zero_filled(n, core::DType::kF32, st));
    COLOSSAL_ASSIGN_OR_RETURN(s.d_exp_avg_sq, zero_filled(n, core::DType::kF32, st));
  }
  COLOSSAL_ASSIGN_OR_RETURN(s.d_norm, zero_filled(3, core::DType::kF32, st));
  {
    COLOSSAL_ASSIGN_OR_RETURN(core::Event e, core::Event::create(st.device()));
    s.step_done.emplace(std::move(e));
  }
  {
    // The scratch depends only on the norm ranges' lengths.
    std::vector<kernels::multi_tensor::TensorRef> refs;
    for (const auto& [a, b] : s.norm_ranges) refs.push_back({values.raw_data(), b - a});
    s.norm_scratch_bytes = kernels::multi_tensor::l2_norm_cuda_scratch_bytes(
        refs.data(), static_cast<int64_t>(refs.size()));
    COLOSSAL_ASSIGN_OR_RETURN(
        s.d_norm_scratch,
        core::Tensor::empty({std::max<int64_t>(s.norm_scratch_bytes, 16)}, core::DType::kU8, st));
  }
  if (!s.offload) {
    s.group_pieces.assign(optimizer.num_groups(), {});
    for (const ShardPiece& p : s.pieces) s.group_pieces[p.group].push_back(p);
    int64_t total = 0;
    for (const std::vector<ShardPiece>& gp : s.group_pieces) {
      const int64_t bytes = kernels::adam::adam_cuda_scratch_bytes(static_cast<int64_t>(gp.size()));
      s.adam_scratch_at.push_back(total);
      s.adam_scratch_bytes.push_back(bytes);
      total += (bytes + 255) / 256 * 256;
    }
    COLOSSAL_ASSIGN_OR_RETURN(
        s.d_adam_scratch,
        core::Tensor::empty({std::max<int64_t>(total, 16)}, core::DType::kU8, st));
  }
  if (n > 0 && !s.offload) {
    // The master slice: the (broadcast) weights, exactly (a 16-bit value
    // widens to float32 without rounding).
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor v, values.slice(s.shard.begin, s.shard.end));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor master, s.d_master.slice(0, n));
    COLOSSAL_RETURN_IF_ERROR(core::annotate(core::ops::cast(st, master, v), "low_level_zero: the master slice"));
  }
  st.synchronize();
  // This plugin keeps the master slice: the optimizer's full-size float32
  // masters would cost 4 bytes per parameter on every rank. (Dropped last, so
  // that a failed boost leaves the optimizer whole.)
  COLOSSAL_RETURN_IF_ERROR(release_grads());
  if (s.sixteen_bit()) optimizer.drop_masters();
  s.boosted = true;
  return absl::OkStatus();
#else
  return absl::InternalError("low_level_zero: unreachable");
#endif
}

absl::Status LowLevelZeroPlugin::begin_forward(core::Context& ctx) {
  State& s = *state_;
  if (s.gather != nullptr) s.gather->begin_forward(s.cuda ? ctx.compute_stream() : core::Stream::cpu());
  return absl::OkStatus();
}

absl::Status LowLevelZeroPlugin::end_forward(bool /*ok*/) {
  State& s = *state_;
  return s.gather != nullptr ? s.gather->end_forward() : absl::OkStatus();
}

absl::Status LowLevelZeroPlugin::begin_backward(core::Context& ctx, bool sync) {
  State& s = *state_;
  if (!s.boosted) return absl::FailedPreconditionError("low_level_zero: backward before boost");
  if (!sync && s.options.stage == 2) {
    return absl::FailedPreconditionError(
        "low_level_zero: no_sync is not supported with stage 2 (as in Colossal-AI: the "
        "gradients are partitioned); for gradient accumulation run every micro-batch's "
        "backward outside no_sync: each backward reduce-scatters and the gradient shards "
        "accumulate, or use stage 1");
  }
  // The previous backward's collectives write the buffers this one adds to.
  const core::Stream compute = s.cuda ? ctx.compute_stream() : core::Stream::cpu();
  if (s.cuda && !(compute.is_cuda() && compute.device() == s.stream.device())) {
    return absl::InvalidArgumentError(
        "low_level_zero: the context's compute stream is not a CUDA stream of the model's "
        "device");
  }
  if (s.cuda && compute.handle() != s.stream.handle() && s.step_done.has_value()) {
    // The step's stream last read the stage-2 receive buffers and wrote the
    // weights: this backward's collectives (ordered after `compute`) follow it.
    core::wait_stream(compute, s.stream, *s.step_done);
  }
  return s.grads->begin_backward(compute, sync);
}

absl::Status LowLevelZeroPlugin::end_backward(bool ok) {
  if (state_->grads == nullptr) return absl::OkStatus();
  return state_->grads->end_backward(ok);
}

absl::Status LowLevelZeroPlugin::before_step(const core::Stream& stream) {
  State& s = *state_;
  if (!s.boosted) return absl::FailedPreconditionError("low_level_zero: step before boost");
  // CUDA: the step's stream (the optimizer's) waits for the reductions; the
  // Booster passes that stream.
  return core::annotate(s.wait(s.cuda ? s.stream : core::Stream::cpu()),
                        "low_level_zero: waiting for the gradient reductions");
}

absl::Status LowLevelZeroPlugin::zero_grad() {
  State& s = *state_;
  if (s.grads == nullptr) return absl::OkStatus();
  // An optimizer of tensors zeroed the flat buffer (its gradients are views
  // of it); a declared one zeroes nothing.
  if (s.optimizer->declared() && s.store.flat_grads(s.dtype).defined()) {
    COLOSSAL_RETURN_IF_ERROR(s.store.zero_grad(s.cuda ? s.stream : core::Stream::cpu()));
  }
  return s.grads->zero_grad();
}

absl::Status LowLevelZeroPlugin::sync_weights() {
  return state_->settle_weights(core::Stream::cpu());
}

int64_t LowLevelZeroPlugin::reductions_issued() const {
  return state_->grads != nullptr ? state_->grads->issued() : 0;
}
int64_t LowLevelZeroPlugin::reductions_most_in_flight() const {
  return state_->grads != nullptr ? state_->grads->most_in_flight() : 0;
}
int64_t LowLevelZeroPlugin::reductions_issued_in_hooks() const {
  return state_->grads != nullptr ? state_->grads->issued_in_hooks() : 0;
}
int64_t LowLevelZeroPlugin::gathers_issued() const {
  return state_->gather != nullptr ? state_->gather->issued() : 0;
}

absl::StatusOr<nn::ParameterStore> LowLevelZeroPlugin::model_state_dict(
    const nn::ParameterStore& store, int to_rank, const core::Stream& stream) {
  COLOSSAL_RETURN_IF_ERROR(state_->settle_weights(core::Stream::cpu()));
  return Plugin::model_state_dict(store, to_rank, stream);
}

absl::Status LowLevelZeroPlugin::load_model_state_dict(nn::ParameterStore& store,
                                                       const nn::ParameterStore& state,
                                                       const core::Stream& stream) {
  COLOSSAL_RETURN_IF_ERROR(state_->settle_weights(core::Stream::cpu()));
  return Plugin::load_model_state_dict(store, state, stream);
}


absl::Status LowLevelZeroPlugin::stream_model_state(const nn::ParameterStore& store, int to_rank,
                                                    const nn::StatePieceFn& piece) {
  State& s = *state_;
  COLOSSAL_RETURN_IF_ERROR(s.settle_weights(core::Stream::cpu()));
  if (to_rank >= 0 && to_rank != s.pg->rank()) return absl::OkStatus();  // every rank holds the model
  // One parameter at a time on the host, not the whole model.
  for (size_t i = 0; i < store.parameters().size(); ++i) {
    const core::Tensor& value = store.parameters()[i].value;
    core::Tensor host = value;
    if (value.device().is_cuda()) {
      COLOSSAL_ASSIGN_OR_RETURN(host, value.to(core::Device::cpu(), s.stream));
      s.stream.synchronize();
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor flat, host.reshape({host.numel()}));
    piece(i, 0, flat);
  }
  return absl::OkStatus();
}

absl::StatusOr<nn::StreamedOptimizerState> LowLevelZeroPlugin::stream_optimizer_state(
    const nn::Optimizer& optimizer, int to_rank) {
  const State& s = *state_;
  COLOSSAL_RETURN_IF_ERROR(s.check_optimizer(optimizer, "optimizer_state_dict"));
  const bool whole = to_rank < 0 || to_rank == s.pg->rank();  // else the meta alone
  ZeroAdamTensors slice;
  if (!s.cuda) {
    COLOSSAL_ASSIGN_OR_RETURN(slice.exp_avg, host_tensor(s.adam.exp_avg));
    COLOSSAL_ASSIGN_OR_RETURN(slice.exp_avg_sq, host_tensor(s.adam.exp_avg_sq));
  } else if (s.offload) {
    // The gather runs on the device: the host slices go up for it.
    const core::Device device = s.stream.device();
    COLOSSAL_ASSIGN_OR_RETURN(slice.exp_avg, s.offload->exp_avg().to(device, s.stream));
    COLOSSAL_ASSIGN_OR_RETURN(slice.exp_avg_sq, s.offload->exp_avg_sq().to(device, s.stream));
    if (s.sixteen_bit()) {
      COLOSSAL_ASSIGN_OR_RETURN(slice.master, s.offload->master().to(device, s.stream));
    }
  } else {
    slice.exp_avg = s.d_exp_avg;
    slice.exp_avg_sq = s.d_exp_avg_sq;
    if (s.sixteen_bit()) slice.master = s.d_master;
  }
  slice.step = s.adam.step;
  return stream_zero_adam_state(*s.pg, s.store.table(), optimizer, s.shard, slice,
                                s.cuda ? s.stream : core::Stream::cpu(), whole);
}

absl::StatusOr<nn::OptimizerStateDict> LowLevelZeroPlugin::optimizer_state_dict(
    const nn::Optimizer& optimizer, int to_rank) {
  COLOSSAL_ASSIGN_OR_RETURN(nn::StreamedOptimizerState streamed, stream_optimizer_state(optimizer, to_rank));
  return nn::collect_streamed(std::move(streamed), to_rank < 0 || to_rank == state_->pg->rank());
}

absl::Status LowLevelZeroPlugin::load_optimizer_state_dict(nn::Optimizer& optimizer,
                                                           const nn::OptimizerStateDict& state) {
  State& s = *state_;
  COLOSSAL_RETURN_IF_ERROR(s.check_optimizer(optimizer, "load_optimizer_state_dict"));
  COLOSSAL_RETURN_IF_ERROR(s.settle_weights(core::Stream::cpu()));  // it may write the weights
  if (!s.cuda) {
    COLOSSAL_ASSIGN_OR_RETURN(s.adam,
                              load_zero_adam_state(state, s.store, optimizer, s.shard));
    optimizer.release_state();  // only the slices stay (see the CUDA path below)
    return s.read_master();  // a .master in the dict was written into the weights
  }
  // Straight into the slices, without a host copy of them first: on the
  // GPU on the step's stream (ordered after the previous step's work); the
  // offloaded pinned shards once the last step's work no longer reads them.
  ZeroAdamTargets targets;
  if (s.offload) {
    s.stream.synchronize();
    targets = {s.offload->exp_avg(), s.offload->exp_avg_sq(),
               s.sixteen_bit() ? s.offload->master() : core::Tensor()};
  } else {
    targets = {s.d_exp_avg, s.d_exp_avg_sq, s.sixteen_bit() ? s.d_master : core::Tensor()};
  }
  COLOSSAL_ASSIGN_OR_RETURN(
      ZeroAdamSlice loaded,
      load_zero_adam_state(state, s.store, optimizer, s.shard, s.sixteen_bit(), &targets));
  // (The optimizer's own state was never allocated for the load; release
  // any a caller made it allocate before, e.g. through state_dict().)
  s.stream.synchronize();
  optimizer.release_state();
  s.adam.step = loaded.step;
  return s.read_master();  // float32: the weights (a .master was written into them)
}

}  // namespace colossal::parallel
