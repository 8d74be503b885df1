#include "parallel/zero/low_level_zero_plugin.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"
#include "kernels/adam/adam.h"
#include "parallel/common/grad_buckets.h"
#include "parallel/zero/low_level_zero_checkpoint.h"

namespace colossal::parallel {

ZeroShard zero_shard(int64_t numel, int world, int rank) {
  ZeroShard s;
  s.padded = (numel + world - 1) / world * world;
  s.size = s.padded / world;
  s.begin = std::min<int64_t>(static_cast<int64_t>(rank) * s.size, numel);
  s.end = std::min<int64_t>(static_cast<int64_t>(rank) * s.size + s.size, numel);
  return s;
}

absl::StatusOr<std::vector<ShardPiece>> shard_pieces(const nn::ParameterTable& table,
                                                     const nn::Optimizer& optimizer,
                                                     const ZeroShard& shard) {
  std::vector<ShardPiece> out;
  for (int g = 0; g < optimizer.num_groups(); ++g) {
    for (const nn::ParamRef& p : optimizer.group_params(g)) {
      const nn::ParameterEntry* e = table.find(p.name);
      if (e == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "low_level_zero: optimizer parameter \"", p.name, "\" is not in the model's table"));
      }
      const int64_t lo = std::max(e->offset, shard.begin);
      const int64_t hi = std::min(e->offset + e->numel(), shard.end);
      if (lo < hi) out.push_back(ShardPiece{lo, hi - lo, g});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ShardPiece& a, const ShardPiece& b) { return a.offset < b.offset; });
  return out;
}

struct LowLevelZeroPlugin::State {
  std::shared_ptr<comm::ProcessGroup> pg;
  LowLevelZeroOptions options;
  std::shared_ptr<BucketedGradReducer> reducer;  // after boost
  bool boosted = false;
  nn::ParameterStore store;
  nn::Optimizer* optimizer = nullptr;
  int64_t numel = 0;
  ZeroShard shard;
  std::vector<ShardPiece> pieces;
  std::vector<float> master;    // this rank's slice
  ZeroAdamSlice adam;           // its moments and the step count
  std::vector<float> gathered;  // shard.padded elements
  // Stage 2: this rank's averaged gradient slice (shard.size elements,
  // accumulated over backwards), and per bucket the reduce-scatter buffers.
  std::vector<float> grad_shard;
  struct Scatter {
    int64_t chunk = 0;              // elements per rank in the collective
    std::vector<float> send, recv;  // world * chunk, chunk
    int64_t mine_lo = 0, mine_n = 0;  // this rank's part of the bucket
  };
  std::vector<Scatter> scatters;  // per bucket
  std::vector<size_t> pending;    // buckets launched, not yet added to grad_shard

  // Rank j's part [lo, lo + n) of flat range [a, e).
  void part(int64_t a, int64_t e, int j, int64_t* lo, int64_t* n) const {
    const ZeroShard sj = zero_shard(numel, pg->size(), j);
    *lo = std::max(a, sj.begin);
    *n = std::max<int64_t>(0, std::min(e, sj.end) - *lo);
  }

  // Stage 1: all-reduce (average) bucket b in place. Stage 2: reduce-scatter
  // (average) it so this rank receives its part, and zero the bucket's range
  // of the flat gradient buffer (the next backward accumulates afresh).
  absl::StatusOr<comm::WorkPtr> launch(size_t b, const comm::CollectiveOptions& o) {
    const std::vector<GradBucket>& buckets = reducer->buckets();
    const GradBucket& bucket = buckets[b];
    float* g = store.flat_grads(core::DType::kF32).data<float>();
    absl::StatusOr<comm::WorkPtr> w;
    if (options.stage == 1) {
      w = pg->all_reduce(comm::Buffer::cpu(g + bucket.offset, bucket.count), comm::ReduceOp::kAvg,
                         o);
    } else {
      Scatter& sc = scatters[b];
      std::fill(sc.send.begin(), sc.send.end(), 0.0f);
      for (int j = 0; j < pg->size(); ++j) {
        int64_t lo = 0, n = 0;
        part(bucket.offset, bucket.offset + bucket.count, j, &lo, &n);
        std::copy(g + lo, g + lo + n, sc.send.data() + j * sc.chunk);
      }
      std::fill(g + bucket.offset, g + bucket.offset + bucket.count, 0.0f);
      w = pg->reduce_scatter(comm::Buffer::cpu(sc.recv.data(), sc.chunk),
                             comm::Buffer::cpu(sc.send.data(), sc.send.size()),
                             comm::ReduceOp::kAvg, o);
      if (w.ok()) pending.push_back(b);
    }
    if (!w.ok()) {
      return core::annotate(w.status(),
                            absl::StrCat(options.stage == 1 ? "all-reducing" : "reduce-scattering",
                                         " gradient bucket ", b, " of ", buckets.size(), " (",
                                         bucket.params.front(), " ...)"));
    }
    return w;
  }

