// colossal::parallel — the `gemini` plugin: chunk-based ZeRO-3 with the
// parameters, gradients and optimizer state split between device and host
// memory (Colossal-AI's GeminiPlugin).
//
// No rank holds the whole model. materialize() packs the parameters into
// chunks (parallel/gemini/chunk_layout.h) and gives each rank its shard of
// every chunk: the values (the model's dtype), float32 masters and Adam
// moments of 1/W of the model, plus a gradient shard in the model's dtype. A
// parameter has memory only while its chunk is gathered:
//   * forward / backward: a module's hook gathers the chunks of the
//     parameters it declares (all_gather of the shards into the chunk) before
//     it runs and releases them after, unless the next module in the recorded
//     access order uses the same chunk. A parameter read by another module
//     (GPT-2's tied LM head reads wte) is gathered on demand: the handle asks
//     the plugin (nn::ParameterStore::set_fetcher). Activation checkpointing
//     works: a recomputation gathers again and keeps the chunk for the
//     backward right after. With max_prefetch > 0 and W > 1 the next
//     max_prefetch sharded chunks of the recorded order are all-gathered
//     ahead, on the communication stream, while the modules before them run
//     (the same chunks on every rank: the choice reads nothing rank-local;
//     auto gathers ahead as many as its placement left room for).
//   * gradients: a chunk's gradient buffer exists from the first backward use
//     until every parameter of the chunk is final (the backward hooks of their
//     modules); then it is reduce-scattered (averaged) into the ranks' gradient
//     shards on the communication stream — the backward goes on, waiting for
//     a reduction only when two newer ones are in flight, for memory, or at
//     its end — which accumulate over the micro-batches of a step (gradient
//     accumulation) until Booster::zero_grad. Chunks not finished by the hooks
//     (a parameter no module used in this step) are reduced when the backward
//     returns, so an unused parameter's gradient is zero, not an error.
//     no_sync is accepted and changes nothing: Gemini keeps no unreduced
//     gradients (that would be the whole model's), so every micro-batch is
//     reduced into the shards; the sum is what local accumulation would give.
//   * step (the plugin owns it): the global norm over every rank's shards, one
//     all_reduce; clipping (clip_coef = min(1, max_norm / (norm + 1e-6)), as
//     nn::clip_grad_by_norm; a non-finite norm skips the step on every rank);
//     Adam on this rank's shard, piece by piece with each parameter's
//     optimizer group. No all_gather after the step: the next use gathers.
//   * a model smaller than min_chunk_size_m is one chunk kept whole on every
//     rank (all-reduce instead of reduce-scatter), as Colossal-AI does.
//
// Placement (where each chunk's shard and optimizer state live):
//   cuda:   all on the device. cpu: all in (pinned) host memory; a chunk is
//   gathered into device memory for each use. static: the last offload_optim_frac of
//   the chunks on the host, the rest on the device (a chunk's shard and its
//   optimizer state move together: offload_param_frac must not exceed
//   offload_optim_frac); shard_param_frac of the chunks sharded, the rest
//   kept whole. auto: the warm-up step runs as cpu, recording the access order
//   and the peak non-model memory; then as many chunks as fit under
//   capacity * steady_cuda_cap_ratio - peak non-model - the working set move
//   to the device, in access order. The warm-up starts with Colossal-AI's
//   share on the device (capacity * steady_cuda_cap_ratio * (1 -
//   warmup_non_model_data_ratio)), more when the host could not hold the rest. A gathered chunk that does not fit evicts
//   the device-resident chunk used furthest in the future to the host, and
//   says so once.
// The "device" of the CPU build is a stand-in: host memory counted against
// device_capacity_bytes (tests cap it to exercise placement and eviction);
// its non-model memory reads 0 unless non_model_bytes says otherwise.
//
// Ranks whose modules use the parameters in different orders would gather
// different chunks in one collective: during the first step every access is
// checked across the ranks (a small all_gather), and a difference stops
// every rank with an error naming the first differing parameter.
//
// Checkpoints: the model in one process's replicated layout (any world size
// loads it, as do ddp and low_level_zero) and the optimizer state as
// nn::Adam's state_dict of one process; both load at any world size. Saves
// stream them (streams_state): one chunk at a time is gathered, handed to
// the writer and dropped, so a model that fills the host can be saved.
// model_state_dict and optimizer_state_dict collect the same stream whole.
//
// CUDA (materialize on a CUDA stream; NCCL group): chunks hold the model's
// dtype (bf16, fp16 or fp32) with float32 masters and moments. Every chunk
// operation is enqueued on that stream: gathers and reduce-scatters wait for
// it and it waits for them on the device, never the host. A host chunk's
// 16-bit shard crosses PCIe to be gathered (max_prefetch chunks ahead on a
// copy stream), its reduced 16-bit gradients cross back on a stream of their
// own, and CPU Adam (cpu_threads) updates it on a worker thread after step()
// returns, chunk by chunk in the next forward's order (chunk_updater.h), with
// the GPU updating every chunk a second worker takes (gpu_shares_host_adam): a
// gather waits for its own chunk only; checkpoints and the next step wait for
// all. The step's one host sync reads the norm (a host chunk's gradient norm
// is taken on the device before its download). Under gradient accumulation a
// host chunk's parts are summed on the device when it has room
// (device_grad_accumulation) and cross once, at the step; else each crosses
// and is added on the host. Per parameter: 14 bytes for a bfloat16 model
// (value 2, the float32 master's low half 2 — the value is its high half,
// kernels/adam split_master.h —, moments 8, gradient 2), 16 for float16 (a
// whole float32 master), wherever the shard lives, divided by the group, plus
// the gathered chunks and their gradients while in use. One rank keeps each
// chunk whole: the gathered chunk is the shard and the backward accumulates
// into the gradient shard directly.
//
// Limits (errors at materialize / boost): one parameter dtype; the CPU path
// trains float32; Adam-family optimizers over declared parameters
// (nn::declared_params) or the model's; a loss scaler only on CUDA. Checkpoints gather
// the whole state on the host (a model that fills the host cannot be saved).
//
//   GeminiOptions o;
//   o.placement_policy = "auto";
//   auto plugin = *GeminiPlugin::create(pg, o);
//   Booster booster(std::move(plugin));
//   auto model = *nn::GPT2::declare(config, DType::kF32);   // no memory
//   COLOSSAL_RETURN_IF_ERROR(booster.materialize(model->store(), seed, Stream::cpu()));
//   auto adam = *nn::make_adamw(nn::split_decay_groups(nn::declared_params(model->table()), 0.1), a);
//   COLOSSAL_RETURN_IF_ERROR(booster.boost(*model, model->store(), *adam));
//   ... the Booster loop (parallel/booster/booster.h)
#ifndef COLOSSAL_PARALLEL_GEMINI_GEMINI_PLUGIN_H_
#define COLOSSAL_PARALLEL_GEMINI_GEMINI_PLUGIN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group/process_group.h"
#include "parallel/booster/plugin.h"
#include "parallel/gemini/chunk_layout.h"

