// The low_level_zero plugin's CUDA path (NCCL), against nn::Adam on one
// device (nn::mixed_precision_step), ranks as threads with one GPU and one
// NCCL communicator each (as comm/nccl's test):
//   * world 1 (1 GPU) and world 2 (2 GPUs; skipped with fewer), stage 1 and
//     2, float32 / bfloat16 / float16 parameters, kSteps steps with clipping
//     by global norm, several gradient buckets. Each rank's store holds the
//     tiny GPT-2 of zero_test_util (the CPU model supplies the module tree
//     for the backward hooks) converted to the dtype on its GPU, initialised
//     with its own seed (boost broadcasts rank 0's). Instead of a forward /
//     backward, every step adds deterministic per-rank gradients to the
//     flat gradient buffer, as a backward accumulates (on the compute stream, between begin_backward
//     and end_backward, which launches every bucket; stage 2 runs two
//     backwards of half the gradients per step, float16 aside, so the
//     shards accumulate); the reference gets
//     their average over the ranks (computed on the host, rounded to the
//     dtype as NCCL's 16-bit average is);
//   * checks: every step's skipped flag, clip flag and grad norm (relative
//     1e-5); the final weights (float32: max |a - b| / max |b| <= 1e-5;
//     16-bit: the weights are the masters' rounding, and masters that differ
//     by float32 rounding (the global norm is summed in another order, so
//     clip_coef may differ in its last bit) can round to neighbouring 16-bit
//     values: <= 2^-7 relative to the largest weight, and >= 99% of them
//     bitwise equal); the gathered optimizer state (exp_avg, exp_avg_sq and,
//     16-bit, the float32 master) against nn::Adam's state_dict: <= 1e-5
//     relative, equal step counts; loading the reference's state back gives
//     it bitwise (checkpoint round trip), allocating no full-size state on
//     the device;
//   * float16 with a DynamicLossScaler (initial scale 2^10, hysteresis 1):
//     the loss-scaled gradients of one rank hold an inf in one step; every
//     rank skips that step (weights bitwise unchanged, step count unchanged),
//     the scaler halves on every rank and the reference's, and the other
//     steps match the reference.
// At world 2 the tiny model's flat buffer splits evenly, so the step gathers
// in place in the weights; the cpu_offload cases gather into a buffer and
// copy (the path of worlds that pad).
// ZeroCudaPartitioned runs stage 2's partitioned gradients (bucket memory,
// in-place reduces, retiring) on one GPU, and communication_dtype's
// conversions (stage 1 and 2, both directions).
// Without 1 (or 2) GPUs every case skips (COLOSSAL_REQUIRE_GPUS).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bazel/cuda_config.h"
#include "comm/nccl/process_group_nccl.h"
#include "comm/store/tcp_store.h"
#include "core/alloc/default_allocator.h"
#include "core/context/context.h"
#include "core/device/device.h"
#include "core/tensor/tensor.h"
#include "kernels/elementwise/elementwise.h"
#include "nn/amp/loss_scaler.h"
#include "nn/amp/mixed_precision_step.h"
#include "nn/optim/adam.h"
#include "nn/optim/module_params.h"
#include "nn/optim/param.h"
#include "parallel/zero/low_level_zero_checkpoint.h"
#include "parallel/zero/low_level_zero_plugin.h"
#include "parallel/zero/zero_grad_reduction.h"
#include "parallel/zero/zero_shard.h"
#include "parallel/zero/zero_test_util.h"
#include "tests/util/gpu_test.h"

