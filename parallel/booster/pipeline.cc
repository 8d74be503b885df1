#include "parallel/booster/pipeline.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"

namespace colossal::parallel {
namespace {

// One stage's view of the schedule: its neighbours, its sends and receives.
class Stage {
 public:
  Stage(core::Context& ctx, Booster& booster, nn::CausalLM& model, const Plugin::Pipeline& pipe,
        absl::Span<const nn::MicroBatch> mbs, const PipelineStepOptions& options)
      : ctx_(ctx), booster_(booster), model_(model), pipe_(pipe), mbs_(mbs), options_(options) {}

  bool first() const { return pipe_.stage == 0; }
  bool last() const { return pipe_.stage == pipe_.stages - 1; }

  // A hidden-state buffer of micro-batch i's shape.
  absl::StatusOr<core::Tensor> hidden(size_t i) const {
    const core::Tensor& tokens = mbs_[i].tokens;
    return core::Tensor::empty({tokens.dim(0), tokens.dim(1), model_.hidden_size()}, model_.dtype(),
                               ctx_.compute_stream());
  }

  // Sends `send` to stage `send_to` and receives `recv` from `recv_from` in
  // one batch (either may be absent).
  absl::Status exchange(const core::Tensor* send, int send_to, const core::Tensor* recv,
                        int recv_from, const std::string& what) {
    std::vector<comm::P2POp> ops;
    if (send != nullptr) {
      COLOSSAL_ASSIGN_OR_RETURN(comm::Buffer b, comm::Buffer::of(*send));
      ops.push_back({comm::P2POp::Kind::kSend, b, send_to});
    }
    if (recv != nullptr) {
      COLOSSAL_ASSIGN_OR_RETURN(comm::Buffer b, comm::Buffer::of(*recv));
      ops.push_back({comm::P2POp::Kind::kRecv, b, recv_from});
    }
    if (ops.empty()) return absl::OkStatus();
    comm::CollectiveOptions o;
    const bool cuda = ctx_.device().is_cuda();
    if (cuda) o.stream = ctx_.compute_stream();
    const std::string where = absl::StrCat("pipeline stage ", pipe_.stage, ": ", what);
    absl::StatusOr<comm::WorkPtr> w = pipe_.p2p->batch_send_recv(ops, o);
    if (!w.ok()) return core::annotate(w.status(), where);
    if (cuda) {
      (*w)->wait_stream(ctx_.compute_stream());
      return absl::OkStatus();
    }
    return core::annotate((*w)->wait(), where);
  }

  // The forward of micro-batch i on `input` (tokens on the first stage);
  // on the last stage also its loss, whose gradient starts the backward.
  absl::StatusOr<core::Tensor> forward(size_t i, const core::Tensor& input) {
    const std::string where = absl::StrCat("micro-batch ", i, ", pipeline stage ", pipe_.stage);
    absl::StatusOr<nn::ForwardResult> out = booster_.forward(ctx_, model_, input);
    if (!out.ok()) return core::annotate(out.status(), where);
    core::Tensor grad;
    if (last()) {
      nn::CrossEntropyOptions ce;
      ce.dloss = static_cast<float>(static_cast<double>(options_.loss_scale) / mbs_.size());
      ce.ignore_index = options_.ignore_index;
      ce.in_place = true;
      absl::StatusOr<nn::CrossEntropyResult> loss =
          model_.loss(ctx_, out->output, mbs_[i].targets, ce);
      if (!loss.ok()) return core::annotate(loss.status(), where);
      loss_sum_ += loss->loss;
      grad = loss->dlogits;
    }
    in_flight_.push_back({std::move(out->saved), grad});
    return out->output;
  }

