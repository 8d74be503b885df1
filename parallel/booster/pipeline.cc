#include "parallel/booster/pipeline.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "nn/layers/tensor_parallel.h"
#include "parallel/booster/pipeline_runner.h"

namespace colossal::parallel {
namespace pipeline_internal {

StageRunner::StageRunner(core::Context& ctx, Booster& booster, nn::CausalLM& model,
                         const Plugin::Pipeline& pipe, absl::Span<const nn::MicroBatch> mbs,
                         const PipelineStepOptions& options)
    : ctx_(ctx),
      booster_(booster),
      model_(model),
      pipe_(pipe),
      mbs_(mbs),
      options_(options),
      in_flight_(model.pipeline_stage().num_chunks()) {}

absl::StatusOr<core::Tensor> StageRunner::hidden(size_t i) const {
  const core::Tensor& tokens = mbs_[i].tokens;
  // Sequence parallelism: the stages pass on this rank's positions.
  const nn::TensorParallel& tp = model_.tensor_parallel();
  int64_t positions = tokens.dim(1);
  if (tp.chunks_sequence()) positions /= tp.all_to_all() ? tp.sequence_size() : tp.size();
  return core::Tensor::empty({tokens.dim(0), positions, model_.hidden_size()}, model_.dtype(),
                             ctx_.compute_stream());
}

absl::Status StageRunner::exchange(const std::vector<Message>& sends,
                                   const std::vector<Message>& recvs, const std::string& what) {
  std::vector<comm::P2POp> ops;
  for (const auto& [list, kind] : {std::pair{&sends, comm::P2POp::Kind::kSend},
                                   std::pair{&recvs, comm::P2POp::Kind::kRecv}}) {
    for (const Message& m : *list) {
      COLOSSAL_ASSIGN_OR_RETURN(comm::Buffer b, comm::Buffer::of(*m.tensor));
      ops.push_back({kind, b, m.peer});
    }
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

nn::Module& StageRunner::runner(int c) { return chunks() == 1 ? model_ : model_.chunk(c); }

std::string StageRunner::where(int c, size_t i) const {
  if (chunks() == 1) return absl::StrCat("micro-batch ", i, ", pipeline stage ", pipe_.stage);
  return absl::StrCat("micro-batch ", i, ", pipeline stage ", pipe_.stage, ", model chunk ", c);
}

absl::StatusOr<core::Tensor> StageRunner::forward(int c, size_t i, const core::Tensor& input) {
  COLOSSAL_RETURN_IF_ERROR(core::annotate(model_.set_documents(mbs_[i].documents), where(c, i)));
  absl::StatusOr<nn::ForwardResult> out = booster_.forward(ctx_, runner(c), input);
  if (!out.ok()) return core::annotate(out.status(), where(c, i));
  core::Tensor grad;
  if (gives_logits(c)) {
    nn::CrossEntropyOptions ce;
    // Micro-batch i's share of the step: its weight, or 1 / M.
    const bool weighted = !options_.weights.empty();
    ce.dloss = static_cast<float>(weighted ? options_.loss_scale * options_.weights[i]
                                           : static_cast<double>(options_.loss_scale) / mbs_.size());
    ce.ignore_index = options_.ignore_index;
    ce.in_place = true;
    absl::StatusOr<nn::CrossEntropyResult> loss =
        model_.loss(ctx_, out->output, mbs_[i].targets, ce);
    if (!loss.ok()) return core::annotate(loss.status(), where(c, i));
    loss_sum_ += weighted ? options_.weights[i] * loss->loss : loss->loss;
    grad = loss->dlogits;
  }
  in_flight_[c].push_back({std::move(out->saved), grad});
  return out->output;
}

absl::StatusOr<core::Tensor> StageRunner::backward(int c, size_t i, const core::Tensor& grad,
                                                   bool sync) {
  if (in_flight_[c].empty()) {
    return absl::InternalError(
        absl::StrCat("pipeline schedule: a backward with no forward in flight (", where(c, i), ")"));
  }
  InFlight f = std::move(in_flight_[c].front());
  in_flight_[c].pop_front();
  std::optional<Booster::NoSync> no_sync;
  if (!sync) no_sync.emplace(booster_.no_sync());
  // Its documents again: activation checkpointing runs the forward here.
  COLOSSAL_RETURN_IF_ERROR(core::annotate(model_.set_documents(mbs_[i].documents), where(c, i)));
  absl::StatusOr<core::Tensor> dx =
      booster_.backward(ctx_, runner(c), *f.saved, gives_logits(c) ? f.loss_grad : grad);
  if (!dx.ok()) return core::annotate(dx.status(), where(c, i));
  return dx;
}

absl::StatusOr<float> StageRunner::forward_only(int c, size_t i, const core::Tensor& input) {
  COLOSSAL_RETURN_IF_ERROR(core::annotate(model_.set_documents(mbs_[i].documents), where(c, i)));
  absl::StatusOr<nn::ForwardResult> out = booster_.forward(ctx_, runner(c), input);
  if (!out.ok()) return core::annotate(out.status(), where(c, i));
  if (!gives_logits(c)) {
    output_ = out->output;
    return 0.0f;
  }
  nn::CrossEntropyOptions ce;
  ce.ignore_index = options_.ignore_index;
  ce.gradient = false;
  absl::StatusOr<nn::CrossEntropyResult> loss =
      model_.loss(ctx_, out->output, mbs_[i].targets, ce);
  if (!loss.ok()) return core::annotate(loss.status(), where(c, i));
  return loss->loss;
}

absl::StatusOr<core::Tensor> StageRunner::forward_output(int c, size_t i,
                                                         const core::Tensor& input) {
  COLOSSAL_RETURN_IF_ERROR(core::annotate(model_.set_documents(mbs_[i].documents), where(c, i)));
  absl::StatusOr<nn::ForwardResult> out = booster_.forward(ctx_, runner(c), input);
  if (!out.ok()) return core::annotate(out.status(), where(c, i));
  return out->output;
}

absl::StatusOr<float> share_loss(core::Context& ctx, const Plugin::Pipeline& pipe, double loss) {
  COLOSSAL_ASSIGN_OR_RETURN(const double sum,
                            nn::sum_over(ctx, *pipe.group, loss, "pipeline: the loss"));
  return static_cast<float>(sum);
}

}  // namespace pipeline_internal
namespace {

using pipeline_internal::Message;
using pipeline_internal::StageRunner;

// Checks common to the schedules: a pipeline, micro-batches, a model cut
// into the plugin's chunks.
absl::StatusOr<const Plugin::Pipeline*> check_pipeline(const char* what, Booster& booster,
                                                       const nn::CausalLM& model,
                                                       absl::Span<const nn::MicroBatch> mbs) {
  const Plugin::Pipeline* pipe = booster.plugin().pipeline();
  if (pipe == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": plugin ", booster.plugin().name(), " has no pipeline stages"));
  }
  if (mbs.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no micro-batches"));
  const nn::PipelineStage& stage = model.pipeline_stage();
  if (stage.count != pipe->stages || stage.index != pipe->stage ||
      stage.num_chunks() != pipe->chunks) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the model is stage ", stage.index, " of ", stage.count, " with ",
        stage.num_chunks(), " model chunks; the plugin runs stage ", pipe->stage, " of ",
        pipe->stages, " with ", pipe->chunks, " (declare the model as plugin.model_split says)"));
  }
  return pipe;
}

