#include "parallel/zero/low_level_zero_plugin.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bazel/cuda_config.h"
#include "core/device/device.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"
#include "kernels/adam/adam.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/multi_tensor/multi_tensor.h"
#include "nn/optim/adam.h"
#include "parallel/common/grad_buckets.h"
#include "parallel/zero/low_level_zero_checkpoint.h"
#include "parallel/zero/zero_offload.h"

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
    // CUDA: the one rank whose slice holds the whole bucket, else -1. Such a
    // bucket is all-reduced in place instead (no send / receive buffers, and
    // 2(W-1)/W of its size on the wire instead of the (W-1) sizes of a
    // reduce-scatter padded for the W-1 ranks with no part in it).
    int owner = -1;
  };
  std::vector<Scatter> scatters;  // per bucket
  std::vector<size_t> pending;    // buckets launched, not yet added to grad_shard

  // The CUDA path (cuda true): parameters of `dtype` (float32, bfloat16 or
  // float16) on `stream`'s device; every shard is a device tensor and the
  // host vectors above stay empty.
  bool cuda = false;
  // CUDA at world size 1: the slice is the whole buffer, so the step writes
  // the model's weights directly (no gather buffer, no all_gather, no copy
  // back) and stage 2's gradient shard is the model's gradient buffer itself
  // (no per-bucket accumulation pass): ZeRO on one GPU costs what ddp does.
  bool local = false;
  core::DType dtype = core::DType::kF32;
  core::Stream stream;             // the optimizer's (CUDA) stream: the step's work
  core::Tensor d_master;           // float32 [n]: this rank's master slice
  core::Tensor d_exp_avg, d_exp_avg_sq;  // float32 [n]
  core::Tensor d_grad_shard;       // dtype [shard.size]: stage 2's reduced gradients
  core::Tensor d_norm;             // float32 [3]: sum of squares, found_inf, local norm
  core::Tensor d_norm_scratch;     // l2_norm_cuda's scratch
  int64_t norm_scratch_bytes = 0;
  // The slice's pieces by optimizer group, and per group a region of
  // d_adam_scratch: one multi-tensor Adam launch per group instead of one
  // per piece (a 1.5B GPT-2 has ~580 pieces, whose launches the GPU would
  // otherwise wait for after the step's host sync).
  std::vector<std::vector<ShardPiece>> group_pieces;
  std::vector<int64_t> adam_scratch_at, adam_scratch_bytes;
  core::Tensor d_adam_scratch;
  // Stage 2's per-bucket buffers, allocated from the device pool on the
  // backward's compute stream when the bucket launches (none exist during
  // the forward, the activations' peak) and freed once the received part is
  // added to the gradient shard.
  struct DeviceScatter {
    core::Tensor send, recv;  // dtype: world * chunk, chunk
  };
  std::vector<DeviceScatter> d_scatters;  // parallel to `pending`
  core::Stream scatter_stream;            // the stream they were allocated on
  // Orders a backward's compute stream after the step's stream when they differ.
  std::optional<core::Event> step_done;
  // cpu_offload on CUDA: the master slice and moments on the host (d_master,
  // d_exp_avg and d_exp_avg_sq stay undefined).
  std::unique_ptr<ZeroOffload> offload;

  bool sixteen_bit() const { return dtype != core::DType::kF32; }
  int64_t esize() const { return static_cast<int64_t>(core::dtype_size(dtype)); }

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
    absl::StatusOr<comm::WorkPtr> w = cuda ? launch_cuda(b, o) : launch_cpu(b, o);
    if (w.ok()) return w;
    const std::vector<GradBucket>& buckets = reducer->buckets();
    return core::annotate(w.status(),
                          absl::StrCat(options.stage == 1 ? "all-reducing" : "reduce-scattering",
                                       " gradient bucket ", b, " of ", buckets.size(), " (",
                                       buckets[b].params.front(), " ...)"));
  }

  absl::StatusOr<comm::WorkPtr> launch_cpu(size_t b, const comm::CollectiveOptions& o) {
    const GradBucket& bucket = reducer->buckets()[b];
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
    return w;
  }

  // The CUDA path of launch: the bucket's range of the flat gradient buffer
  // (the gradient dtype: 16-bit gradients are reduced in 16 bits) on the
  // device. Stage 2 packs the ranks' parts into the bucket's send buffer and
  // zeroes the range with work enqueued on the input stream (the compute
  // stream, after the backward that wrote the gradients); the collective runs
  // after it (CollectiveOptions::stream: an event, no host wait).
  absl::StatusOr<comm::WorkPtr> launch_cuda(size_t b, const comm::CollectiveOptions& o) {
    const std::vector<GradBucket>& buckets = reducer->buckets();
    const GradBucket& bucket = buckets[b];
    const core::Tensor flat = store.flat_grads(dtype);
    comm::CollectiveOptions co = o;
    if (!co.stream.has_value() || !co.stream->is_cuda()) co.stream = stream;
    const core::Stream& in = *co.stream;
    absl::StatusOr<comm::WorkPtr> w;
    absl::Status prep;
    if (options.stage == 1 || scatters[b].owner >= 0) {
      // All-reduced in place. Stage 2: the owner adds the range to its shard
      // and every rank zeroes it when the collective is waited for (wait_cuda).
      comm::Buffer buffer;
      buffer.data = static_cast<char*>(flat.raw_data()) + bucket.offset * esize();
      buffer.count = bucket.count;
      buffer.dtype = dtype;
      buffer.device = flat.device();
      w = pg->all_reduce(buffer, comm::ReduceOp::kAvg, co);
      if (w.ok() && options.stage == 2 && !local) {  // local: the buffer is the shard
        pending.push_back(b);
        d_scatters.emplace_back();
      }
    } else {
      const Scatter& sc = scatters[b];
      DeviceScatter ds;
      {
        // At least one element each: raw_data() stays a valid device pointer.
        absl::StatusOr<core::Tensor> send =
            core::Tensor::empty({std::max<int64_t>(sc.chunk * pg->size(), 1)}, dtype, in);
        absl::StatusOr<core::Tensor> recv =
            core::Tensor::empty({std::max<int64_t>(sc.chunk, 1)}, dtype, in);
        if (!send.ok()) return send.status();
        if (!recv.ok()) return recv.status();
        ds.send = *std::move(send);
        ds.recv = *std::move(recv);
      }
      scatter_stream = in;
      prep = ds.send.set_zero(in);
      for (int j = 0; j < pg->size() && prep.ok(); ++j) {
        int64_t lo = 0, n = 0;
        part(bucket.offset, bucket.offset + bucket.count, j, &lo, &n);
        if (n == 0) continue;
        absl::StatusOr<core::Tensor> dst = ds.send.slice(j * sc.chunk, j * sc.chunk + n);
        absl::StatusOr<core::Tensor> src = flat.slice(lo, lo + n);
        prep = !dst.ok() ? dst.status() : !src.ok() ? src.status() : dst->copy_from(*src, in);
      }
      if (prep.ok()) {
        absl::StatusOr<core::Tensor> range = flat.slice(bucket.offset, bucket.offset + bucket.count);
        prep = range.ok() ? range->set_zero(in) : range.status();
      }
      if (prep.ok()) {
        absl::StatusOr<core::Tensor> recv = ds.recv.slice(0, sc.chunk);
        absl::StatusOr<core::Tensor> send = ds.send.slice(0, sc.chunk * pg->size());
        w = !recv.ok()   ? absl::StatusOr<comm::WorkPtr>(recv.status())
            : !send.ok() ? absl::StatusOr<comm::WorkPtr>(send.status())
                         : pg->reduce_scatter(*recv, *send, comm::ReduceOp::kAvg, co);
        if (w.ok()) {
          pending.push_back(b);
          d_scatters.push_back(std::move(ds));
        }
      } else {
        w = prep;
      }
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

  // The fp32 weights are the masters: this slice of them. The 16-bit CUDA
  // path keeps its float32 master slice (the weights are its rounding).
  absl::Status read_master() {
    if (cuda) {
      // cpu_offload reads float32 masters from the weights in its own step.
      if (sixteen_bit() || shard.end == shard.begin || offload) return absl::OkStatus();
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor v,
                                store.flat_values(dtype).slice(shard.begin, shard.end));
      return d_master.copy_from(v, stream);
    }
    const float* v = store.flat_values(core::DType::kF32).data<float>();
    master.assign(v + shard.begin, v + shard.end);
    return absl::OkStatus();
  }

  // Waits for the collectives; stage 2 then adds the received parts to
  // grad_shard. CUDA: `on` waits for them on the device (the CPU stream: the
  // host waits) and the additions are enqueued on it.
  absl::Status wait(const core::Stream& on) {
    if (cuda) return wait_cuda(on);
    absl::Status s = reducer->wait_all(core::Stream::cpu());
    for (size_t b : pending) {
      const Scatter& sc = scatters[b];
      float* dst = grad_shard.data() + (sc.mine_lo - shard.begin);
      for (int64_t i = 0; i < sc.mine_n; ++i) dst[i] += sc.recv[i];
    }
    pending.clear();
    return s;
  }

  absl::Status wait_cuda(const core::Stream& on_given) {
    const core::Stream on = on_given.is_cuda() ? on_given : stream;
    if (!on_given.is_cuda()) {
      // The host waits (destructor, failed backward): errors surface here.
      absl::Status s = reducer->wait_all(core::Stream::cpu());
      if (!s.ok()) {
        pending.clear();
        d_scatters.clear();  // the host waited: nothing uses them
        return s;
      }
    } else {
      COLOSSAL_RETURN_IF_ERROR(reducer->wait_all(on));
    }
    absl::Status first;
#if COLOSSAL_WITH_CUDA
    core::DeviceGuard guard(on.device());
    const core::Tensor flat = store.flat_grads(dtype);
    for (size_t i = 0; i < pending.size(); ++i) {
      const Scatter& sc = scatters[pending[i]];
      const GradBucket& bucket = reducer->buckets()[pending[i]];
      // In-place buckets: the averaged gradients are in the flat buffer.
      const char* src = sc.owner >= 0 ? static_cast<const char*>(flat.raw_data()) +
                                            bucket.offset * esize()
                                      : static_cast<const char*>(d_scatters[i].recv.raw_data());
      if (sc.mine_n > 0) {
        char* dst =
            static_cast<char*>(d_grad_shard.raw_data()) + (sc.mine_lo - shard.begin) * esize();
        const absl::Status s = core::from_kernel_status(
            kernels::elementwise::binary_cuda(dst, dst, src, sc.mine_n, dtype,
                                              kernels::elementwise::BinaryOp::kAdd, on.handle()),
            "low_level_zero: accumulating the gradient shard");
        if (first.ok() && !s.ok()) first = s;
      }
      if (sc.owner >= 0) {  // the next backward accumulates afresh
        absl::StatusOr<core::Tensor> range =
            flat.slice(bucket.offset, bucket.offset + bucket.count);
        const absl::Status s = range.ok() ? range->set_zero(on) : range.status();
        if (first.ok() && !s.ok()) first = s;
      }
    }
#else
    if (!pending.empty()) first = absl::InternalError("low_level_zero: CUDA work without CUDA");
#endif
    // The buffers go back to the pool on their allocation stream: it must
    // first wait for the additions (and so the collectives) done on `on`.
    if (!d_scatters.empty() && scatter_stream.is_cuda() &&
        scatter_stream.handle() != on.handle()) {
      absl::StatusOr<core::Event> done = core::Event::create(on.device());
      if (done.ok()) {
        core::wait_stream(scatter_stream, on, *done);
      } else {
        on.synchronize();  // no event: the host waits instead
      }
    }
    d_scatters.clear();
    pending.clear();
    return first;
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
  if (state_ != nullptr && state_->reducer != nullptr) {
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
const core::Tensor& LowLevelZeroPlugin::grad_shard_tensor() const { return state_->d_grad_shard; }

namespace {

// A new float32 host tensor holding `v`.
absl::StatusOr<core::Tensor> host_tensor(const std::vector<float>& v) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t,
                            core::Tensor::empty({static_cast<int64_t>(v.size())},
                                                core::DType::kF32, core::Stream::cpu()));
  if (!v.empty()) std::memcpy(t.data<float>(), v.data(), sizeof(float) * v.size());
  return t;
}

// A zeroed device tensor of `n` elements of `dtype` on `stream` (at least one
// element, so that raw_data() is a valid device pointer).
[[maybe_unused]] absl::StatusOr<core::Tensor> device_zeros(int64_t n, core::DType dtype,
                                          const core::Stream& stream) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t,
                            core::Tensor::empty({std::max<int64_t>(n, 1)}, dtype, stream));
  COLOSSAL_RETURN_IF_ERROR(t.set_zero(stream));
  if (n == 0) return t.slice(0, 0);
  return t;
}

}  // namespace

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
  for (int g = 0; g < optimizer.num_groups(); ++g) {
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
  State* raw = &s;  // the reducer is owned by the state: it never outlives it
  COLOSSAL_ASSIGN_OR_RETURN(
      s.reducer,
      BucketedGradReducer::create(
          "low_level_zero", model, store, make_grad_buckets(table, cap_bytes),
          [raw](size_t b, const comm::CollectiveOptions& o) { return raw->launch(b, o); }));

  s.store = store;
  s.optimizer = &optimizer;
  s.numel = table.buffer_numel(dtype);
  s.shard = zero_shard(s.numel, s.pg->size(), s.pg->rank());
  COLOSSAL_ASSIGN_OR_RETURN(s.pieces, shard_pieces(table, optimizer, s.shard));
  const int64_t n = s.shard.end - s.shard.begin;
  if (s.options.stage == 2) {
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
        if (cnt == bucket.count && cuda) sc.owner = j;  // the whole bucket is rank j's
      }
      if (!cuda) {
        sc.send.assign(sc.chunk * s.pg->size(), 0.0f);
        sc.recv.assign(sc.chunk, 0.0f);
      }
      s.scatters.push_back(std::move(sc));
    }
  }
  if (!cuda) {
    COLOSSAL_RETURN_IF_ERROR(s.read_master());
    s.adam.exp_avg.assign(n, 0.0f);
    s.adam.exp_avg_sq.assign(n, 0.0f);
    s.gathered.assign(s.shard.padded, 0.0f);
    if (s.options.stage == 2) s.grad_shard.assign(s.shard.size, 0.0f);
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
    COLOSSAL_ASSIGN_OR_RETURN(s.d_master, device_zeros(n, core::DType::kF32, st));
    COLOSSAL_ASSIGN_OR_RETURN(s.d_exp_avg, device_zeros(n, core::DType::kF32, st));
    COLOSSAL_ASSIGN_OR_RETURN(s.d_exp_avg_sq, device_zeros(n, core::DType::kF32, st));
  }
  COLOSSAL_ASSIGN_OR_RETURN(s.d_norm, device_zeros(3, core::DType::kF32, st));
  {
    COLOSSAL_ASSIGN_OR_RETURN(core::Event e, core::Event::create(st.device()));
    s.step_done.emplace(std::move(e));
  }
  {
    // The scratch depends only on the slice's length (one tensor).
    const kernels::multi_tensor::TensorRef ref{values.raw_data(), n};
    s.norm_scratch_bytes = kernels::multi_tensor::l2_norm_cuda_scratch_bytes(&ref, 1);
    COLOSSAL_ASSIGN_OR_RETURN(
        s.d_norm_scratch,
        core::Tensor::empty({std::max<int64_t>(s.norm_scratch_bytes, 16)}, core::DType::kU8, st));
  }
  s.local = s.pg->size() == 1;
  if (s.options.stage == 2) {
    if (s.local) {
      s.d_grad_shard = store.flat_grads(dtype);  // shard.size == numel: the whole buffer
    } else {
      COLOSSAL_ASSIGN_OR_RETURN(s.d_grad_shard, device_zeros(s.shard.size, dtype, st));
    }
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
    core::DeviceGuard guard(st.device());
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        kernels::elementwise::cast_cuda(s.d_master.raw_data(), v.raw_data(), n,
                                        core::DType::kF32, dtype, st.handle()),
        "low_level_zero: the master slice"));
  }
  st.synchronize();
  // This plugin keeps the master slice: the optimizer's full-size float32
  // masters would cost 4 bytes per parameter on every rank. (Dropped last, so
  // that a failed boost leaves the optimizer whole.)
  if (s.sixteen_bit()) optimizer.drop_masters();
  s.boosted = true;
  return absl::OkStatus();
