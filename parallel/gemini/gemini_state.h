// The gemini plugin's state, shared by its files (gemini_plugin.cc: chunks,
// placement and hooks; gemini_step.cc: the step and the checkpoints).
#ifndef COLOSSAL_PARALLEL_GEMINI_GEMINI_STATE_H_
#define COLOSSAL_PARALLEL_GEMINI_GEMINI_STATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "comm/process_group/process_group.h"
#include "core/tensor/tensor.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"
#include "nn/optim/optimizer.h"
#include "parallel/gemini/chunk_layout.h"
#include "parallel/gemini/gemini_plugin.h"

namespace colossal::parallel {

// A piece of a chunk's shard lying in one parameter: offset in the shard,
// length, the parameter's optimizer group.
struct GeminiPiece {
  int64_t offset = 0;
  int64_t count = 0;
  int group = 0;
};

struct GeminiChunk {
  ChunkSpec spec;
  bool sharded = true;       // else every rank holds the whole chunk
  int64_t shard_size = 0;    // spec.numel / W, or spec.numel
  int64_t shard_begin = 0;   // this rank's first element in the chunk
  bool on_device = false;    // where the shard and its optimizer state live
  // float32 [shard_size]: the master values (the weights), the accumulated
  // averaged gradients, the Adam moments.
  core::Tensor shard, grad_shard, exp_avg, exp_avg_sq;
  core::Tensor full;       // the gathered chunk [numel], while gathered
  core::Tensor full_grad;  // its gradients [numel], during a backward
  int compute = 0;         // modules running with this chunk
  int final_params = 0;    // parameters whose gradient is final in this backward
  bool reduced = false;    // reduced in this backward
  std::vector<GeminiPiece> pieces;
  int64_t shard_bytes() const { return shard_size * 4 * 4; }  // the four shard tensors
  // The full buffers alias the shard when it is whole and on the device.
  bool full_is_shard() const { return !sharded && on_device; }
};

struct GeminiPlugin::State {
  std::shared_ptr<comm::ProcessGroup> pg;
  GeminiOptions options;
  nn::ParameterStore store;
  bool materialized = false, boosted = false;
  ChunkLayout layout;
  std::vector<GeminiChunk> chunks;
  nn::Optimizer* optimizer = nullptr;
  int64_t steps = 0;  // Adam's step count, one for every parameter

  // Device accounting (the CPU stand-in and the CUDA device alike).
  int64_t capacity = 0;
  int64_t device_used = 0, device_peak = 0;
  int64_t gathers = 0, evictions = 0;
  bool told_offload = false;

  // Access order, per pass (0: forward, 1: backward): the chunk of every
  // access (module hook or fetch) of the first pass of that kind (recorded,
  // and checked across ranks when W > 1), and the cursor into it in later
  // passes (prefetch hints, release and eviction choices).
  std::vector<int> orders[2];
  bool recording[2] = {true, true};
  size_t cursor = 0;
  bool in_backward = false;
  bool auto_placed = false;  // auto: the placement after the warm-up step
  const std::vector<int>& order() const { return orders[in_backward]; }
  bool recording_now() const { return recording[in_backward]; }
  int64_t peak_non_model = 0;
  std::vector<int> touched;  // chunks gathered on demand in this pass

  int world() const { return pg->size(); }
  int rank() const { return pg->rank(); }
  void note(const std::string& message) const;
  int64_t non_model_bytes() const;

  // Device bytes: `bytes` more must fit (auto evicts to make room, except
  // chunk `keep`); the error names what did not fit.
  absl::Status reserve(int64_t bytes, int keep, const std::string& what);
  void release_bytes(int64_t bytes) { device_used -= bytes; }
  // Moves chunk c's shard and optimizer state to the device or the host.
  absl::Status move_chunk(int c, bool to_device);
  // The chunk used furthest in the future (from the cursor), among
  // device-resident chunks not in use; -1 if none.
  int furthest_chunk(int keep) const;

  // Gather (all_gather of the shards) / release of chunk c's values; its
  // gradient buffer; the reduction of its gradients into the shards.
  absl::Status access(int c, const std::string& param);
  absl::Status gather(int c);
  void release(int c);
  absl::Status ensure_grad(int c, const std::string& param);
  absl::Status reduce(int c);
  absl::Status set_views(int c);
  // The chunks of the parameters `params` (table indices), each once.
  std::vector<int> chunks_of(const std::vector<int>& params) const;
  // auto, after the warm-up step: as many chunks on the device as fit.
  absl::Status place_auto();
  // Ends the current pass: the first one of its kind stops recording (W > 1:
  // after checking that every rank's pass ended here too).
  absl::Status end_pass(bool ok);
  // Whether the next access in the recorded order is chunk c.
  bool next_use_is(int c) const;
  // First step, W > 1: every rank reports `param` (-1: the pass ended);
  // an error naming the first difference.
  absl::Status check_same_access(int64_t param);
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_GEMINI_GEMINI_STATE_H_