namespace colossal::parallel {

struct GeminiOptions {
  // "cuda", "cpu", "static" or "auto" (Colossal-AI's default: "static").
  std::string placement_policy = "static";
  double shard_param_frac = 1.0;
  double offload_optim_frac = 0.0;
  double offload_param_frac = 0.0;
  double warmup_non_model_data_ratio = 0.8;
  double steady_cuda_cap_ratio = 0.9;
  // Chunk search (chunk_layout.h): search_range_m, hidden_dim, min_chunk_size_m.
  ChunkSearchOptions chunks;
  // false: every chunk kept whole on every rank (Colossal-AI's
  // enable_distributed_storage).
  bool enable_distributed_storage = true;
  // The device's memory as the plugin counts it (0: the device's total).
  int64_t device_capacity_bytes = 0;
  // Non-model bytes on the device now (null: the device allocator's in-use
  // bytes less the plugin's; on the CPU stand-in 0).
  std::function<int64_t()> non_model_bytes;
  // CPU Adam's OpenMP threads for host-resident shards (0: OpenMP's default).
  int cpu_threads = 0;
  // CUDA: the GPU takes a share of the host chunks' Adam (colossal's own
  // setting): a second worker has the CUDA Adam kernel update a chunk's pinned
  // host state in place over PCIe while CPU Adam updates another; each takes
  // the next chunk of the queue as it finishes, so the split follows their
  // speeds. Its chunks' 16-bit values are updated in one of three device
  // buffers of a host shard each (when the device has room) and copied back,
  // and the next forward uses them there instead of copying them in; their
  // gradients are read on the device when the step's sums are kept there
  // (device_grad_accumulation). Results are bitwise those of CPU Adam alone.
  // false: CPU Adam alone.
  bool gpu_shares_host_adam = true;
  // Elements of one launch of that share (> 0): the launches are kept small
  // so the next forward's kernels get SMs between them (gemini_step.cc). Not
  // a recipe key: tests shrink it to cross slice edges on small models.
  int64_t gpu_host_adam_slice = int64_t{1} << 20;
  // CUDA, gradient accumulation (colossal's own setting): a host chunk's
  // gradients are summed over the micro-batches of a step on the device and
  // cross PCIe once, at the step, while the updates run — instead of each
  // micro-batch's part crossing and being added on the host. Used for a step
  // when the last step ran several backwards (or one, with
  // gpu_shares_host_adam, outside auto: the gradients then cross during the
  // backward as well, and the GPU's share reads them on the device) and its
  // device memory peak plus the sums (2 bytes a host parameter, 16-bit) fit
  // the capacity; the results are bitwise the same either way. false: always
  // on the host.
  bool device_grad_accumulation = true;
  // Chunks of the recorded order brought in this many chunks ahead of their
  // use (Colossal-AI's max_prefetch; 0: at use): with W > 1 sharded chunks
  // are all-gathered ahead on the communication stream (host shards cross
  // PCIe on a copy stream first); whole host chunks are copied in ahead on
  // the copy stream (CUDA) when the device has room. Their memory counts
  // against the device like chunks in use.
  int max_prefetch = 0;
  // Where the one-time notices go (null: stderr).
  std::function<void(const std::string&)> notice;
};

// Validates options (placement name, fractions in [0, 1], ratios in (0, 1],
// offload_param_frac <= offload_optim_frac). Errors: InvalidArgument naming
// the key (core::option_error: the message starts with it, and carries it);
// GeminiPlugin::create puts "gemini: " before them.
absl::Status validate_gemini_options(const GeminiOptions& options);

class GeminiPlugin : public Plugin {
 public:
  static absl::StatusOr<std::unique_ptr<GeminiPlugin>> create(std::shared_ptr<comm::ProcessGroup> pg,
                                                              const GeminiOptions& options = {});
  ~GeminiPlugin() override;