namespace colossal::parallel {
namespace {

using core::DType;
using core::Stream;
using core::Tensor;
using namespace ::colossal::parallel::testing;  // NOLINT: test helpers

// NVLink multicast (NVLS) must stay off on the shared GPU hosts.
class NcclEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { setenv("NCCL_NVLS_ENABLE", "0", 1); }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new NcclEnvironment);

constexpr int kCudaSteps = 8;
constexpr double kStateTol = 1e-5;

#if COLOSSAL_WITH_CUDA

// The tiny GPT-2's table with every parameter in `dtype`.
nn::ParameterTable table_in(const nn::ParameterTable& f32, DType dtype) {
  nn::ParameterTable t;
  for (const nn::ParameterEntry& e : f32.entries()) {
    EXPECT_TRUE(t.add(e.name, e.shape, dtype).ok());
  }
  return t;
}

// Host floats -> `dst` (1-D, dtype of dst, same element count), on `stream`.
void upload(Tensor dst, const std::vector<float>& v, const Stream& stream) {
  ASSERT_EQ(dst.numel(), static_cast<int64_t>(v.size()));
  auto host = Tensor::empty({dst.numel()}, dst.dtype(), Stream::cpu());
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_TRUE(kernels::elementwise::cast_cpu(host->raw_data(), v.data(), dst.numel(), dst.dtype(),
                                           DType::kF32).ok());
  auto flat = dst.reshape({dst.numel()});
  ASSERT_TRUE(flat.ok());
  ASSERT_TRUE(flat->copy_from(*host, stream).ok());
  stream.synchronize();
}

// How far `run` raised the device allocator's peak above what was allocated
// before it (bytes).
int64_t device_peak_growth(const Stream& stream, const std::function<void()>& run) {
  auto alloc = core::device_allocator(stream.device());
  EXPECT_TRUE(alloc.ok()) << alloc.status();
  if (!alloc.ok()) return 0;
  (*alloc)->reset_peak_stats();
  const int64_t before = (*alloc)->stats().allocated_bytes;
  run();
  return (*alloc)->stats().peak_allocated_bytes - before;
}

// Any tensor (CPU or CUDA, any float dtype) -> host floats.
std::vector<float> download(const Tensor& t, const Stream& stream) {
  auto host = t.to(core::Device::cpu(), stream);
  EXPECT_TRUE(host.ok()) << host.status();
  if (!host.ok()) return {};
  stream.synchronize();
  std::vector<float> out(t.numel());
  EXPECT_TRUE(kernels::elementwise::cast_cpu(out.data(), host->raw_data(), t.numel(), DType::kF32,
                                           t.dtype()).ok());
  return out;
}

// What a backward does to the gradients: adds `add` (the flat layout's
// values) to every parameter's gradient, read through a handle as a layer
// reads it (stage 2 gives a bucket's gradients memory then).
void add_to_grads(const nn::ParameterStore& store, const std::vector<float>& add,
                  const Stream& stream) {
  for (const nn::ParameterEntry& e : store.table().entries()) {
    absl::StatusOr<Tensor> grad = store.handle(e.name)->grad();
    ASSERT_TRUE(grad.ok()) << grad.status();
    std::vector<float> g = download(*grad, stream);
    for (int64_t i = 0; i < e.numel(); ++i) g[i] += add[e.offset + i];
    upload(*grad, g, stream);
  }
}

// Host floats rounded to `dtype` and back (what a 16-bit buffer holds).
std::vector<float> round_to(const std::vector<float>& v, DType dtype) {
  if (dtype == DType::kF32) return v;
  std::vector<uint16_t> tmp(v.size());
  std::vector<float> out(v.size());
  EXPECT_TRUE(kernels::elementwise::cast_cpu(tmp.data(), v.data(), v.size(), dtype, DType::kF32).ok());
  EXPECT_TRUE(kernels::elementwise::cast_cpu(out.data(), tmp.data(), v.size(), DType::kF32, dtype).ok());
  return out;
}

// The flat buffer (table layout) of the float32 CPU model initialised with `seed`.
std::vector<float> init_weights(const nn::ParameterTable& table, uint64_t seed) {
  auto model = make_zero_model(seed);
  std::vector<float> flat(table.buffer_numel(table.dtypes().front()), 0.0f);
  for (const nn::ParameterEntry& e : table.entries()) {
    auto p = model->store().find(e.name);
    EXPECT_TRUE(p.ok());
    const float* v = p->value.data<float>();
    std::copy(v, v + e.numel(), flat.begin() + e.offset);
  }
  return flat;
}

// Rank `rank`'s gradients of step `step` (flat, zero in the alignment gaps),
// as held in a `dtype` buffer, times `scale` (the loss scale) before rounding.
// inf_at >= 0 puts +inf there.
std::vector<float> rank_grads(const nn::ParameterTable& table, int step, int rank, DType dtype,
                              float scale, int64_t inf_at = -1) {
  // ~1100 elements of ~0.014: a norm of ~0.5 * amp, so steps alternate
  // between ~0.2 and ~1.2, below and above cuda_max_norm.
  const double amp = step % 2 == 0 ? 0.4 : 2.5;
  std::vector<float> g(table.buffer_numel(dtype), 0.0f);
  for (const nn::ParameterEntry& e : table.entries()) {
    for (int64_t i = 0; i < e.numel(); ++i) {
      const int64_t k = e.offset + i;
      g[k] = scale * static_cast<float>(amp * 0.02 *
                                        (std::sin(0.37 * k + 1.3 * step) +
                                         0.3 * std::sin(0.5 * k + 2.1 * rank)));
    }
  }
  if (inf_at >= 0) g[inf_at] = INFINITY;
  return round_to(g, dtype);
}

// The gradients every rank sees after the average (world ranks), rounded to dtype.
std::vector<float> averaged_grads(const nn::ParameterTable& table, int step, int world,
                                  DType dtype, float scale, int inf_rank, int64_t inf_at) {
  std::vector<float> sum(table.buffer_numel(dtype), 0.0f);
  for (int r = 0; r < world; ++r) {
    const std::vector<float> g =
        rank_grads(table, step, r, dtype, scale, r == inf_rank ? inf_at : -1);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
  }
  for (float& x : sum) x /= static_cast<float>(world);
  return round_to(sum, dtype);
}

struct CudaCase {
  int world;
  int stage;
  DType dtype;
  bool fp16_overflow = false;  // the loss-scaler case (float16 only)
  bool offload = false;        // cpu_offload: CPU Adam on pinned host shards
  bool gather_at_step = false; // overlap_allgather off: one all_gather in the step
  // communication_dtype; at world 2 a float32 wire averages two 16-bit
  // gradients exactly and rounds once: averaged_grads' values again.
  std::optional<DType> wire = std::nullopt;
};

std::string case_name(const ::testing::TestParamInfo<CudaCase>& info) {
  const CudaCase& c = info.param;
  return absl::StrCat("W", c.world, "Stage", c.stage, core::dtype_name(c.dtype),
                      c.fp16_overflow ? "Overflow" : "", c.offload ? "Offload" : "",
                      c.gather_at_step ? "GatherAtStep" : "",
                      c.wire ? absl::StrCat("Wire", core::dtype_name(*c.wire)) : "");
}

struct StepLog {
  std::vector<char> skipped, clipped;
  std::vector<float> grad_norm;
  std::vector<float> loss_scale;
};

constexpr float kInitialScale = 1024.0f;
constexpr int kOverflowStep = 2;
constexpr float kCudaMaxNorm = 0.6f;

nn::DynamicLossScaler make_scaler() {
  nn::DynamicLossScalerOptions o;
  o.initial_scale = kInitialScale;
  o.hysteresis = 1;
  return *nn::DynamicLossScaler::create(o);
}

std::unique_ptr<nn::Adam> make_cuda_adam(const nn::ParameterStore& store, const Stream& stream) {
  auto params = nn::optimizer_params(store.parameters(), stream);
  EXPECT_TRUE(params.ok()) << params.status();
  nn::AdamOptions o;
  o.lr = 1e-2;
  auto adam = nn::make_adamw(nn::split_decay_groups(std::move(*params), kWeightDecay), o, stream);
  EXPECT_TRUE(adam.ok()) << adam.status();
  return std::move(*adam);
}

// Compares two state dicts' moments (and masters); exact when tol == 0.
void expect_states_close(const nn::OptimizerStateDict& got, const nn::OptimizerStateDict& want,
                         const Stream& stream, double tol, const std::string& what) {
  int compared = 0;
  for (const auto& [key, t] : want.tensors) {
    const auto it = got.tensors.find(key);
    ASSERT_NE(it, got.tensors.end()) << what << ": missing " << key;
    if (t.dtype() == DType::kI64) {
      auto a = it->second.to(core::Device::cpu(), stream);
      auto b = t.to(core::Device::cpu(), stream);
      stream.synchronize();
      EXPECT_EQ(*a->data<int64_t>(), *b->data<int64_t>()) << what << ": " << key;
      continue;
    }
    EXPECT_TRUE(it->second.device().is_cpu()) << what << ": " << key << " is on the device";
    const std::vector<float> a = download(it->second, stream);
    const std::vector<float> b = download(t, stream);
    ASSERT_EQ(a.size(), b.size()) << key;
    const double d = rel_diff(a, b);
    if (tol == 0.0) {
      EXPECT_EQ(a, b) << what << ": " << key;
    } else {
      EXPECT_LE(d, tol) << what << ": " << key;
    }
    ++compared;
  }
  EXPECT_EQ(got.tensors.size(), want.tensors.size()) << what;
  EXPECT_GT(compared, 0);
}

// One process, one device: nn::Adam through nn::mixed_precision_step on the averaged gradients.
struct Reference {
  StepLog log;
  std::vector<float> weights;
  std::vector<float> weights_before_overflow, weights_after_overflow;
  nn::OptimizerStateDict state;  // host copies
  nn::LossScalerState scaler;
};

void reference_run(const CudaCase& c, const nn::ParameterTable& table, const Stream& stream,
                   Reference* out) {
  auto store = nn::ParameterStore::create(table, stream);
  ASSERT_TRUE(store.ok()) << store.status();
  upload(store->flat_values(c.dtype), init_weights(table, kSeed), stream);
  std::unique_ptr<nn::Adam> adam = make_cuda_adam(*store, stream);
  ASSERT_NE(adam, nullptr);
  nn::DynamicLossScaler scaler = make_scaler();
  nn::DynamicLossScaler* sp = c.fp16_overflow ? &scaler : nullptr;
  const int64_t inf_at = table.entries()[1].offset + 3;
  for (int step = 0; step < kCudaSteps; ++step) {
    const float scale = sp != nullptr ? sp->scale() : 1.0f;
    const bool inf = c.fp16_overflow && step == kOverflowStep;
    upload(store->flat_grads(c.dtype),
           averaged_grads(table, step, c.world, c.dtype, scale, inf ? c.world - 1 : -1, inf_at),
           stream);
    if (inf) out->weights_before_overflow = download(store->flat_values(c.dtype), stream);
    auto r = nn::mixed_precision_step(*adam, sp, {.max_norm = kCudaMaxNorm});
    ASSERT_TRUE(r.ok()) << r.status();
    if (inf) out->weights_after_overflow = download(store->flat_values(c.dtype), stream);
    out->log.skipped.push_back(r->skipped);
    out->log.clipped.push_back(r->clip_coef < 1.0f);
    out->log.grad_norm.push_back(r->grad_norm);
    out->log.loss_scale.push_back(r->loss_scale);
  }
  out->weights = download(store->flat_values(c.dtype), stream);
  auto sd = adam->state_dict();
  ASSERT_TRUE(sd.ok()) << sd.status();
  for (auto& [key, t] : sd->tensors) {
    auto h = t.to(core::Device::cpu(), stream);
    ASSERT_TRUE(h.ok());
    stream.synchronize();
    t = *h;
  }
  out->state = std::move(*sd);
  out->scaler = scaler.state();
}

struct RankResult {
  StepLog log;
  std::vector<float> weights;
  std::vector<float> weights_before_overflow, weights_after_overflow;
  int64_t steps_before_overflow = -1, steps_after_overflow = -1;
  nn::LossScalerState scaler;
  bool done = false;
};

// One rank: boost, kCudaSteps steps, then the checkpoint checks against `ref`.
void rank_run(const CudaCase& c, int rank, int port, const Reference& ref, RankResult* out) {
  const core::Device dev = core::Device::cuda(rank);
  core::DeviceGuard guard(dev);
  auto ctx_or = core::Context::create(dev);
  ASSERT_TRUE(ctx_or.ok()) << ctx_or.status();
  std::unique_ptr<core::Context> ctx = std::move(*ctx_or);
  const Stream stream = ctx->compute_stream();

  comm::TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  so.timeout = absl::Seconds(60);
  auto store_client = comm::TcpStore::create(so);
  ASSERT_TRUE(store_client.ok()) << store_client.status();
  comm::NcclOptions no;
  no.device = dev;
  no.timeout = absl::Seconds(120);
  auto pg = comm::ProcessGroupNccl::create(std::shared_ptr<comm::Store>(std::move(*store_client)),
                                           rank, c.world, no);
  ASSERT_TRUE(pg.ok()) << pg.status();

  // The CPU model: only its module tree (declare + backward hooks).
  auto model = make_zero_model(kSeed + rank);
  const nn::ParameterTable table = table_in(model->store().table(), c.dtype);
  auto store = nn::ParameterStore::create(table, stream);
  ASSERT_TRUE(store.ok()) << store.status();
  upload(store->flat_values(c.dtype), init_weights(table, kSeed + rank), stream);
  std::unique_ptr<nn::Adam> adam = make_cuda_adam(*store, stream);
  ASSERT_NE(adam, nullptr);

  LowLevelZeroOptions zo;
  zo.stage = c.stage;
  zo.reduce_bucket_size_in_m = 300.0 / (1024.0 * 1024.0);  // ~300 elements: several buckets
  zo.cpu_offload = c.offload;
  zo.cpu_offload_threads = 2;
  zo.overlap_allgather = !c.gather_at_step;
  zo.communication_dtype = c.wire;
  auto plugin_or = LowLevelZeroPlugin::create(*pg, zo);
  ASSERT_TRUE(plugin_or.ok()) << plugin_or.status();
  LowLevelZeroPlugin& zero = **plugin_or;
  {
    const absl::Status s = zero.boost(*model, *store, *adam);
    ASSERT_TRUE(s.ok()) << s;
  }
  ASSERT_TRUE(zero.on_cuda());
  ASSERT_EQ(zero.param_dtype(), c.dtype);
  // With cpu_offload the shards are pinned host memory, else device memory.
  EXPECT_EQ(zero.exp_avg_shard_tensor().device().is_cpu(), c.offload);
  EXPECT_EQ(zero.exp_avg_shard_tensor().is_pinned(), c.offload);
  // The broadcast: rank 0's weights everywhere.
  EXPECT_EQ(download(store->flat_values(c.dtype), stream),
            round_to(init_weights(table, kSeed), c.dtype));

  nn::DynamicLossScaler scaler = make_scaler();
  nn::DynamicLossScaler* sp = c.fp16_overflow ? &scaler : nullptr;
  const int64_t inf_at = table.entries()[1].offset + 3;
  for (int step = 0; step < kCudaSteps; ++step) {
    const float scale = sp != nullptr ? sp->scale() : 1.0f;
    const bool inf = c.fp16_overflow && step == kOverflowStep && rank == c.world - 1;
    ASSERT_TRUE(adam->zero_grad().ok());
    ASSERT_TRUE(zero.zero_grad().ok());
    // Stage 2 (float32 / bfloat16): two backwards of half the gradients,
    // whose reduced shards accumulate to exactly the whole (halving is exact).
    // Each adds to the gradients as a backward does: at world size 1 the
    // flat buffer is the shard and holds the first half when the second
    // comes; above, each backward's buckets start from zero.
    const int micro = c.stage == 2 && c.dtype != DType::kF16 ? 2 : 1;
    for (int m = 0; m < micro; ++m) {
      ASSERT_TRUE(zero.begin_backward(*ctx, /*sync=*/true).ok());
      ASSERT_NO_FATAL_FAILURE(add_to_grads(
          *store, rank_grads(table, step, rank, c.dtype, scale / micro, inf ? inf_at : -1), stream));
      ASSERT_TRUE(zero.end_backward(true).ok());
    }
    // Partitioned gradients: none outside a backward (no flat buffer).
    if (c.stage == 2 && c.world > 1) {
      ASSERT_FALSE(store->flat_grads(c.dtype).defined());
    }
    ASSERT_TRUE(zero.before_step(adam->stream()).ok());
    if (c.fp16_overflow && step == kOverflowStep) {
      ASSERT_TRUE(zero.sync_weights().ok());  // the last step's pieces (overlap_allgather)
      out->weights_before_overflow = download(store->flat_values(c.dtype), stream);
      out->steps_before_overflow = zero.step_count();
    }
    auto r = zero.step(sp, kCudaMaxNorm);
    ASSERT_TRUE(r.ok()) << r.status();
    if (c.fp16_overflow && step == kOverflowStep) {
      ASSERT_TRUE(zero.sync_weights().ok());
      out->weights_after_overflow = download(store->flat_values(c.dtype), stream);
      out->steps_after_overflow = zero.step_count();
    }
    out->log.skipped.push_back(r->skipped);
    out->log.clipped.push_back(r->clip_coef < 1.0f);
    out->log.grad_norm.push_back(r->grad_norm);
    out->log.loss_scale.push_back(r->loss_scale);
  }
  EXPECT_GT(zero.reductions_issued(), c.world == 1 ? 1 : 2) << "expected several buckets";
  // Several rounds every step that is taken when the weights' gather
  // overlaps (world > 1, no offload); none otherwise.
  const bool overlapped = c.world > 1 && !c.offload && !c.gather_at_step;
  if (overlapped) {
    const int64_t taken = std::count(out->log.skipped.begin(), out->log.skipped.end(), 0);
    EXPECT_GE(zero.gathers_issued(), 2 * taken);
    EXPECT_GT(taken, 0);
  } else {
    EXPECT_EQ(zero.gathers_issued(), 0);
  }
  ASSERT_TRUE(zero.sync_weights().ok());
  out->weights = download(store->flat_values(c.dtype), stream);
  out->scaler = scaler.state();

  // Checkpoint: the gathered state is nn::Adam's (host tensors) ...
  auto sd = zero.optimizer_state_dict(*adam);
  ASSERT_TRUE(sd.ok()) << sd.status();
  expect_states_close(*sd, ref.state, stream, kStateTol, absl::StrCat("rank ", rank));
  {
    // For rank 0 only: the same dict there, the meta alone elsewhere.
    auto to0 = zero.optimizer_state_dict(*adam, /*to_rank=*/0);
    ASSERT_TRUE(to0.ok()) << to0.status();
    EXPECT_TRUE(to0->meta == sd->meta);
    if (rank == 0) {
      expect_states_close(*to0, *sd, stream, 0.0, "rank 0, to_rank 0");
    } else {
      EXPECT_TRUE(to0->tensors.empty()) << "rank " << rank;
    }
  }
  if (!c.offload) {
    // Gathered in many small chunks (37 elements, not dividing the slice),
    // the dict is bitwise the one-chunk dict.
    ZeroAdamTensors slice;
    slice.exp_avg = zero.exp_avg_shard_tensor();
    slice.exp_avg_sq = zero.exp_avg_sq_shard_tensor();
    if (c.dtype != DType::kF32) slice.master = zero.master_shard_tensor();
    slice.step = zero.step_count();
    absl::StatusOr<nn::OptimizerStateDict> chunked;
    // Its device staging is per chunk: far below the full state's bytes.
    EXPECT_LT(device_peak_growth(stream, [&] {
                chunked = gather_zero_adam_state(**pg, store->table(), *adam, zero.shard(),
                                                        slice, adam->stream(), /*whole=*/true,
                                                        /*chunk_elements=*/37);
              }),
              4 * table.buffer_numel(c.dtype))
        << "rank " << rank << ": the chunked gather staged the whole state on the device";
    ASSERT_TRUE(chunked.ok()) << chunked.status();
    ASSERT_GT(zero.shard().size, 2 * 37) << "the slice fits one chunk: nothing is tested";
    expect_states_close(*chunked, *sd, stream, 0.0, absl::StrCat("rank ", rank, " chunked"));
  }
  // ... and the reference's state loads and gathers back bitwise, with no
  // full-size state on the device: the slices exist already, so the load's
  // peak stays below one float per parameter (staging the moments in the
  // optimizer took two).
  absl::Status loaded;
  EXPECT_LT(device_peak_growth(
                stream, [&] { loaded = zero.load_optimizer_state_dict(*adam, ref.state); }),
            4 * table.buffer_numel(c.dtype))
      << "rank " << rank << ": the load allocated full-size state on the device";
  ASSERT_TRUE(loaded.ok()) << loaded;
  auto back = zero.optimizer_state_dict(*adam);
  ASSERT_TRUE(back.ok()) << back.status();
  expect_states_close(*back, ref.state, stream, 0.0, absl::StrCat("rank ", rank, " reloaded"));
  if (c.dtype != DType::kF32) {
    // Loading a .master rewrote the weights with its rounding: the reference's.
    EXPECT_EQ(download(store->flat_values(c.dtype), stream), ref.weights);
  }
  out->done = true;
}

// One rank's NCCL group on cuda:0 over a loopback store, and a context there:
// what the ZeroCudaPartitioned cases reduce over.
struct OneGpuGroup {
  std::unique_ptr<comm::TcpStore> master;
  std::unique_ptr<core::Context> ctx;
  std::shared_ptr<comm::ProcessGroup> pg;

