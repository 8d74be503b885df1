// colossal::parallel (private to :pipeline) — one pipeline stage's side of a
// schedule: its model chunks' forwards and backwards through the booster,
// the last chunk's loss, and batched point-to-point exchanges with its
// neighbours. The schedules (pipeline.cc: 1F1B and evaluation,
// pipeline_interleaved.cc) decide the order.
#ifndef COLOSSAL_PARALLEL_BOOSTER_PIPELINE_RUNNER_H_
#define COLOSSAL_PARALLEL_BOOSTER_PIPELINE_RUNNER_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "nn/train/train_step.h"
#include "parallel/booster/booster.h"
#include "parallel/booster/pipeline.h"

namespace colossal::parallel::pipeline_internal {

// A tensor to send to, or receive from, a stage of the pipeline group.
struct Message {
  const core::Tensor* tensor;
  int peer;
};

class StageRunner {
 public:
  StageRunner(core::Context& ctx, Booster& booster, nn::CausalLM& model,
              const Plugin::Pipeline& pipe, absl::Span<const nn::MicroBatch> mbs,
              const PipelineStepOptions& options);

  core::Context& ctx() const { return ctx_; }
  const Plugin::Pipeline& pipe() const { return pipe_; }
  int chunks() const { return model_.pipeline_stage().num_chunks(); }
  bool takes_tokens(int c) const { return model_.pipeline_stage().takes_tokens(c); }
  bool gives_logits(int c) const { return model_.pipeline_stage().gives_logits(c); }
  // The neighbours on the ring of stages (the last stage's next is the first:
  // the interleaved schedule's chunks go round).
  int next() const { return (pipe_.stage + 1) % pipe_.stages; }
  int prev() const { return (pipe_.stage + pipe_.stages - 1) % pipe_.stages; }

  // A hidden-state buffer of micro-batch i's shape.
  absl::StatusOr<core::Tensor> hidden(size_t i) const;

  // One batch: every send, then every receive (per peer in this order, so
  // two stages that exchange both ways agree on which message is which).
  absl::Status exchange(const std::vector<Message>& sends, const std::vector<Message>& recvs,
                        const std::string& what);

  // Chunk c's forward of micro-batch i on `input` (tokens where it takes
  // them); where it gives logits also the loss, whose gradient starts that
  // micro-batch's backward. Returns the output (hidden states to send on).
  absl::StatusOr<core::Tensor> forward(int c, size_t i, const core::Tensor& input);
  // The backward of chunk c's oldest micro-batch in flight (`grad` from the
  // next stage, ignored where the chunk computed the loss); gradients are
  // reduced (the plugin's) only with `sync`. Returns the input gradient.
  absl::StatusOr<core::Tensor> backward(int c, size_t i, const core::Tensor& grad, bool sync);

  // Micro-batch i's forward of chunk c alone (evaluation): the loss where the
  // chunk gives logits, else 0 with the output kept for last_output().
  absl::StatusOr<float> forward_only(int c, size_t i, const core::Tensor& input);
  const core::Tensor& last_output() const { return output_; }
  // Micro-batch i's forward of chunk c alone, its output (logits where the
  // chunk gives them) returned as it is (generation).
  absl::StatusOr<core::Tensor> forward_output(int c, size_t i, const core::Tensor& input);

  // The step's loss so far: the micro-batches' mean losses weighted by
  // options.weights (their mean without weights, once every one has run).
  double step_loss() const { return options_.weights.empty() ? loss_sum_ / mbs_.size() : loss_sum_; }

 private:
  struct InFlight {
    std::unique_ptr<nn::Saved> saved;
    core::Tensor loss_grad;  // the loss chunk's dlogits
  };
  // The module that runs chunk c: the model itself when it has one chunk.
  nn::Module& runner(int c);
  std::string where(int c, size_t i) const;

  core::Context& ctx_;
  Booster& booster_;
  nn::CausalLM& model_;
  const Plugin::Pipeline& pipe_;
  absl::Span<const nn::MicroBatch> mbs_;
  PipelineStepOptions options_;
  std::vector<std::deque<InFlight>> in_flight_;  // per chunk, oldest first
  core::Tensor output_;                          // forward_only's
  double loss_sum_ = 0.0;
};

// `loss` (the loss stage's; 0 elsewhere) summed over the stages: every
// stage gets the loss stage's value.
absl::StatusOr<float> share_loss(core::Context& ctx, const Plugin::Pipeline& pipe, double loss);

// The interleaved schedule (pipeline_interleaved.cc): execute_pipeline with
// more than one model chunk per stage.
absl::StatusOr<PipelineStepResult> run_interleaved(StageRunner& st,
                                                   absl::Span<const nn::MicroBatch> mbs);

}  // namespace colossal::parallel::pipeline_internal

#endif  // COLOSSAL_PARALLEL_BOOSTER_PIPELINE_RUNNER_H_