#else
  return absl::InternalError("low_level_zero: unreachable");
#endif
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
  COLOSSAL_RETURN_IF_ERROR(s.wait(compute));
  return s.reducer->begin_backward(ctx.compute_stream(), sync);
}

absl::Status LowLevelZeroPlugin::end_backward(bool ok) {
  if (state_->reducer == nullptr) return absl::OkStatus();
  if (!ok) {
    const absl::Status s = state_->reducer->end_backward(ok);
    state_->wait(core::Stream::cpu()).IgnoreError();
    return s;
  }
  return state_->reducer->end_backward(ok);
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
  if (s.cuda) {
    // local: the shard is the gradient buffer, which the optimizer zeroed.
    if (s.d_grad_shard.defined() && !s.local) return s.d_grad_shard.set_zero(s.stream);
    return absl::OkStatus();
  }
  std::fill(s.grad_shard.begin(), s.grad_shard.end(), 0.0f);
  return absl::OkStatus();
}

int64_t LowLevelZeroPlugin::reductions_issued() const {
  return state_->reducer != nullptr ? state_->reducer->issued() : 0;
}
int64_t LowLevelZeroPlugin::reductions_issued_in_hooks() const {
  return state_->reducer != nullptr ? state_->reducer->issued_in_hooks() : 0;
}
const std::vector<float>& LowLevelZeroPlugin::grad_shard() const { return state_->grad_shard; }