  void start() {
    auto served = serve_loopback_store();
    ASSERT_TRUE(served.ok()) << served.status();
    master = std::move(*served);
    const core::Device dev = core::Device::cuda(0);
    core::DeviceGuard guard(dev);
    auto created = core::Context::create(dev);
    ASSERT_TRUE(created.ok()) << created.status();
    ctx = std::move(*created);
    comm::TcpStoreOptions so;
    so.host = "127.0.0.1";
    so.port = master->port();
    auto client = comm::TcpStore::create(so);
    ASSERT_TRUE(client.ok()) << client.status();
    comm::NcclOptions no;
    no.device = dev;
    auto group = comm::ProcessGroupNccl::create(std::shared_ptr<comm::Store>(std::move(*client)), 0, 1, no);
    ASSERT_TRUE(group.ok()) << group.status();
    pg = std::move(*group);
  }
};

// ZeRO-2's partitioned gradients on the GPU, on one: a world-1 NCCL group
// with the shard kept apart from the gradients (the layout of larger worlds,
// which the plugin uses above one GPU). Buckets of 40 elements, all this
// rank's, so each is reduced in place (NCCL's reduce) and retired while
// later ones are launched (the compute stream waits for its collective,
// adds it to the shard; the memory goes back to the pool in that order).
// Two backwards of the same gradients give the shard exactly twice them
// (x + x is exact); between backwards no parameter has a gradient.
TEST(ZeroCudaPartitioned, OneRankReducesBucketsInPlaceIntoTheShard) {
  COLOSSAL_REQUIRE_GPUS(1);
  OneGpuGroup one;
  ASSERT_NO_FATAL_FAILURE(one.start());
  core::DeviceGuard guard(one.ctx->device());
  const Stream stream = one.ctx->compute_stream();
  const std::shared_ptr<comm::ProcessGroup> pg = one.pg;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(core::dtype_name(dtype));
    auto model = make_zero_model(kSeed);  // the module tree for the hooks
    const nn::ParameterTable table = table_in(model->store().table(), dtype);
    auto store = nn::ParameterStore::declare(table);
    ASSERT_TRUE(store.allocate(stream, nn::ParameterStore::Gradients::kPlugin).ok());
    const int64_t numel = table.buffer_numel(dtype);
    ZeroGradReductionOptions o;
    o.stage = 2;
    o.bucket_bytes = 40 * static_cast<int64_t>(core::dtype_size(dtype));
    o.reduce_owned_buckets = true;
    auto grads = ZeroGradReduction::create(pg, *model, store, dtype, zero_shard(numel, 1, 0),
                                           stream, o);
    ASSERT_TRUE(grads.ok()) << grads.status();
    const std::vector<float> g = rank_grads(table, 0, 0, dtype, 1.0f);
    for (int backward = 0; backward < 2; ++backward) {
      ASSERT_TRUE((*grads)->begin_backward(stream, /*sync=*/true).ok());
      ASSERT_NO_FATAL_FAILURE(add_to_grads(store, g, stream));
      ASSERT_TRUE((*grads)->end_backward(true).ok());
      for (const nn::Parameter& p : store.parameters()) EXPECT_FALSE(p.grad.defined()) << p.name;
    }
    ASSERT_TRUE((*grads)->wait(stream).ok());
    EXPECT_GT((*grads)->issued(), 2 * 10);
    EXPECT_EQ((*grads)->most_in_flight(), 4);
    std::vector<float> twice(g.size());
    for (size_t i = 0; i < g.size(); ++i) twice[i] = 2.0f * g[i];
    EXPECT_EQ(download(*(*grads)->slice_grads(), stream), twice);
  }
}