  // The backward of the oldest micro-batch in flight (`grad` from the next
  // stage, or the loss's); returns the input gradient for the previous one.
  absl::StatusOr<core::Tensor> backward(size_t i, const core::Tensor& grad) {
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    // Gradients are reduced with the last micro-batch only.
    std::optional<Booster::NoSync> no_sync;
    if (i + 1 < mbs_.size()) no_sync.emplace(booster_.no_sync());
    absl::StatusOr<core::Tensor> dx =
        booster_.backward(ctx_, model_, *f.saved, last() ? f.loss_grad : grad);
    if (!dx.ok()) {
      return core::annotate(dx.status(),
                            absl::StrCat("micro-batch ", i, ", pipeline stage ", pipe_.stage));
    }
    return dx;
  }

  // Micro-batch i's forward alone (evaluation): the last stage's loss, or
  // 0 with the output kept for last_output().
  absl::StatusOr<float> forward_only(size_t i, const core::Tensor& input) {
    const std::string where = absl::StrCat("micro-batch ", i, ", pipeline stage ", pipe_.stage);
    absl::StatusOr<nn::ForwardResult> out = booster_.forward(ctx_, model_, input);
    if (!out.ok()) return core::annotate(out.status(), where);
    if (!last()) {
      output_ = out->output;
      return 0.0f;
    }
    nn::CrossEntropyOptions ce;
    ce.ignore_index = options_.ignore_index;
    ce.gradient = false;
    absl::StatusOr<nn::CrossEntropyResult> loss =
        model_.loss(ctx_, out->output, mbs_[i].targets, ce);
    if (!loss.ok()) return core::annotate(loss.status(), where);
    return loss->loss;
  }
  const core::Tensor& last_output() const { return output_; }

  double loss_sum() const { return loss_sum_; }

 private:
  struct InFlight {
    std::unique_ptr<nn::Saved> saved;
    core::Tensor loss_grad;  // the last stage's dlogits
  };
  core::Context& ctx_;
  Booster& booster_;
  nn::CausalLM& model_;
  const Plugin::Pipeline& pipe_;
  absl::Span<const nn::MicroBatch> mbs_;
  PipelineStepOptions options_;
  std::deque<InFlight> in_flight_;
  core::Tensor output_;  // forward_only's
  double loss_sum_ = 0.0;
};

// `loss` (the last stage's; 0 elsewhere) summed over the stages: every
// stage gets the last stage's value.
absl::StatusOr<float> share_loss(core::Context& ctx, const Plugin::Pipeline& pipe, double loss) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t,
                            core::Tensor::empty({1}, core::DType::kF32, core::Stream::cpu()));
  t.data<float>()[0] = static_cast<float>(loss);
  comm::CollectiveOptions o;
  if (ctx.device().is_cuda()) {
    COLOSSAL_ASSIGN_OR_RETURN(t, t.to(ctx.device(), ctx.compute_stream()));
    o.stream = ctx.compute_stream();
  }
  COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, pipe.group->all_reduce(t, comm::ReduceOp::kSum, o));
  COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "pipeline: the loss"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host, t.to(core::Device::cpu(), ctx.compute_stream()));
  ctx.compute_stream().synchronize();
  return host.data<float>()[0];
}

}  // namespace