// The 1F1B schedule, one model chunk per stage (see pipeline.h).
absl::StatusOr<PipelineStepResult> run_one_f_one_b(StageRunner& st,
                                                   absl::Span<const nn::MicroBatch> micro_batches) {
  const Plugin::Pipeline& pipe = st.pipe();
  const size_t M = micro_batches.size();
  const size_t warmup = std::min<size_t>(pipe.stages - pipe.stage - 1, M);
  const size_t steady = M - warmup;
  const bool first = st.takes_tokens(0), last = st.gives_logits(0);
  const int prev = pipe.stage - 1, next = pipe.stage + 1;
  size_t fwd = 0, bwd = 0;
  // Gradients are reduced with the last micro-batch only.
  const auto sync = [&](size_t i) { return i + 1 == M; };

  // The input of micro-batch i: its tokens, or the previous stage's output.
  const auto receive_input = [&](size_t i) -> absl::StatusOr<core::Tensor> {
    if (first) return micro_batches[i].tokens;
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, st.hidden(i));
    COLOSSAL_RETURN_IF_ERROR(st.exchange({}, {{&x, prev}}, "receiving activations"));
    return x;
  };

  for (size_t k = 0; k < warmup; ++k, ++fwd) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, receive_input(fwd));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, st.forward(0, fwd, x));
    if (!last) COLOSSAL_RETURN_IF_ERROR(st.exchange({{&y, next}}, {}, "sending activations"));
  }
  core::Tensor x;
  if (steady > 0) {
    COLOSSAL_ASSIGN_OR_RETURN(x, receive_input(fwd));
  }
  for (size_t k = 0; k < steady; ++k, ++fwd, ++bwd) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, st.forward(0, fwd, x));
    core::Tensor dy;
    if (!last) {
      COLOSSAL_ASSIGN_OR_RETURN(dy, st.hidden(bwd));
      COLOSSAL_RETURN_IF_ERROR(
          st.exchange({{&y, next}}, {{&dy, next}}, "sending activations, receiving gradients"));
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, st.backward(0, bwd, dy, sync(bwd)));
    const bool more = k + 1 < steady;
    if (first) {
      if (more) x = micro_batches[fwd + 1].tokens;
      continue;
    }
    if (more) {
      COLOSSAL_ASSIGN_OR_RETURN(x, st.hidden(fwd + 1));
      COLOSSAL_RETURN_IF_ERROR(
          st.exchange({{&dx, prev}}, {{&x, prev}}, "sending gradients, receiving activations"));
    } else {
      COLOSSAL_RETURN_IF_ERROR(st.exchange({{&dx, prev}}, {}, "sending gradients"));
    }
  }
  for (size_t k = 0; k < warmup; ++k, ++bwd) {
    core::Tensor dy;
    if (!last) {
      COLOSSAL_ASSIGN_OR_RETURN(dy, st.hidden(bwd));
      COLOSSAL_RETURN_IF_ERROR(st.exchange({}, {{&dy, next}}, "receiving gradients"));
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, st.backward(0, bwd, dy, sync(bwd)));
    if (!first) COLOSSAL_RETURN_IF_ERROR(st.exchange({{&dx, prev}}, {}, "sending gradients"));
  }

  PipelineStepResult r;
  r.micro_batches = static_cast<int64_t>(M);
  COLOSSAL_ASSIGN_OR_RETURN(
      r.loss, pipeline_internal::share_loss(st.ctx(), pipe, last ? st.step_loss() : 0.0));
  return r;
}

}  // namespace