  // Checkpoint calls: boosted, with the boosted optimizer.
  absl::Status check_optimizer(const nn::Optimizer& o, const char* what) const {
    if (!boosted) {
      return absl::FailedPreconditionError(absl::StrCat("low_level_zero: ", what, " before boost"));
    }
    if (&o != optimizer) {
      return absl::InvalidArgumentError(
          absl::StrCat("low_level_zero: ", what, ": not the boosted optimizer"));
    }
    return absl::OkStatus();
  }

  // The fp32 weights are the masters: this slice of them.
  void read_master() {
    const float* v = store.flat_values(core::DType::kF32).data<float>();
    master.assign(v + shard.begin, v + shard.end);
  }

  // Waits for the collectives; stage 2 then adds the received parts to grad_shard.
  absl::Status wait() {
    absl::Status s = reducer->wait_all(core::Stream::cpu());
    for (size_t b : pending) {
      const Scatter& sc = scatters[b];
      float* dst = grad_shard.data() + (sc.mine_lo - shard.begin);
      for (int64_t i = 0; i < sc.mine_n; ++i) dst[i] += sc.recv[i];
    }
    pending.clear();
    return s;
  }
};

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
  auto state = std::make_unique<State>();
  state->pg = std::move(pg);
  state->options = options;
  return std::unique_ptr<LowLevelZeroPlugin>(new LowLevelZeroPlugin(std::move(state)));
}

LowLevelZeroPlugin::LowLevelZeroPlugin(std::unique_ptr<State> state) : state_(std::move(state)) {}
LowLevelZeroPlugin::~LowLevelZeroPlugin() {
  // Finish unfinished collectives before the buffers they use go away.
  if (state_ != nullptr && state_->reducer != nullptr) state_->wait().IgnoreError();
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

absl::Status LowLevelZeroPlugin::boost(nn::Module& model, const nn::ParameterStore& store,
                                       nn::Optimizer& optimizer) {
  State& s = *state_;
  if (s.boosted) return absl::FailedPreconditionError("low_level_zero: boost called twice");
  const nn::ParameterTable& table = store.table();
  for (core::DType dtype : table.dtypes()) {
    if (dtype != core::DType::kF32) {
      return absl::UnimplementedError(absl::StrCat(
          "low_level_zero: only float32 models are supported, this one has ",
          core::dtype_name(dtype), " parameters"));
    }
  }
  if (table.dtypes().empty()) return absl::InvalidArgumentError("low_level_zero: no parameters");
  const core::Tensor values = store.flat_values(core::DType::kF32);
  if (!values.device().is_cpu()) {
    return absl::UnimplementedError("low_level_zero: only CPU parameters are supported");
  }
  const std::string& type = optimizer.type();
  if (type != "adamw" && type != "cpu_adam" && type != "hybrid_adam") {
    return absl::InvalidArgumentError(absl::StrCat(
        "low_level_zero: the optimizer must be Adam-family (adamw, cpu_adam, hybrid_adam), got ",
        type));
  }
  for (int g = 0; g < optimizer.num_groups(); ++g) {
    for (const nn::ParamRef& p : optimizer.group_params(g)) {
      absl::StatusOr<nn::Parameter> mine = store.find(p.name);
      if (!mine.ok()) {
        return core::annotate(mine.status(), "an optimizer parameter is not in the model's store");
      }
      if (p.model_copy.defined() || p.master.raw_data() != mine->value.raw_data()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "low_level_zero: the optimizer's master of ", p.name,
            " is not the store's float32 value view; build its parameters with "
            "optimizer_params"));
      }
      if (p.grad.raw_data() != mine->grad.raw_data()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "low_level_zero: the optimizer's gradient of ", p.name,
            " is not the store's gradient view; build its parameters with optimizer_params"));
      }
    }
  }
  // Rank 0's weights everywhere.
  {
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, s.pg->broadcast(values, 0));
    COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "broadcasting rank 0's parameters"));
  }
  const int64_t cap_bytes = std::max<int64_t>(
      4, static_cast<int64_t>(s.options.reduce_bucket_size_in_m * 1024.0 * 1024.0 * 4.0));
  State* raw = &s;  // the reducer is owned by the state: it never outlives it
  COLOSSAL_ASSIGN_OR_RETURN(
      s.reducer,
      BucketedGradReducer::create(
          "low_level_zero", model, store, make_grad_buckets(table, cap_bytes),
          [raw](size_t b, const comm::CollectiveOptions& o) { return raw->launch(b, o); }));

  s.store = store;
  s.optimizer = &optimizer;
  s.numel = table.buffer_numel(core::DType::kF32);
  s.shard = zero_shard(s.numel, s.pg->size(), s.pg->rank());
  COLOSSAL_ASSIGN_OR_RETURN(s.pieces, shard_pieces(table, optimizer, s.shard));
  const int64_t n = s.shard.end - s.shard.begin;
  s.read_master();
  s.adam.exp_avg.assign(n, 0.0f);
  s.adam.exp_avg_sq.assign(n, 0.0f);
  s.gathered.assign(s.shard.padded, 0.0f);
  if (s.options.stage == 2) {
    s.grad_shard.assign(s.shard.size, 0.0f);
    for (const GradBucket& bucket : s.reducer->buckets()) {
      State::Scatter sc;
      for (int j = 0; j < s.pg->size(); ++j) {
        int64_t lo = 0, cnt = 0;
        s.part(bucket.offset, bucket.offset + bucket.count, j, &lo, &cnt);
        sc.chunk = std::max(sc.chunk, cnt);
        if (j == s.pg->rank()) {
          sc.mine_lo = lo;
          sc.mine_n = cnt;
        }
      }
      sc.send.assign(sc.chunk * s.pg->size(), 0.0f);
      sc.recv.assign(sc.chunk, 0.0f);
      s.scatters.push_back(std::move(sc));
    }
  }
  s.boosted = true;
  return absl::OkStatus();
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
  COLOSSAL_RETURN_IF_ERROR(s.wait());
  return s.reducer->begin_backward(ctx.compute_stream(), sync);
}