absl::StatusOr<PipelineStepResult> execute_pipeline(core::Context& ctx, Booster& booster,
                                                    nn::CausalLM& model,
                                                    absl::Span<const nn::MicroBatch> micro_batches,
                                                    const PipelineStepOptions& options) {
  const Plugin::Pipeline* pipe = booster.plugin().pipeline();
  if (pipe == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "execute_pipeline: plugin ", booster.plugin().name(), " has no pipeline stages"));
  }
  if (micro_batches.empty())
    return absl::InvalidArgumentError("execute_pipeline: no micro-batches");
  Stage st(ctx, booster, model, *pipe, micro_batches, options);
  const size_t M = micro_batches.size();
  const size_t warmup = std::min<size_t>(pipe->stages - pipe->stage - 1, M);
  const size_t steady = M - warmup;
  const int prev = pipe->stage - 1, next = pipe->stage + 1;
  size_t fwd = 0, bwd = 0;

  // The input of micro-batch i: its tokens, or the previous stage's output.
  const auto receive_input = [&](size_t i) -> absl::StatusOr<core::Tensor> {
    if (st.first()) return micro_batches[i].tokens;
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, st.hidden(i));
    COLOSSAL_RETURN_IF_ERROR(st.exchange(nullptr, 0, &x, prev, "receiving activations"));
    return x;
  };

  for (size_t k = 0; k < warmup; ++k, ++fwd) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, receive_input(fwd));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, st.forward(fwd, x));
    if (!st.last()) {
      COLOSSAL_RETURN_IF_ERROR(st.exchange(&y, next, nullptr, 0, "sending activations"));
    }
  }
  core::Tensor x;
  if (steady > 0) {
    COLOSSAL_ASSIGN_OR_RETURN(x, receive_input(fwd));
  }
  for (size_t k = 0; k < steady; ++k, ++fwd, ++bwd) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, st.forward(fwd, x));
    core::Tensor dy;
    if (!st.last()) {
      COLOSSAL_ASSIGN_OR_RETURN(dy, st.hidden(bwd));
      COLOSSAL_RETURN_IF_ERROR(
          st.exchange(&y, next, &dy, next, "sending activations, receiving gradients"));
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, st.backward(bwd, dy));
    const bool more = k + 1 < steady;
    if (st.first()) {
      if (more) x = micro_batches[fwd + 1].tokens;
      continue;
    }
    if (more) {
      COLOSSAL_ASSIGN_OR_RETURN(x, st.hidden(fwd + 1));
      COLOSSAL_RETURN_IF_ERROR(
          st.exchange(&dx, prev, &x, prev, "sending gradients, receiving activations"));
    } else {
      COLOSSAL_RETURN_IF_ERROR(st.exchange(&dx, prev, nullptr, 0, "sending gradients"));
    }
  }
  for (size_t k = 0; k < warmup; ++k, ++bwd) {
    core::Tensor dy;
    if (!st.last()) {
      COLOSSAL_ASSIGN_OR_RETURN(dy, st.hidden(bwd));
      COLOSSAL_RETURN_IF_ERROR(st.exchange(nullptr, 0, &dy, next, "receiving gradients"));
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, st.backward(bwd, dy));
    if (!st.first()) {
      COLOSSAL_RETURN_IF_ERROR(st.exchange(&dx, prev, nullptr, 0, "sending gradients"));
    }
  }

  PipelineStepResult r;
  r.micro_batches = static_cast<int64_t>(M);
  COLOSSAL_ASSIGN_OR_RETURN(r.loss, share_loss(ctx, *pipe, st.last() ? st.loss_sum() / M : 0.0));
  return r;
}

absl::StatusOr<float> evaluate_pipeline(core::Context& ctx, Booster& booster, nn::CausalLM& model,
                                        absl::Span<const nn::MicroBatch> micro_batches,
                                        const PipelineStepOptions& options) {
  const Plugin::Pipeline* pipe = booster.plugin().pipeline();
  if (pipe == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "evaluate_pipeline: plugin ", booster.plugin().name(), " has no pipeline stages"));
  }
  if (micro_batches.empty())
    return absl::InvalidArgumentError("evaluate_pipeline: no micro-batches");
  Stage st(ctx, booster, model, *pipe, micro_batches, options);
  double sum = 0.0;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    core::Tensor x = micro_batches[i].tokens;
    if (!st.first()) {
      COLOSSAL_ASSIGN_OR_RETURN(x, st.hidden(i));
      COLOSSAL_RETURN_IF_ERROR(
          st.exchange(nullptr, 0, &x, pipe->stage - 1, "receiving activations"));
    }
    COLOSSAL_ASSIGN_OR_RETURN(float loss, st.forward_only(i, x));
    if (st.last()) {
      sum += loss;
    } else {
      COLOSSAL_RETURN_IF_ERROR(
          st.exchange(&st.last_output(), pipe->stage + 1, nullptr, 0, "sending activations"));
    }
  }
  return share_loss(ctx, *pipe, st.last() ? sum / micro_batches.size() : 0.0);
}

}  // namespace colossal::parallel