  const char* name() const override { return "gemini"; }
  int dp_rank() const override;
  int dp_size() const override;

  // Plans the chunks, allocates this rank's shards where the placement puts
  // them and draws their initial values (the same as one process's). Errors:
  // a store with memory (FailedPrecondition); a CUDA stream or a non-float32
  // table (Unimplemented); the placement does not fit (ResourceExhausted
  // naming the bytes and the policy that would).
  absl::Status materialize(nn::ParameterStore& store, uint64_t seed,
                           const core::Stream& stream) override;
  bool materialized(const nn::ParameterStore& store) const override;
  absl::Status boost(nn::Module& model, const nn::ParameterStore& store,
                     nn::Optimizer& optimizer) override;
  absl::Status begin_forward(core::Context& ctx) override;
  absl::Status end_forward(bool ok) override;
  absl::Status begin_backward(core::Context& ctx, bool sync) override;
  absl::Status end_backward(bool ok) override;
  absl::Status before_step(const core::Stream& stream) override;
  bool owns_step() const override { return true; }
  bool steps_declared_optimizer() const override { return true; }
  absl::Status zero_grad() override;
  absl::StatusOr<nn::MixedPrecisionStepResult> step(nn::DynamicLossScaler* scaler,
                                                    float max_norm) override;
  absl::StatusOr<nn::ParameterStore> model_state_dict(const nn::ParameterStore& store, int to_rank,
                                                      const core::Stream& stream) override;
  absl::Status load_model_state_dict(nn::ParameterStore& store, const nn::ParameterStore& state,
                                     const core::Stream& stream) override;
  absl::StatusOr<nn::OptimizerStateDict> optimizer_state_dict(const nn::Optimizer& optimizer,
                                                              int to_rank = -1) override;
  absl::Status load_optimizer_state_dict(nn::Optimizer& optimizer,
                                         const nn::OptimizerStateDict& state) override;
  bool streams_state() const override { return true; }
  absl::Status stream_model_state(const nn::ParameterStore& store, int to_rank,
                                  const nn::StatePieceFn& piece) override;
  absl::StatusOr<nn::StreamedOptimizerState> stream_optimizer_state(const nn::Optimizer& optimizer,
                                                                    int to_rank) override;

  // What materialize planned (valid after it).
  const ChunkLayout& layout() const;
  // Chunks whose shard lives on the device, and the device bytes the plugin
  // holds now / at most since materialize.
  int chunks_on_device() const;
  int64_t device_bytes() const;
  int64_t peak_device_bytes() const;
  // all_gathers of chunks since materialize (tests: release and reuse).
  int64_t gathers() const;
  // Of those, the ones issued ahead of the chunk's use (max_prefetch).
  int64_t gathers_ahead() const;
  // Host shards copied to the device ahead of their use (CUDA, max_prefetch),
  // not counting those a gather ahead copies for itself.
  int64_t copies_ahead() const;
  // Chunks moved from the device to the host to make room.
  int64_t evictions() const;
  // Host chunks' Adam updates the GPU ran (gpu_shares_host_adam) since materialize.
  int64_t gpu_host_updates() const;
  // Of those, the updates that left the chunk's new 16-bit values on the
  // device for the next forward (no copy in).
  int64_t gpu_value_handovers() const;
  // Steps whose host chunks' gradients were summed on the device
  // (device_grad_accumulation) since materialize.
  int64_t device_sum_steps() const;

  struct State;

 private:
  explicit GeminiPlugin(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;  // hooks hold weak references
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_GEMINI_GEMINI_PLUGIN_H_