absl::StatusOr<PipelineStepResult> execute_pipeline(core::Context& ctx, Booster& booster,
                                                    nn::CausalLM& model,
                                                    absl::Span<const nn::MicroBatch> micro_batches,
                                                    const PipelineStepOptions& options) {
  COLOSSAL_ASSIGN_OR_RETURN(const Plugin::Pipeline* pipe,
                            check_pipeline("execute_pipeline", booster, model, micro_batches));
  if (!options.weights.empty()) {
    if (options.weights.size() != micro_batches.size()) {
      return absl::InvalidArgumentError(absl::StrCat("execute_pipeline: ", options.weights.size(),
                                                     " weights for ", micro_batches.size(),
                                                     " micro-batches"));
    }
    for (double w : options.weights) {
      if (!(w >= 0) || !std::isfinite(w)) {
        return absl::InvalidArgumentError(
            absl::StrCat("execute_pipeline: a micro-batch weight must be finite and >= 0, got ", w));
      }
    }
  }
  StageRunner st(ctx, booster, model, *pipe, micro_batches, options);
  if (pipe->chunks > 1) return pipeline_internal::run_interleaved(st, micro_batches);
  return run_one_f_one_b(st, micro_batches);
}

absl::StatusOr<float> evaluate_pipeline(core::Context& ctx, Booster& booster, nn::CausalLM& model,
                                        absl::Span<const nn::MicroBatch> micro_batches,
                                        const PipelineStepOptions& options) {
  COLOSSAL_ASSIGN_OR_RETURN(const Plugin::Pipeline* pipe,
                            check_pipeline("evaluate_pipeline", booster, model, micro_batches));
  StageRunner st(ctx, booster, model, *pipe, micro_batches, options);
  // Each micro-batch goes round the stages once per model chunk; every send
  // meets a stage waiting to receive it.
  double sum = 0.0;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    for (int c = 0; c < st.chunks(); ++c) {
      core::Tensor x = micro_batches[i].tokens;
      if (!st.takes_tokens(c)) {
        COLOSSAL_ASSIGN_OR_RETURN(x, st.hidden(i));
        COLOSSAL_RETURN_IF_ERROR(st.exchange({}, {{&x, st.prev()}}, "receiving activations"));
      }
      COLOSSAL_ASSIGN_OR_RETURN(float loss, st.forward_only(c, i, x));
      if (st.gives_logits(c)) {
        sum += loss;
      } else {
        COLOSSAL_RETURN_IF_ERROR(
            st.exchange({{&st.last_output(), st.next()}}, {}, "sending activations"));
      }
    }
  }
  return pipeline_internal::share_loss(
      ctx, *pipe, st.gives_logits(st.chunks() - 1) ? sum / micro_batches.size() : 0.0);
}