// The CUDA step (see the header's "CUDA" section).
static absl::StatusOr<nn::MixedPrecisionStepResult> step_cuda(LowLevelZeroPlugin::State& s,
                                                              nn::DynamicLossScaler* scaler,
                                                              float max_norm) {
#if COLOSSAL_WITH_CUDA
  const core::Stream& st = s.stream;
  const int64_t n = s.shard.end - s.shard.begin;
  const int64_t es = s.esize();
  // g: this rank's reduced gradients of its slice, in the gradient dtype.
  const char* g = s.options.stage == 1
                      ? static_cast<const char*>(s.store.flat_grads(s.dtype).raw_data()) +
                            s.shard.begin * es
                      : static_cast<const char*>(s.d_grad_shard.raw_data());
  float* d = s.d_norm.data<float>();
  {
    core::DeviceGuard guard(st.device());
    COLOSSAL_RETURN_IF_ERROR(s.d_norm.set_zero(st));
    if (n > 0) {
      // Local norm (and found_inf) on the device, squared there: d[0] is this
      // slice's sum of squares, d[1] its found_inf flag.
      const kernels::multi_tensor::TensorRef ref{g, n};
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
          kernels::multi_tensor::l2_norm_cuda(d + 2, nullptr, d + 1, nullptr, &ref,
                                              s.d_norm_scratch.raw_data(), s.norm_scratch_bytes,
                                              1, s.dtype, 0.0f, st.handle()),
          "low_level_zero: gradient norm"));
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
          kernels::elementwise::binary_cuda(d, d + 2, d + 2, 1, core::DType::kF32,
                                            kernels::elementwise::BinaryOp::kMul, st.handle()),
          "low_level_zero: gradient norm"));
    }
  }
  // Summed over the ranks (squares and flags), then the one host sync.
  {
    comm::CollectiveOptions o;
    o.stream = st;
    comm::Buffer b;
    b.data = d;
    b.count = 2;
    b.dtype = core::DType::kF32;
    b.device = st.device();
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, s.pg->all_reduce(b, comm::ReduceOp::kSum, o));
    COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "low_level_zero: gradient norm"));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host, s.d_norm.to(core::Device::cpu(), st));
  st.synchronize();
  const float total = host.data<float>()[0];
  const bool found_inf = host.data<float>()[1] != 0.0f;

  // As nn::mixed_precision_step: s = the scale the loss was multiplied by.
  nn::MixedPrecisionStepResult r;
  r.loss_scale = scaler != nullptr ? scaler->scale() : 1.0f;
  const float scaled_norm = std::sqrt(total);
  const double norm = static_cast<double>(scaled_norm) / r.loss_scale;
  r.grad_norm = r.loss_scale == 1.0f ? scaled_norm : static_cast<float>(norm);
  const bool finite = !found_inf && std::isfinite(r.grad_norm);
  if (scaler != nullptr) scaler->update(!finite);
  if (!finite) {
    r.skipped = true;  // on every rank: they all saw the same sums
    return r;
  }
  if (max_norm > 0.0f) {
    const double coef = static_cast<double>(max_norm) / (norm + 1e-6);
    r.clip_coef = coef < 1.0 ? static_cast<float>(coef) : 1.0f;
  }
  const float grad_scale = r.clip_coef < 1.0f ? r.loss_scale / r.clip_coef : r.loss_scale;

  COLOSSAL_RETURN_IF_ERROR(s.read_master());  // fp32: the weights (no-op after a gather)
  const int64_t size = s.shard.size;
  // `mine`: where this rank's updated slice goes. The gather buffer lives
  // for this step only (allocated and freed on the step's stream, after the
  // backward freed the activations); at world size 1 it is the weights.
  core::Tensor values = s.store.flat_values(s.dtype);
  core::Tensor gathered, mine;
  if (s.local) {
    mine = values;
  } else {
    COLOSSAL_ASSIGN_OR_RETURN(gathered, core::Tensor::empty({s.shard.padded}, s.dtype, st));
    COLOSSAL_ASSIGN_OR_RETURN(mine,
                              gathered.slice(static_cast<int64_t>(s.pg->rank()) * size,
                                             static_cast<int64_t>(s.pg->rank()) * size + size));
  }
  if (s.offload) {
    ++s.adam.step;
    std::vector<ZeroOffload::Piece> pieces;
    pieces.reserve(s.pieces.size());
    for (const ShardPiece& p : s.pieces) {
      pieces.push_back({p.offset - s.shard.begin, p.count,
                        nn::kernel_adam_options(s.optimizer->group_hyper(p.group), s.adam.step,
                                                grad_scale)});
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor grad,
                              s.options.stage == 1
                                  ? s.store.flat_grads(s.dtype).slice(s.shard.begin, s.shard.end)
                                  : s.d_grad_shard.slice(0, n));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor weights, values.slice(s.shard.begin, s.shard.end));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, mine.slice(0, n));
    COLOSSAL_RETURN_IF_ERROR(s.offload->step(grad, pieces, weights, out));
  } else if (s.sixteen_bit() && n > 0 && !s.local) {
    // Elements of the slice no piece covers (alignment gaps) keep the weights.
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, mine.slice(0, n));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor src, values.slice(s.shard.begin, s.shard.end));
    COLOSSAL_RETURN_IF_ERROR(dst.copy_from(src, st));
  }
  if (!s.offload) {
    ++s.adam.step;
    core::DeviceGuard guard(st.device());
    std::vector<kernels::adam::AdamTensor> tensors;
    for (size_t group = 0; group < s.group_pieces.size(); ++group) {
      if (s.group_pieces[group].empty()) continue;
      tensors.clear();
      for (const ShardPiece& p : s.group_pieces[group]) {
        const int64_t at = p.offset - s.shard.begin;
        // 16-bit: the kernel writes the rounded master straight into this
        // rank's block of the gather buffer (world size 1: the weights).
        void* copy = s.sixteen_bit() ? static_cast<char*>(mine.raw_data()) + at * es : nullptr;
        tensors.push_back(kernels::adam::AdamTensor{
            s.d_master.data<float>() + at, s.d_exp_avg.data<float>() + at,
            s.d_exp_avg_sq.data<float>() + at, g + at * es, copy, p.count});
      }
      const kernels::adam::AdamOptions o = nn::kernel_adam_options(
          s.optimizer->group_hyper(static_cast<int>(group)), s.adam.step, grad_scale);
      const kernels::KernelStatus ks = kernels::adam::adam_step_tensors_cuda(
          tensors.data(), /*found_inf=*/nullptr,
          static_cast<char*>(s.d_adam_scratch.raw_data()) + s.adam_scratch_at[group],
          s.adam_scratch_bytes[group], static_cast<int64_t>(tensors.size()), s.dtype,
          s.sixteen_bit() ? s.dtype : core::DType::kF32, o, st.handle());
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
          ks, absl::StrCat("low_level_zero: Adam step of group ", group)));
    }
  }
  if (!s.sixteen_bit() && n > 0 && !s.offload) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, mine.slice(0, n));
    COLOSSAL_RETURN_IF_ERROR(dst.copy_from(s.d_master, st));
  }
  if (s.local) return r;  // the weights were written in place
  // Every rank's slice into the flat parameter buffer: the gather runs after
  // the step's work (input stream), the stream waits for it, then copies.
  {
    comm::CollectiveOptions o;
    o.stream = st;
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, s.pg->all_gather(gathered, mine, o));
    w->wait_stream(st);
    s.reducer->track(std::move(w));  // waited for again (host) before the buffers go
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor all, gathered.slice(0, s.numel));
  COLOSSAL_RETURN_IF_ERROR(values.copy_from(all, st));
  return r;
