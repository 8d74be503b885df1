// The interleaved schedule (Colossal-AI's InterleavedSchedule; Megatron-LM's
// forward_backward_pipelining_with_interleaving): each of P stages holds C
// model chunks, chunk c of stage s being virtual stage s + c * P, so a
// micro-batch goes round the ring of stages C times. Work step k of a stage
// (k < M * C, forwards and backwards alike) is micro-batch
// (k / (P C)) * P + k % P of chunk (k % (P C)) / P (backwards take the chunks
// in reverse). Stage s first runs min(2 (P - s - 1) + (C - 1) P, M C)
// forwards (all of them when M == P), then one forward and one backward per
// round, then the remaining backwards. Each round is one batched exchange
// with both neighbours: send the forward's output on, the backward's input
// gradient back, receive the next input and output gradient. The pipeline
// bubble shrinks by C against 1F1B, for C times the point-to-point traffic.
//
// Messages between two stages are matched in the order they were posted (per
// peer, as NCCL and the builtin backend match them), so each stage knows the
// chunk and micro-batch of every message it receives from its neighbour's
// order of work; the schedule's choice of what to receive in each round is
// checked against it (an Internal error names a schedule bug rather than
// training on another micro-batch's activations).
#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "parallel/booster/pipeline_runner.h"

namespace colossal::parallel::pipeline_internal {
namespace {

// What the n-th message from a neighbour in one direction is for.
struct Label {
  int chunk;
  size_t micro_batch;
};

class Interleaved {
 public:
  Interleaved(StageRunner& st, absl::Span<const nn::MicroBatch> mbs)
      : st_(st),
        mbs_(mbs),
        P_(st.pipe().stages),
        r_(st.pipe().stage),
        C_(st.chunks()),
        total_(static_cast<int64_t>(mbs.size()) * C_),
        inputs_(C_),
        grads_(C_) {
    // The neighbours' orders of work give the labels of what they send.
    const int prev = st.prev(), next = st.next();
    for (int64_t k = 0; k < total_; ++k) {
      const int fc = chunk_of(k, /*forward=*/true), bc = chunk_of(k, /*forward=*/false);
      // prev sends every forward's output but the loss chunk's; the first
      // stage's chunk c + 1 takes the last stage's chunk c.
      if (!(prev == P_ - 1 && fc == C_ - 1)) {
        activation_labels_.push_back({r_ == 0 ? fc + 1 : fc, micro_batch_of(k)});
      }
      // next sends every backward's input gradient but the token chunk's.
      if (!(next == 0 && bc == 0)) {
        gradient_labels_.push_back({r_ == P_ - 1 ? bc - 1 : bc, micro_batch_of(k)});
      }
    }
  }