absl::StatusOr<core::Tensor> pipeline_logits(core::Context& ctx, Booster& booster,
                                             nn::CausalLM& model, const core::Tensor& tokens,
                                             bool last_position_only) {
  if (tokens.rank() != 2 || tokens.dim(1) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline_logits: tokens are ", tokens.to_string(), ", not [B, T]"));
  }
  const nn::MicroBatch mb{tokens, tokens, nullptr};  // no loss: the targets are not read
  const absl::Span<const nn::MicroBatch> mbs(&mb, 1);
  COLOSSAL_ASSIGN_OR_RETURN(const Plugin::Pipeline* pipe,
                            check_pipeline("pipeline_logits", booster, model, mbs));
  StageRunner st(ctx, booster, model, *pipe, mbs, {});
  const int64_t columns = model.padded_vocab_size() / model.tensor_parallel().size();
  const core::Stream& stream = ctx.compute_stream();
  // all_to_all leaves each rank its positions' logits; split_gather's head
  // gathers every position.
  const nn::TensorParallel& tp = model.tensor_parallel();
  const int64_t B = tokens.dim(0);
  const int64_t positions = tp.all_to_all() ? tokens.dim(1) / tp.sequence_size() : tokens.dim(1);
  const int64_t kept = last_position_only ? 1 : positions;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor logits,
                            core::Tensor::empty({B, kept, columns}, model.dtype(), stream));
  for (int c = 0; c < st.chunks(); ++c) {
    core::Tensor x = tokens;
    if (!st.takes_tokens(c)) {
      COLOSSAL_ASSIGN_OR_RETURN(x, st.hidden(0));
      COLOSSAL_RETURN_IF_ERROR(st.exchange({}, {{&x, st.prev()}}, "receiving activations"));
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, st.forward_output(c, 0, x));
    if (st.gives_logits(c)) {
      if (out.shape() != core::Shape{B, positions, columns}) {
        return absl::InternalError(absl::StrCat("pipeline_logits: the last stage gave ",
                                                out.to_string(), ", expected [", B, ", ",
                                                positions, ", ", columns, "]"));
      }
      if (!last_position_only) {
        COLOSSAL_RETURN_IF_ERROR(logits.copy_from(out, stream));
        continue;
      }
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor rows, out.reshape({B * positions, columns}));
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor lasts, logits.reshape({B, columns}));
      for (int64_t b = 0; b < B; ++b) {
        COLOSSAL_ASSIGN_OR_RETURN(core::Tensor src, rows.narrow(0, b * positions + positions - 1, 1));
        COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, lasts.narrow(0, b, 1));
        COLOSSAL_RETURN_IF_ERROR(dst.copy_from(src, stream));
      }
    } else {
      COLOSSAL_RETURN_IF_ERROR(st.exchange({{&out, st.next()}}, {}, "sending activations"));
    }
  }
  // The last stage's logits to every stage (the group's rank i is stage i).
  comm::CollectiveOptions o;
  if (stream.is_cuda()) o.stream = stream;
  COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, pipe->group->broadcast(logits, pipe->stages - 1, o));
  COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait_on(stream), "pipeline: sharing the logits"));
  return logits;
}

}  // namespace colossal::parallel