// communication_dtype on one GPU (NCCL at world 1 averages nothing away, so
// what is left is the conversions): float32 gradients over a bfloat16 wire
// arrive as their bfloat16 rounding (stage 1 in the flat buffer; stage 2
// added to the shard, twice over two backwards: exactly twice it); bfloat16
// gradients over a float32 wire arrive unchanged (2g: exact). Every bucket
// goes through a converted buffer, the stage-2 ones reduced in place and
// landed while later ones are launched.
TEST(ZeroCudaPartitioned, CommunicationDtypeConvertsEachBucketAndBack) {
  COLOSSAL_REQUIRE_GPUS(1);
  OneGpuGroup one;
  ASSERT_NO_FATAL_FAILURE(one.start());
  core::DeviceGuard guard(one.ctx->device());
  const Stream stream = one.ctx->compute_stream();
  const std::shared_ptr<comm::ProcessGroup> pg = one.pg;
  const std::pair<DType, DType> kinds[] = {{DType::kF32, DType::kBF16}, {DType::kBF16, DType::kF32}};
  for (const auto& [dtype, wire] : kinds) {
    for (int stage : {1, 2}) {
      SCOPED_TRACE(absl::StrCat(core::dtype_name(dtype), " over ", core::dtype_name(wire),
                                ", stage ", stage));
      auto model = make_zero_model(kSeed);  // the module tree for the hooks
      const nn::ParameterTable table = table_in(model->store().table(), dtype);
      auto store = nn::ParameterStore::declare(table);
      ASSERT_TRUE(store
                      .allocate(stream, stage == 2 ? nn::ParameterStore::Gradients::kPlugin
                                                   : nn::ParameterStore::Gradients::kFlat)
                      .ok());
      const int64_t numel = table.buffer_numel(dtype);
      if (stage == 1) {
        ASSERT_TRUE(store.flat_grads(dtype).set_zero(stream).ok());
      }
      ZeroGradReductionOptions o;
      o.stage = stage;
      o.bucket_bytes = 40 * static_cast<int64_t>(core::dtype_size(dtype));
      o.reduce_owned_buckets = true;
      o.communication_dtype = wire;
      auto grads = ZeroGradReduction::create(pg, *model, store, dtype, zero_shard(numel, 1, 0),
                                             stream, o);
      ASSERT_TRUE(grads.ok()) << grads.status();
      const std::vector<float> g = rank_grads(table, 0, 0, dtype, 1.0f);
      const int backwards = stage == 2 ? 2 : 1;
      for (int backward = 0; backward < backwards; ++backward) {
        ASSERT_TRUE((*grads)->begin_backward(stream, /*sync=*/true).ok());
        ASSERT_NO_FATAL_FAILURE(add_to_grads(store, g, stream));
        ASSERT_TRUE((*grads)->end_backward(true).ok());
      }
      ASSERT_TRUE((*grads)->wait(stream).ok());
      if (stage == 2) {
        EXPECT_EQ((*grads)->most_in_flight(), 4);
      }
      const std::vector<float> arrived = round_to(g, DType::kBF16);  // g itself for bf16 gradients
      std::vector<float> want(g.size());
      for (size_t i = 0; i < g.size(); ++i) want[i] = static_cast<float>(backwards) * arrived[i];
      if (dtype == DType::kF32) {  // the wire's rounding shows
        EXPECT_NE(arrived, g);
      }
      const Tensor got = stage == 2 ? *(*grads)->slice_grads() : store.flat_grads(dtype);
      EXPECT_EQ(download(got, stream), want);
    }
  }
}