#else
  return absl::InternalError("low_level_zero: the CUDA path in a build without CUDA");
#endif
}

absl::StatusOr<nn::MixedPrecisionStepResult> LowLevelZeroPlugin::step(
    nn::DynamicLossScaler* scaler, float max_norm) {
  State& s = *state_;
  if (!s.boosted) return absl::FailedPreconditionError("low_level_zero: step before boost");
  if (scaler != nullptr && !s.cuda) {
    return absl::UnimplementedError(
        "low_level_zero: loss scaling is for 16-bit weights, which this plugin supports only "
        "on CUDA; train the CPU model in float32 without a scaler");
  }
  if (!std::isfinite(max_norm) || max_norm < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("low_level_zero: max_norm must be >= 0 (0: no clipping), got ", max_norm));
  }
  if (s.cuda) return step_cuda(s, scaler, max_norm);
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
  COLOSSAL_RETURN_IF_ERROR(s.read_master());
  ++s.adam.step;
  for (const ShardPiece& p : s.pieces) {
    const kernels::adam::AdamOptions o =
        nn::kernel_adam_options(s.optimizer->group_hyper(p.group), s.adam.step,
                     r.clip_coef < 1.0f ? 1.0f / r.clip_coef : 1.0f);
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
    const nn::Optimizer& optimizer, int to_rank) {
  const State& s = *state_;
  COLOSSAL_RETURN_IF_ERROR(s.check_optimizer(optimizer, "optimizer_state_dict"));
  const bool whole = to_rank < 0 || to_rank == s.pg->rank();  // else the meta alone
  if (!s.cuda) {
    return gather_zero_adam_state(*s.pg, s.store.table(), optimizer, s.shard, s.adam, whole);
  }
  ZeroAdamDeviceSlice slice;
  if (s.offload) {
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
  return gather_zero_adam_state_device(*s.pg, s.store.table(), optimizer, s.shard, slice,
                                       s.stream, whole);
}

absl::Status LowLevelZeroPlugin::load_optimizer_state_dict(nn::Optimizer& optimizer,
                                                           const nn::OptimizerStateDict& state) {
  State& s = *state_;
  COLOSSAL_RETURN_IF_ERROR(s.check_optimizer(optimizer, "load_optimizer_state_dict"));
  if (!s.cuda) {
    COLOSSAL_ASSIGN_OR_RETURN(s.adam,
                              load_zero_adam_state(state, s.store.table(), optimizer, s.shard));
    optimizer.release_state();  // only the slices stay (see the CUDA path below)
    return s.read_master();  // a .master in the dict was written into the weights
  }
  // Every device tensor written on the step's stream (ordered after the
  // previous step's work), from host copies that live until the stream is
  // synchronised.
  COLOSSAL_ASSIGN_OR_RETURN(
      ZeroAdamSlice loaded,
      load_zero_adam_state(state, s.store.table(), optimizer, s.shard, s.sixteen_bit()));
  // (The optimizer's own state was never allocated for the load; release
  // any a caller made it allocate before, e.g. through state_dict().)
  s.stream.synchronize();
  optimizer.release_state();
  const int64_t n = s.shard.end - s.shard.begin;
  if (n > 0 && s.offload) {
    // (The stream was synchronised above: no copy still uses the host slices.)
    std::vector<std::pair<const std::vector<float>*, const core::Tensor*>> copies = {
        {&loaded.exp_avg, &s.offload->exp_avg()}, {&loaded.exp_avg_sq, &s.offload->exp_avg_sq()}};
    if (s.sixteen_bit()) copies.emplace_back(&loaded.master, &s.offload->master());
    for (auto& [src, dst] : copies) {
      std::memcpy(dst->data<float>(), src->data(), sizeof(float) * src->size());
    }
  } else if (n > 0) {
    std::vector<std::pair<const std::vector<float>*, core::Tensor*>> uploads = {
        {&loaded.exp_avg, &s.d_exp_avg}, {&loaded.exp_avg_sq, &s.d_exp_avg_sq}};
    if (s.sixteen_bit()) uploads.emplace_back(&loaded.master, &s.d_master);
    std::vector<core::Tensor> keep;
    for (auto& [src, dst] : uploads) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, host_tensor(*src));
      COLOSSAL_RETURN_IF_ERROR(dst->copy_from(h, s.stream));
      keep.push_back(std::move(h));
    }
    s.stream.synchronize();
  }
  s.adam.step = loaded.step;
  return s.read_master();  // float32: the weights (a .master was written into them)
}

}  // namespace colossal::parallel