absl::Status LowLevelZeroPlugin::end_backward(bool ok) {
  if (state_->reducer == nullptr) return absl::OkStatus();
  if (!ok) {
    const absl::Status s = state_->reducer->end_backward(ok);
    state_->wait().IgnoreError();
    return s;
  }
  return state_->reducer->end_backward(ok);
}

absl::Status LowLevelZeroPlugin::before_step(const core::Stream& stream) {
  if (!state_->boosted) return absl::FailedPreconditionError("low_level_zero: step before boost");
  return core::annotate(state_->wait(), "low_level_zero: waiting for the gradient reductions");
}

absl::Status LowLevelZeroPlugin::zero_grad() {
  std::fill(state_->grad_shard.begin(), state_->grad_shard.end(), 0.0f);
  return absl::OkStatus();
}

int64_t LowLevelZeroPlugin::reductions_issued() const {
  return state_->reducer != nullptr ? state_->reducer->issued() : 0;
}
int64_t LowLevelZeroPlugin::reductions_issued_in_hooks() const {
  return state_->reducer != nullptr ? state_->reducer->issued_in_hooks() : 0;
}
const std::vector<float>& LowLevelZeroPlugin::grad_shard() const { return state_->grad_shard; }

absl::StatusOr<nn::MixedPrecisionStepResult> LowLevelZeroPlugin::step(
    nn::DynamicLossScaler* scaler, float max_norm) {
  State& s = *state_;
  if (!s.boosted) return absl::FailedPreconditionError("low_level_zero: step before boost");
  if (scaler != nullptr) {
    return absl::UnimplementedError(
        "low_level_zero: loss scaling is for 16-bit weights, which this plugin does not "
        "support; train in float32 without a scaler");
  }
  if (!std::isfinite(max_norm) || max_norm < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("low_level_zero: max_norm must be >= 0 (0: no clipping), got ", max_norm));
  }
  const core::Tensor grads = s.store.flat_grads(core::DType::kF32);
  const core::Tensor values = s.store.flat_values(core::DType::kF32);
  // g[i - shard.begin]: the averaged gradient of flat element i of this rank's slice.
  const float* g = s.options.stage == 1 ? grads.data<float>() + s.shard.begin
                                        : s.grad_shard.data();

  // Global norm: this slice's sum of squares, summed over the ranks.
  double local = 0.0;
  for (int64_t i = 0; i < s.shard.end - s.shard.begin; ++i) local += double(g[i]) * g[i];
  float total = static_cast<float>(local);
  {
    COLOSSAL_ASSIGN_OR_RETURN(
        comm::WorkPtr w, s.pg->all_reduce(comm::Buffer::cpu(&total, 1), comm::ReduceOp::kSum));
    COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "low_level_zero: gradient norm"));
  }
  nn::MixedPrecisionStepResult r;
  r.loss_scale = 1.0f;
  r.grad_norm = std::sqrt(total);
  if (!std::isfinite(r.grad_norm)) {
    r.skipped = true;
    return r;
  }
  if (max_norm > 0.0f) {  // as nn::clip_grad_by_norm: in double, eps 1e-6
    const double coef = static_cast<double>(max_norm) / (static_cast<double>(r.grad_norm) + 1e-6);
    r.clip_coef = coef < 1.0 ? static_cast<float>(coef) : 1.0f;
  }

  // Adam on this rank's slice, piece by piece with the piece's group. The
  // master slice equals the weights after every step's all_gather (so this
  // is a no-op then), but weights loaded into the model after boost (a
  // checkpoint) must not be overwritten by a stale master.
  s.read_master();
  ++s.adam.step;
  for (const ShardPiece& p : s.pieces) {
    const nn::GroupHyperParams& h = s.optimizer->group_hyper(p.group);
    kernels::adam::AdamOptions o;
    o.step = s.adam.step;
    o.lr = static_cast<float>(h.lr);
    o.beta1 = static_cast<float>(h.beta1);
    o.beta2 = static_cast<float>(h.beta2);
    o.eps = static_cast<float>(h.eps);
    o.weight_decay = static_cast<float>(h.weight_decay);
    o.adamw_mode = h.adamw_mode;
    o.bias_correction = h.bias_correction;
    o.grad_scale = r.clip_coef < 1.0f ? 1.0f / r.clip_coef : 1.0f;
    const int64_t at = p.offset - s.shard.begin;
    const kernels::KernelStatus ks = kernels::adam::adam_step_cpu(
        s.master.data() + at, s.adam.exp_avg.data() + at, s.adam.exp_avg_sq.data() + at,
        /*model_copy=*/nullptr, g + at, /*found_inf=*/nullptr, p.count,
        kernels::DType::kF32, kernels::DType::kF32, o);
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        ks, absl::StrCat("low_level_zero: Adam step of group ", p.group)));
  }

  // Every rank's slice into the flat parameter buffer.
  const int64_t size = s.shard.size;
  float* mine = s.gathered.data() + static_cast<int64_t>(s.pg->rank()) * size;
  std::fill(mine, mine + size, 0.0f);
  std::copy(s.master.begin(), s.master.end(), mine);
  {
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w,
                              s.pg->all_gather(comm::Buffer::cpu(s.gathered.data(), s.shard.padded),
                                               comm::Buffer::cpu(mine, size)));
    COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "low_level_zero: gathering parameters"));
  }
  std::memcpy(values.data<float>(), s.gathered.data(), sizeof(float) * s.numel);
  return r;
}

absl::StatusOr<nn::OptimizerStateDict> LowLevelZeroPlugin::optimizer_state_dict(
    const nn::Optimizer& optimizer) {
  const State& s = *state_;
  COLOSSAL_RETURN_IF_ERROR(s.check_optimizer(optimizer, "optimizer_state_dict"));
  return gather_zero_adam_state(*s.pg, s.store.table(), optimizer, s.shard, s.adam);
}

absl::Status LowLevelZeroPlugin::load_optimizer_state_dict(nn::Optimizer& optimizer,
                                                           const nn::OptimizerStateDict& state) {
  State& s = *state_;
  COLOSSAL_RETURN_IF_ERROR(s.check_optimizer(optimizer, "load_optimizer_state_dict"));
  COLOSSAL_ASSIGN_OR_RETURN(s.adam,
                            load_zero_adam_state(state, s.store.table(), optimizer, s.shard));
  s.read_master();  // a .master in the dict was written into the weights
  return absl::OkStatus();
}

}  // namespace colossal::parallel