  absl::StatusOr<PipelineStepResult> run() {
    const size_t M = mbs_.size();
    const bool all_warmup = static_cast<int>(M) == P_;
    const int64_t warmup =
        all_warmup ? total_ : std::min<int64_t>(2 * (P_ - r_ - 1) + int64_t{C_ - 1} * P_, total_);
    const int64_t remaining = total_ - warmup;

    // Warm-up: forwards only; the last one also receives the first gradient.
    if (!st_.takes_tokens(0)) {
      COLOSSAL_RETURN_IF_ERROR(round(nullptr, nullptr, 0, -1, "receiving activations"));
    }
    for (int64_t k = 0; k < warmup; ++k) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, forward_step(k));
      const int next_fc = chunk_of(k + 1, true);
      const bool recv_prev = !(r_ == 0 && next_fc == 0) && k != total_ - 1;
      const bool recv_next = k == warmup - 1 && !all_warmup && r_ != P_ - 1;
      COLOSSAL_RETURN_IF_ERROR(round(sends_on(k, y), nullptr, recv_prev ? next_fc : -1,
                                     recv_next ? C_ - 1 : -1, "warm-up"));
    }
    // Steady state: one forward and one backward per round.
    for (int64_t k = 0; k < remaining; ++k) {
      const int64_t fk = k + warmup;
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, forward_step(fk));
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, backward_step(k));
      bool recv_prev = true, recv_next = true;
      int next_fc, next_bc;
      if (r_ == 0) {  // its chunks > 0 take the last stage's, which is P - 1 steps behind
        next_fc = chunk_of(fk - (P_ - 1), true);
        recv_prev = next_fc != C_ - 1;
        ++next_fc;
      } else {
        next_fc = chunk_of(fk + 1, true);
      }
      if (r_ == P_ - 1) {  // likewise for the gradients from the first stage
        next_bc = chunk_of(k - (P_ - 1), false);
        recv_next = next_bc != 0;
        --next_bc;
      } else {
        next_bc = chunk_of(k + 1, false);
      }
      if (k == remaining - 1) recv_prev = false;
      COLOSSAL_RETURN_IF_ERROR(round(sends_on(fk, y), sends_back(k, dx),
                                     recv_prev ? next_fc : -1, recv_next ? next_bc : -1,
                                     "steady state"));
    }
    // Cool-down: the remaining backwards.
    if (all_warmup && r_ != P_ - 1) {
      COLOSSAL_RETURN_IF_ERROR(round(nullptr, nullptr, -1, C_ - 1, "receiving gradients"));
    }
    for (int64_t k = remaining; k < total_; ++k) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, backward_step(k));
      const int next_bc = chunk_of(k + 1, false);
      const bool recv_next = !(r_ == P_ - 1 && next_bc == C_ - 1) && k != total_ - 1;
      COLOSSAL_RETURN_IF_ERROR(
          round(nullptr, sends_back(k, dx), -1, recv_next ? next_bc : -1, "cool-down"));
    }
    if (!activation_labels_.empty() || !gradient_labels_.empty()) {
      return absl::InternalError(absl::StrCat(
          "interleaved pipeline schedule, stage ", r_, ": ", activation_labels_.size(),
          " activations and ", gradient_labels_.size(), " gradients were never received"));
    }
    PipelineStepResult result;
    result.micro_batches = static_cast<int64_t>(M);
    COLOSSAL_ASSIGN_OR_RETURN(
        result.loss,
        share_loss(st_.ctx(), st_.pipe(), st_.gives_logits(C_ - 1) ? st_.step_loss() : 0.0));
    return result;
  }

 private:
  // Work step k's chunk (negative k: Python's modulo, as Megatron's).
  int chunk_of(int64_t k, bool forward) const {
    const int64_t group = int64_t{P_} * C_;
    const int c = static_cast<int>(((k % group + group) % group) / P_);
    return forward ? c : C_ - 1 - c;
  }
  size_t micro_batch_of(int64_t k) const {
    const int64_t group = int64_t{P_} * C_;
    return static_cast<size_t>((k / group) * P_ + k % P_);
  }

  absl::StatusOr<core::Tensor> forward_step(int64_t k) {
    const int c = chunk_of(k, true);
    const size_t i = micro_batch_of(k);
    if (st_.takes_tokens(c)) return st_.forward(c, i, mbs_[i].tokens);
    if (inputs_[c].empty()) return schedule_error(absl::StrCat("no input for chunk ", c));
    core::Tensor x = std::move(inputs_[c].front());
    inputs_[c].pop_front();
    return st_.forward(c, i, x);
  }

  // Gradients are reduced with the stage's last backward only: every
  // parameter's gradient is final then (the chunks' last backwards come at
  // different times, and a reduction finalises every parameter).
  absl::StatusOr<core::Tensor> backward_step(int64_t k) {
    const int c = chunk_of(k, false);
    const size_t i = micro_batch_of(k);
    core::Tensor grad;
    if (!st_.gives_logits(c)) {
      if (grads_[c].empty()) return schedule_error(absl::StrCat("no gradient for chunk ", c));
      grad = std::move(grads_[c].front());
      grads_[c].pop_front();
    }
    return st_.backward(c, i, grad, /*sync=*/k == total_ - 1);
  }

  // Forward step k's output, unless its chunk computed the loss.
  const core::Tensor* sends_on(int64_t k, const core::Tensor& y) const {
    return st_.gives_logits(chunk_of(k, true)) ? nullptr : &y;
  }
  // Backward step k's input gradient, unless its chunk took the tokens.
  const core::Tensor* sends_back(int64_t k, const core::Tensor& dx) const {
    return st_.takes_tokens(chunk_of(k, false)) ? nullptr : &dx;
  }

  // One batched exchange: `y` to the next stage and `dx` to the previous
  // (when given); an activation for chunk `recv_chunk` from the previous and
  // a gradient for chunk `grad_chunk` from the next (when >= 0).
  absl::Status round(const core::Tensor* y, const core::Tensor* dx, int recv_chunk,
                     int grad_chunk, const char* phase) {
    std::vector<Message> sends, recvs;
    if (y != nullptr) sends.push_back({y, st_.next()});
    if (dx != nullptr) sends.push_back({dx, st_.prev()});
    core::Tensor x, g;
    if (recv_chunk >= 0) {
      COLOSSAL_ASSIGN_OR_RETURN(Label l, take(activation_labels_, recv_chunk, "activation"));
      COLOSSAL_ASSIGN_OR_RETURN(x, st_.hidden(l.micro_batch));
      recvs.push_back({&x, st_.prev()});
    }
    if (grad_chunk >= 0) {
      COLOSSAL_ASSIGN_OR_RETURN(Label l, take(gradient_labels_, grad_chunk, "gradient"));
      COLOSSAL_ASSIGN_OR_RETURN(g, st_.hidden(l.micro_batch));
      recvs.push_back({&g, st_.next()});
    }
    COLOSSAL_RETURN_IF_ERROR(st_.exchange(sends, recvs, absl::StrCat("interleaved ", phase)));
    if (recv_chunk >= 0) inputs_[recv_chunk].push_back(std::move(x));
    if (grad_chunk >= 0) grads_[grad_chunk].push_back(std::move(g));
    return absl::OkStatus();
  }

  absl::StatusOr<Label> take(std::deque<Label>& labels, int chunk, const char* what) {
    if (labels.empty() || labels.front().chunk != chunk) {
      return schedule_error(absl::StrCat(
          "receiving an ", what, " for chunk ", chunk, " where the neighbour sends ",
          labels.empty() ? std::string("nothing more")
                         : absl::StrCat("chunk ", labels.front().chunk, "'s")));
    }
    Label l = labels.front();
    labels.pop_front();
    return l;
  }

  absl::Status schedule_error(const std::string& what) const {
    return absl::InternalError(
        absl::StrCat("interleaved pipeline schedule, stage ", r_, " of ", P_, ": ", what));
  }

  StageRunner& st_;
  absl::Span<const nn::MicroBatch> mbs_;
  const int P_, r_, C_;
  const int64_t total_;
  std::deque<Label> activation_labels_, gradient_labels_;
  std::vector<std::deque<core::Tensor>> inputs_, grads_;  // received, per chunk
};

}  // namespace

absl::StatusOr<PipelineStepResult> run_interleaved(StageRunner& st,
                                                   absl::Span<const nn::MicroBatch> mbs) {
  const int P = st.pipe().stages;
  if (mbs.size() % P != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("execute_pipeline: the interleaved schedule takes a multiple of pp_size ", P,
                     " micro-batches (num_microbatches; a recipe's accumulation_steps), got ",
                     mbs.size()));
  }
  Interleaved schedule(st, mbs);
  return schedule.run();
}

}  // namespace colossal::parallel::pipeline_internal