class ZeroCuda : public ::testing::TestWithParam<CudaCase> {};

TEST_P(ZeroCuda, MatchesAdamOnOneDevice) {
  const CudaCase c = GetParam();
  COLOSSAL_REQUIRE_GPUS(c.world);
  auto master = serve_loopback_store();
  ASSERT_TRUE(master.ok()) << master.status();
  const int port = (*master)->port();

  const nn::ParameterTable table = table_in(make_zero_model(kSeed)->store().table(), c.dtype);
  Reference ref;
  {
    const core::Device dev = core::Device::cuda(0);
    core::DeviceGuard guard(dev);
    auto ctx = core::Context::create(dev);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    reference_run(c, table, (*ctx)->compute_stream(), &ref);
    (*ctx)->compute_stream().synchronize();
  }
  ASSERT_EQ(ref.log.skipped.size(), static_cast<size_t>(kCudaSteps));

  std::vector<RankResult> results(c.world);
  std::vector<std::thread> threads;
  for (int r = 0; r < c.world; ++r) {
    threads.emplace_back([&, r] { rank_run(c, r, port, ref, &results[r]); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < c.world; ++r) ASSERT_TRUE(results[r].done) << "rank " << r;

  int clipped = 0;
  for (int r = 0; r < c.world; ++r) {
    const RankResult& res = results[r];
    for (int s = 0; s < kCudaSteps; ++s) {
      EXPECT_EQ(res.log.skipped[s], ref.log.skipped[s]) << "rank " << r << " step " << s;
      EXPECT_EQ(res.log.loss_scale[s], ref.log.loss_scale[s]) << "rank " << r << " step " << s;
      if (ref.log.skipped[s]) continue;
      EXPECT_EQ(res.log.clipped[s], ref.log.clipped[s]) << "rank " << r << " step " << s;
      EXPECT_LE(std::abs(res.log.grad_norm[s] - ref.log.grad_norm[s]) / ref.log.grad_norm[s],
                kStateTol)
          << "rank " << r << " step " << s << ": " << res.log.grad_norm[s] << " vs "
          << ref.log.grad_norm[s];
      if (r == 0) clipped += ref.log.clipped[s];
    }
    // The ranks end bitwise equal (the all_gather).
    EXPECT_EQ(res.weights, results[0].weights) << "rank " << r;
    EXPECT_EQ(res.scaler, ref.scaler) << "rank " << r;
  }
  EXPECT_GT(clipped, 0) << "clipping never triggered";
  EXPECT_LT(clipped, kCudaSteps - (c.fp16_overflow ? 1 : 0)) << "clipping always triggered";

  const std::vector<float>& w = results[0].weights;
  ASSERT_EQ(w.size(), ref.weights.size());
  if (c.dtype == DType::kF32) {
    EXPECT_LE(rel_diff(w, ref.weights), kRelTol);
  } else {
    EXPECT_LE(rel_diff(w, ref.weights), 1.0 / 128);
    int64_t equal = 0;
    for (size_t i = 0; i < w.size(); ++i) equal += w[i] == ref.weights[i];
    EXPECT_GE(static_cast<double>(equal), 0.99 * static_cast<double>(w.size()))
        << equal << " of " << w.size() << " weights bitwise equal";
  }
  if (c.fp16_overflow) {
    ASSERT_TRUE(ref.log.skipped[kOverflowStep]);
    EXPECT_EQ(ref.weights_before_overflow, ref.weights_after_overflow);
    EXPECT_EQ(ref.log.loss_scale[kOverflowStep + 1], ref.log.loss_scale[kOverflowStep] / 2);
    for (int r = 0; r < c.world; ++r) {
      EXPECT_EQ(results[r].weights_before_overflow, results[r].weights_after_overflow)
          << "rank " << r << ": the overflow step changed the weights";
      EXPECT_EQ(results[r].steps_before_overflow, kOverflowStep);
      EXPECT_EQ(results[r].steps_after_overflow, kOverflowStep) << "rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ZeroCuda,
    ::testing::Values(CudaCase{1, 1, DType::kF32}, CudaCase{1, 2, DType::kF32},
                      CudaCase{1, 1, DType::kBF16}, CudaCase{1, 2, DType::kBF16},
                      CudaCase{1, 2, DType::kF16, true}, CudaCase{2, 1, DType::kF32},
                      CudaCase{2, 2, DType::kF32}, CudaCase{2, 1, DType::kBF16},
                      CudaCase{2, 2, DType::kBF16}, CudaCase{2, 1, DType::kF16, true},
                      CudaCase{2, 2, DType::kF16, true},
                      // cpu_offload: the same numbers (CPU and CUDA Adam are bitwise equal).
                      CudaCase{1, 1, DType::kF32, false, true},
                      CudaCase{1, 2, DType::kBF16, false, true},
                      CudaCase{1, 2, DType::kF16, true, true},
                      CudaCase{2, 1, DType::kBF16, false, true},
                      CudaCase{2, 2, DType::kF32, false, true},
                      CudaCase{2, 2, DType::kBF16, false, true},
                      CudaCase{2, 2, DType::kF16, true, true},
                      // The weights gathered in the step (one all_gather) instead.
                      CudaCase{2, 1, DType::kF32, false, false, true},
                      CudaCase{2, 2, DType::kBF16, false, false, true},
                      CudaCase{2, 1, DType::kBF16, false, false, false, DType::kF32},
                      CudaCase{2, 2, DType::kBF16, false, false, false, DType::kF32},
                      CudaCase{2, 2, DType::kF16, true, false, false, DType::kF32}),
    case_name);

#endif  // COLOSSAL_WITH_CUDA

// Runs everywhere: without CUDA parameters the CPU path's limits stand.
TEST(ZeroCudaLimits, SixteenBitCpuModelIsRefused) {
  auto model = make_zero_model(kSeed);
  const nn::ParameterTable& f32 = model->store().table();
  nn::ParameterTable t;
  for (const nn::ParameterEntry& e : f32.entries()) ASSERT_TRUE(t.add(e.name, e.shape, DType::kBF16).ok());
  auto store = nn::ParameterStore::create(t, Stream::cpu());
  ASSERT_TRUE(store.ok());
  auto params = nn::optimizer_params(store->parameters(), Stream::cpu());
  ASSERT_TRUE(params.ok()) << params.status();
  auto adam = nn::make_adamw(nn::split_decay_groups(std::move(*params), kWeightDecay));
  ASSERT_TRUE(adam.ok()) << adam.status();
  run_ranks(1, [&](int, std::shared_ptr<comm::ProcessGroup> g) {
    auto plugin = LowLevelZeroPlugin::create(g);
    ASSERT_TRUE(plugin.ok());
    const absl::Status s = (*plugin)->boost(*model, *store, **adam);
    EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  });
}

}  // namespace
}  // namespace colossal::parallel
